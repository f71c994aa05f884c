"""MCP both ways, with the official SDK's own client and a FastMCP server written here.

- ``mcp_tools(server)``: a stdio FastMCP server's tools drive a toolgym env in several action formats; a
  result marked ``isError`` is an error observation with the marker once; arguments are checked against the
  tool's schema before they are sent; a call past the timeout is an error and the next call works; a server
  that dies is an ``infra_error`` and the next call reconnects; ``env.close()`` ends the server process.
- ``toolgym serve mcp``: the SDK's streamable-HTTP client lists and calls the tools; the python tool keeps an
  interpreter per MCP session; errors are ``isError`` results; ``--stdio`` answers the SDK's stdio client;
  and ``mcp_tools(URL)`` of that server plays a Calculator-v0 episode to reward 1.
"""

from __future__ import annotations

import asyncio
import os
import sys
import textwrap
import threading
import time

import gymnasium as gym
import pytest

pytest.importorskip("mcp", reason="the mcp extra (toolgym[mcp]) is not installed")
pytest.importorskip("fastmcp", reason="the mcp extra (toolgym[mcp]) is not installed")

import toolgym
from toolgym.core.task import Task
from toolgym.core.types import ToolCall
from toolgym.parsers.base import ERROR_MARKER
from toolgym.testing.scripted import oracle_script, script_texts
from toolgym.testing.servers import free_port
from toolgym.tools.mcp import MCPTool, mcp_tools

SERVER = textwrap.dedent(
    '''
    import os
    import time

    from fastmcp import FastMCP
    from fastmcp.exceptions import ToolError

    server = FastMCP("test-tools")
    calls = []


    @server.tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        calls.append("add")
        return a + b


    @server.tool
    def shout(text: str) -> str:
        """Upper-case a text."""
        if not text:
            raise ToolError("nothing to shout")
        return text.upper()


    @server.tool
    def stats() -> str:
        """How many calls this server process has answered, and its pid."""
        return f"{len(calls)} {os.getpid()}"


    @server.tool
    def nap(seconds: float) -> str:
        """Sleep."""
        time.sleep(seconds)
        return "awake"


    @server.tool
    def crash() -> str:
        """End the server process."""
        os._exit(3)


    if __name__ == "__main__":
        server.run(transport="stdio", show_banner=False)
    '''
)


@pytest.fixture
def server_command(tmp_path):
    path = tmp_path / "mcp_server.py"
    path.write_text(SERVER)
    return [sys.executable, str(path)]


def _tasks():
    return [Task(id="t1", prompt="Add 2 and 3.", answer="5")]


@pytest.mark.parametrize("action_format", ["xml", "hermes", "json", "react"])
def test_an_mcp_servers_tools_drive_an_env_in_each_format(server_command, action_format):
    tools = mcp_tools(server_command, names=["add", "shout"])
    assert [t.name for t in tools] == ["add", "shout"]
    assert tools[0].schema()["function"]["parameters"]["required"] == ["a", "b"]
    env = toolgym.make_env(_tasks(), tools, lambda task, answer: answer == "5", action_format=action_format)
    try:
        env.reset(seed=0)
        parser = env.unwrapped.parser
        assert "add" in env.unwrapped.system_prompt  # the format's instructions list the MCP tool
        action = parser.format_call(ToolCall(name="add", arguments={"a": 2, "b": 3}))
        observation, reward, terminated, _, info = env.step(action)
        assert "5" in observation and not terminated
        assert info["tool_results"][0].ok
        _, reward, terminated, _, _ = env.step(parser.format_answer("5"))
        assert (reward, terminated) == (1.0, True)
    finally:
        env.close()


def test_errors_schema_checks_timeouts_and_a_dead_server(server_command):
    tools = {t.name: t for t in mcp_tools(server_command, timeout=2.0)}
    assert all(isinstance(t, MCPTool) for t in tools.values())
    env = toolgym.make_env(_tasks(), list(tools.values()), lambda task, answer: answer == "5")
    try:
        env.reset(seed=0)
        observation, *_ = env.step("<shout></shout>")  # the server's ToolError: isError
        assert observation.count(ERROR_MARKER) == 1 and "nothing to shout" in observation
        assert env.unwrapped.trajectory.turns[-1].tool_results[0].status == "error"

        before = tools["stats"]({}).output.split()[0]
        bad = tools["add"]({"a": "two", "b": 3})  # refused here, never sent
        assert bad.status == "error" and "a: 'two' is not of type 'integer'" in bad.output
        assert tools["stats"]({}).output.split()[0] == before

        slow = tools["nap"]({"seconds": 30})
        assert slow.status == "error" and "timed out after 2 s" in slow.output
        assert tools["add"]({"a": 1, "b": 1}).output == "2"  # the next call works

        first_pid = tools["stats"]({}).output.split()[1]
        dead = tools["crash"]({})
        assert dead.status == "infra_error"
        again = tools["stats"]({}).output.split()  # reconnected: a new server process
        assert again[1] != first_pid and again[0] == "0"
    finally:
        env.close()
    assert _gone(int(again[1]))


def test_extra_tools_join_a_registered_env(server_command):
    env = gym.make("toolgym/Calculator-v0", extra_tools=mcp_tools(server_command, names=["add"]))
    try:
        assert list(env.unwrapped.tools) == ["calculator", "add"]
        env.reset(seed=0)
        observation, *_ = env.step('<add>{"a": 40, "b": 2}</add>')
        assert "42" in observation
    finally:
        env.close()


def _gone(pid: int) -> bool:
    """The process has exited (it may linger as a zombie until its parent reaps it)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


# -- toolgym serve mcp -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mcp_url():
    import uvicorn

    from toolgym.server.mcp import create_server
    from toolgym.server.tools_api import ToolServerConfig

    server, _runtime = create_server(ToolServerConfig(tools=["calculator", "python"]))
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(server.http_app(path="/mcp"), port=port, log_level="warning"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    while not uv.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    uv.should_exit = True
    thread.join(10)


def _sdk_http_client(url):
    from mcp.client import streamable_http

    client = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client
    return client(url)


def _is_error(result):
    return bool(getattr(result, "is_error", None) or getattr(result, "isError", False))


async def _session_calls(url, calls):
    from mcp import ClientSession

    async with _sdk_http_client(url) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        listed = await session.list_tools()
        out = []
        for name, arguments in calls:
            result = await session.call_tool(name, arguments)
            out.append((_is_error(result), result.content[0].text))
        return [t.name for t in listed.tools], out


def test_serve_mcp_answers_the_sdks_client_with_state_per_session(mcp_url):
    names, first = asyncio.run(
        _session_calls(
            mcp_url,
            [
                ("calculator", {"expression": "48213*1937"}),
                ("python", {"code": "x = 41"}),
                ("python", {"code": "print(x + 1)"}),
                ("calculator", {"expression": "1/0"}),
            ],
        )
    )
    assert names == ["calculator", "python"]
    assert first[0] == (False, "93388581")
    assert first[2] == (False, "42")
    assert first[3][0] and "division by zero" in first[3][1]
    _, second = asyncio.run(_session_calls(mcp_url, [("python", {"code": "print(x)"})]))
    assert second[0][0] and "NameError" in second[0][1]  # another MCP session: another interpreter


def test_mcp_tools_of_serve_mcp_play_an_episode_to_reward_one(mcp_url):
    tools = mcp_tools(mcp_url, names=["calculator"])
    env = gym.make("toolgym/Calculator-v0")
    remote = toolgym.make_env(
        env.unwrapped.tasks, tools, env.unwrapped.verifier, system_prompt=env.unwrapped.preamble
    )
    try:
        remote.reset(seed=3)
        reward = 0.0
        script = oracle_script("toolgym/Calculator-v0", remote.unwrapped.task)
        for action in script_texts(remote, script):
            _, reward, terminated, _, info = remote.step(action)
            if not terminated:
                assert all(r.ok for r in info["tool_results"])
        assert reward == 1.0
    finally:
        remote.close()
        env.close()


def test_serve_mcp_over_stdio_answers_the_sdks_stdio_client():
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def run():
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "toolgym.cli", "serve", "mcp", "--stdio", "--env", "toolgym/Calculator-v0"],
            env={**os.environ},
        )
        async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
            await session.initialize()
            names = [t.name for t in (await session.list_tools()).tools]
            result = await session.call_tool("calculator", {"expression": "2**10"})
            return names, result.content[0].text

    assert asyncio.run(run()) == (["calculator"], "1024")
