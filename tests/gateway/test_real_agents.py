"""Real agent programs from PyPI, unmodified, through the gateway (issue #44, item 5): a hand-written loop on
the ``openai`` SDK, smolagents' ``ToolCallingAgent`` on its ``OpenAIServerModel``, and mini-swe-agent solving
a ``toolgym/SWE-v0`` task with its commands in that task's sandbox (``toolgym.gateway.mini_swe``).

The model is the in-process gateway over a scripted engine (``ScriptedClient``) that writes what a correct
agent would, in the form the program parses (hermes ``<tool_call>`` blocks, which the gateway turns into
OpenAI ``tool_calls``). For each program, token by token: every call's prompt is the session's record so
far, the mask-1 tokens are exactly the sampled ones in order (with their logprobs) and every other response
token has mask 0; the number of segments is what the program's history handling implies; the reward is the
env verifier's verdict. Nothing here reaches past this machine (``offline``).

What each program needed: the ``openai`` loop, the session's base URL; smolagents, ``api_base`` and a tool
function posting to the gateway's tool endpoint; mini-swe-agent, its ``swebench.yaml`` with the model set to
litellm's ``openai/`` provider at the session's URL (``cost_tracking: ignore_errors``: a local model has no
price), ``environment_class: toolgym.gateway.mini_swe.GatewayEnvironment``, and, for litellm and
mini-swe-agent, the environment variables that keep them offline and quiet (``mini_swe_env``).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import socket
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import httpx
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.gateway import API_KEY, Gateway, GatewayConfig
from toolgym.rollout.models import make_renderer
from toolgym.rollout.token_record import message_text
from toolgym.testing.scripted import ScriptedClient, oracle_script, play_script, wrong_script

CALCULATOR = "toolgym/Calculator-v0"
SWE = "toolgym/SWE-v0"
#: the scripted engine's logprob of every sampled token
LOGPROB = -0.5
#: room for the frameworks' long system prompts (the scripted engine has no context of its own)
CONFIG = GatewayConfig(model="tiny", max_model_len=65536, default_max_tokens=4096)


@pytest.fixture(scope="module")
def renderer():
    return make_renderer("tiny", template_tools=True)


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    """Every connection and name lookup past loopback is refused and remembered; none may happen."""
    attempts: list[Any] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_getaddrinfo = socket.getaddrinfo

    def local(host: Any) -> bool:
        host = host.decode() if isinstance(host, bytes) else str(host)
        try:
            return ipaddress.ip_address(host).is_loopback
        except ValueError:
            return host == "localhost"

    def allowed(address: Any) -> bool:  # a UNIX socket's path, or (host, port, ...)
        return not isinstance(address, tuple) or local(address[0])

    def connect(self, address):
        if not allowed(address):
            attempts.append(address)
            raise ConnectionRefusedError(f"the test is offline: no connection to {address}")
        return real_connect(self, address)

    def connect_ex(self, address):
        if not allowed(address):
            attempts.append(address)
            return 111  # ECONNREFUSED
        return real_connect_ex(self, address)

    def getaddrinfo(host, *args, **kwargs):
        if host is not None and not local(host):
            attempts.append(host)
            raise socket.gaierror(socket.EAI_NONAME, f"the test is offline: no lookup of {host}")
        return real_getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield attempts
    assert attempts == [], f"the test tried to reach past this machine: {attempts}"


@pytest.fixture
def mini_swe_env(monkeypatch, tmp_path):
    """What keeps litellm and mini-swe-agent offline, quiet and out of the home directory (read at import)."""
    # litellm fetches its model price map from GitHub at import unless told to use its bundled copy
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # mini-swe-agent prints a banner at import and keeps a global config (a .env it loads) in ~/.config
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "mswea"))
    # a failing call fails at once instead of being retried with back-off for minutes
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")


# -- the scripted engine and the checks ------------------------------------------------------------------


class Scripts:
    """The texts the engine writes, per session (the gateway's request id), in turn order."""

    def __init__(self) -> None:
        self.texts: dict[str, list[str]] = {}

    def __call__(self, session_id: str, turn: int, _prompt: str) -> str:
        return self.texts[session_id][turn]


def hermes(call: ToolCall, thought: str = "") -> str:
    """A tool call as a hermes model writes it (the gateway's ``--tool-format``), after its reasoning."""
    block = f"<tool_call>\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n</tool_call>"
    return f"{thought}\n{block}" if thought else block


async def open_session(gateway: Gateway, env_id: str, **body: Any) -> tuple[dict[str, Any], Any]:
    """``POST /sessions`` on a task: the answer, and the task the session plays (to script its solution)."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=600) as http:
        response = await http.post("/sessions", json={"env_id": env_id, **body})
    assert response.status_code == 201, response.text
    session = response.json()
    env = gateway.core.get(session["session_id"]).env
    assert env is not None
    return session, env.inner.task


async def finish_and_end(gateway: Gateway, session_id: str, answer: str | None) -> dict[str, Any]:
    """Judge ``answer`` with the env's verifier, end the session, and return its final record."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=600) as http:
        verdict = await http.post(f"/sessions/{session_id}/finish", json={"answer": answer})
        assert verdict.status_code == 200, verdict.text
        record = await http.delete(f"/sessions/{session_id}")
    assert record.status_code == 200, record.text
    body = record.json()
    assert body["reward"] == verdict.json()["reward"]
    return body


def check_tokens(record: dict[str, Any], engine: ScriptedClient, segments: int) -> None:
    """The record holds exactly what the engine saw and sampled: walking each segment's calls, every call's
    prompt is the segment's ids so far, the tokens it added before sampling have mask 0 (logprob 0), and the
    sampled tokens follow exactly, with mask 1 and the engine's logprobs; nothing else is in the response."""
    assert record["num_segments"] == len(record["segments"]) == segments
    assert sum(len(s["calls"]) for s in record["segments"]) == len(engine.generated)
    call_index = 0
    for segment in record["segments"]:
        prompt, response = segment["prompt_ids"], segment["response_ids"]
        mask, logprobs = segment["response_mask"], segment["logprobs"]
        assert len(response) == len(mask) == len(logprobs)
        at = 0
        for i, call in enumerate(segment["calls"]):
            if i == 0:  # a segment starts with its call's whole prompt
                assert call["new_context_tokens"] == len(prompt)
            else:
                added = call["new_context_tokens"]
                assert added > 0
                assert mask[at : at + added] == [0] * added
                assert logprobs[at : at + added] == [0.0] * added
                at += added
            assert engine.prompts[call_index] == [*prompt, *response[:at]], f"call {call_index}'s prompt"
            sampled = engine.generated[call_index]
            assert call["completion_tokens"] == len(sampled)
            assert response[at : at + len(sampled)] == sampled, f"call {call_index}'s sampled tokens"
            assert mask[at : at + len(sampled)] == [1] * len(sampled)
            assert logprobs[at : at + len(sampled)] == [LOGPROB] * len(sampled)
            at += len(sampled)
            call_index += 1
        assert at == len(response)
    # the same, stated as the issue states it: the mask-1 tokens, in order, are the sampled tokens
    kept = [t for s in record["segments"] for t, m in zip(s["response_ids"], s["response_mask"]) if m == 1]
    assert kept == [t for ids in engine.generated for t in ids]
    assert {m for s in record["segments"] for m in s["response_mask"]} <= {0, 1}
    # the top-level record is the last segment, which holds the verdict
    last = record["segments"][-1]
    assert (record["prompt_ids"], record["response_ids"]) == (last["prompt_ids"], last["response_ids"])


def env_verdict(env_id: str, task: Any, script: Sequence[ToolCall | str]) -> float:
    """The env's own reward for ``script`` on ``task``, played with ``env.step`` (no gateway)."""
    env = gym.make(env_id)
    try:
        return play_script(env, script, options={"task": task}).reward
    finally:
        env.close()


def run(coro_fn: Callable[..., Any], *args: Any) -> Any:
    return asyncio.run(coro_fn(*args))


# -- (a) the openai SDK ----------------------------------------------------------------------------------


@pytest.mark.parametrize("solved", [True, False], ids=["solved", "wrong-answer"])
def test_an_openai_sdk_loop_with_function_tools_over_several_turns(renderer, solved):
    from openai import AsyncOpenAI

    scripts = Scripts()
    engine = ScriptedClient(renderer, scripts)

    async def main():
        async with Gateway(CONFIG, client=engine, renderer=renderer) as gateway:
            session, task = await open_session(gateway, CALCULATOR, seed=3)
            sid = session["session_id"]
            script = oracle_script(CALCULATOR, task) if solved else wrong_script(CALCULATOR, task)
            *calls, answer = script
            assert len(calls) >= 2 and isinstance(answer, str)
            scripts.texts[sid] = [*(hermes(c) for c in calls), answer]

            # the agent: a plain loop on the openai SDK, the env's tools run through the gateway
            client = AsyncOpenAI(base_url=gateway.session_url(sid), api_key=API_KEY, max_retries=0)
            messages = list(session["messages"])
            token_ids = []
            async with httpx.AsyncClient(timeout=600) as http:
                while True:
                    reply = await client.chat.completions.create(
                        model="tiny",
                        messages=messages,
                        tools=session["tools"],
                        extra_body={"return_token_ids": True},
                    )
                    token_ids.append(reply.choices[0].model_extra["token_ids"])
                    message = reply.choices[0].message
                    messages.append(message.model_dump(exclude_none=True))
                    if not message.tool_calls:
                        break
                    assert reply.choices[0].finish_reason == "tool_calls"
                    for call in message.tool_calls:
                        url = f"{gateway.url}/sessions/{sid}/tools/{call.function.name}"
                        out = await http.post(url, json={"arguments": json.loads(call.function.arguments)})
                        messages.append(
                            {"role": "tool", "tool_call_id": call.id, "content": out.json()["output"]}
                        )
            record = await finish_and_end(gateway, sid, message.content)
            return script, task, messages, token_ids, record

    script, task, messages, token_ids, record = run(main)
    assert [m["role"] for m in messages[2:]] == ["assistant", "tool"] * (len(script) - 1) + ["assistant"]
    assert token_ids == engine.generated  # what the client was told it sampled is what the engine sampled
    check_tokens(record, engine, segments=1)  # the loop echoes the replies as they came: one segment
    assert record["restarts"] == []
    assert [r["name"] for r in record["tool_runs"]] == ["calculator"] * (len(script) - 1)
    expected = env_verdict(CALCULATOR, task, script)
    assert record["reward"] == expected == (1.0 if solved else 0.0)
    assert record["verdict"]["passed"] is solved and record["verdict"]["error"] is None


# -- (b) an agent framework: smolagents ------------------------------------------------------------------


def test_smolagents_tool_calling_agent_on_its_openai_server_model(renderer):
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    scripts = Scripts()
    engine = ScriptedClient(renderer, scripts)

    async def main():
        async with Gateway(CONFIG, client=engine, renderer=renderer) as gateway:
            session, task = await open_session(gateway, CALCULATOR, seed=3)
            sid = session["session_id"]
            *calls, answer = oracle_script(CALCULATOR, task)
            final = ToolCall(name="final_answer", arguments={"answer": answer})
            scripts.texts[sid] = [*(hermes(c, "Let me compute this.") for c in calls), hermes(final)]
            tools_url = f"{gateway.url}/sessions/{sid}/tools"

            @tool
            def calculator(expression: str) -> str:
                """Evaluate one arithmetic expression exactly.

                Args:
                    expression: One arithmetic expression.
                """
                out = httpx.post(f"{tools_url}/calculator", json={"arguments": {"expression": expression}})
                out.raise_for_status()
                return out.json()["output"]

            model = OpenAIServerModel(
                model_id="tiny",
                api_base=gateway.session_url(sid),
                api_key=API_KEY,
                client_kwargs={"max_retries": 0},
            )
            agent = ToolCallingAgent(
                tools=[calculator], model=model, max_steps=len(calls) + 2, verbosity_level=0
            )
            result = await asyncio.to_thread(agent.run, session["messages"][-1]["content"])
            record = await finish_and_end(gateway, sid, str(result))
            return [*calls, answer], task, result, record

    script, task, result, record = run(main)
    assert str(result) == script[-1]
    assert [r["name"] for r in record["tool_runs"]] == ["calculator"] * (len(script) - 1)
    # smolagents rewrites its history on every step: the assistant's tool call comes back as the text
    # "Calling tools: [...]" (no tool_calls) and the tool's output as a user "Observation:". Each call after
    # the first therefore starts a new segment, with the reason recorded: three calls, three segments.
    calls = len(engine.generated)
    assert calls == len(script)
    check_tokens(record, engine, segments=calls)
    assert record["restarts"] == [
        f"message {2 * k} (assistant) differs from the one recorded" for k in range(1, calls)
    ]
    rewritten = record["segments"][1]["messages"][2]
    assert rewritten["role"] == "assistant" and "tool_calls" not in rewritten
    assert "Calling tools:" in message_text(rewritten["content"])
    assert record["segments"][0]["messages"][2]["tool_calls"]  # what the gateway replied
    assert record["reward"] == env_verdict(CALCULATOR, task, script) == 1.0


# -- (c) mini-swe-agent on SWE-v0 ------------------------------------------------------------------------


def bash_steps(script: Sequence[ToolCall | str]) -> tuple[list[str], list[str]]:
    """The oracle's fix as shell commands a mini-swe-agent model writes (it has only ``bash``): each editor
    ``str_replace`` a small Python edit, each ``create`` a heredoc; and the files it changes."""
    commands, files = [], []
    for step in script:
        if isinstance(step, str):
            continue
        args = step.arguments
        if step.name == "bash":
            commands.append(args["command"])
            continue
        path = args["path"].removeprefix("/testbed/")  # the workspace is where each command starts
        files.append(path)
        if args["command"] == "str_replace":
            old, new = args["old_str"], args["new_str"]
            commands.append(
                "python - <<'EDIT'\nfrom pathlib import Path\n"
                f"p = Path({path!r})\ns = p.read_text()\nassert s.count({old!r}) == 1\n"
                f"p.write_text(s.replace({old!r}, {new!r}))\nEDIT"
            )
        elif args["command"] == "create":
            commands.append(
                f"mkdir -p \"$(dirname {path})\" && cat > {path} <<'NEWFILE'\n{args['file_text']}NEWFILE"
            )
        else:
            raise AssertionError(f"the oracle used {args['command']!r}")
    return commands, files


@pytest.mark.slow
def test_mini_swe_agent_solves_a_swe_task_with_its_commands_in_the_tasks_sandbox(renderer, mini_swe_env):
    from minisweagent.agents import get_agent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments import get_environment
    from minisweagent.models import get_model

    scripts = Scripts()
    engine = ScriptedClient(renderer, scripts)

    async def main():
        async with Gateway(CONFIG, client=engine, renderer=renderer) as gateway:
            session, task = await open_session(gateway, SWE, seed=0)
            sid = session["session_id"]
            edits, files = bash_steps(oracle_script(SWE, task))
            assert edits and files
            reproduce = f"python -m pytest -q -p no:cacheprovider {' '.join(task.data['fail_to_pass'])}"
            # what swebench.yaml's instructions ask for: look, fix, write the patch, check it, submit it
            commands = [
                "git status --short && ls",
                reproduce,  # fails: the bug is there
                *edits,
                reproduce,  # passes
                f"git diff -- {' '.join(files)} > patch.txt",
                "cat patch.txt",
                "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat patch.txt",
            ]
            scripts.texts[sid] = [
                hermes(ToolCall(name="bash", arguments={"command": c}), f"THOUGHT: step {i} of the fix.")
                for i, c in enumerate(commands, 1)
            ]

            # mini-swe-agent as its own swebench run builds it, configured to the session
            config = get_config_from_spec("swebench.yaml")
            config["model"].update(
                model_name="openai/tiny",  # litellm's OpenAI-compatible provider
                cost_tracking="ignore_errors",
                model_kwargs={"api_base": gateway.session_url(sid), "api_key": API_KEY, "drop_params": True},
            )
            config["environment"].update(
                environment_class="toolgym.gateway.mini_swe.GatewayEnvironment",
                tools_url=f"{gateway.url}/sessions/{sid}/tools",
            )
            model = get_model(config=config["model"])
            env = get_environment(config["environment"])
            agent = get_agent(model, env, config["agent"], default_type="default")
            result = await asyncio.to_thread(agent.run, session["messages"][-1]["content"])
            record = await finish_and_end(gateway, sid, result.get("submission"))
            return commands, files, agent, result, record

    commands, files, agent, result, record = run(main)
    assert result["exit_status"] == "Submitted"
    assert result["submission"].startswith(f"diff --git a/{files[0]} b/{files[0]}")
    # every command ran in the task's workspace through the gateway's bash tool
    assert [r["name"] for r in record["tool_runs"]] == ["bash"] * len(commands)
    observations = [m for m in agent.messages if m["role"] == "tool"]
    assert len(observations) == len(commands) - 1  # the submitting command ends the run
    codes = [m["extra"]["returncode"] for m in observations]
    assert codes[1] != 0 and codes[:1] + codes[2:] == [0] * (len(codes) - 1)  # the failing reproduction
    assert "tests" in observations[0]["content"] and "failed" in observations[1]["extra"]["raw_output"]
    assert f"<returncode>{codes[1]}</returncode>" in observations[1]["content"]
    # mini-swe-agent sends its messages back as the gateway answered them (litellm's message dump): one
    # segment, the sampled tokens exactly
    check_tokens(record, engine, segments=1)
    assert record["restarts"] == []
    # the env's judge ran the task's tests on the workspace the agent changed
    verdict = record["verdict"]
    assert record["reward"] == verdict["reward"] == 1.0 and verdict["error"] is None
    assert set(verdict["details"]["fail_to_pass"].values()) == {"passed"}


def test_the_tool_endpoint_answers_the_commands_status_exit_code_and_output_as_fields(renderer):
    """The bash tool of a SWE task through ``POST /sessions/{id}/tools/bash``: the observation as the model
    sees it, and its parts as fields, which mini-swe-agent's environment takes as they are."""
    from toolgym.gateway.mini_swe import command_result

    async def main():
        async with Gateway(CONFIG, client=ScriptedClient(renderer, []), renderer=renderer) as gateway:
            session, _ = await open_session(gateway, SWE, seed=0)
            url = f"{gateway.url}/sessions/{session['session_id']}/tools/bash"
            async with httpx.AsyncClient(timeout=600) as http:
                runs = []
                for arguments in (
                    {"command": "printf 'a\\nb\\n'"},
                    {"command": "echo Error: x; echo half >&2; exit 3"},
                    {"command": "echo gone; kill -KILL $$"},
                    {"command": "true"},
                    {},  # no command: the tool refuses the arguments
                ):
                    reply = await http.post(url, json={"arguments": arguments})
                    assert reply.status_code == 200, reply.text
                    runs.append(reply.json())
            return runs

    ok, failed, killed, silent, refused = run(main)
    assert ok == {
        "name": "bash",
        "status": "ok",
        "output": "a\nb\n[exit code 0]",
        "exit_code": 0,
        "timed_out": False,
        "command_output": "a\nb",
    }
    assert (failed["status"], failed["exit_code"], failed["command_output"]) == ("error", 3, "Error: x\nhalf")
    assert failed["output"].endswith("[exit code 3]")  # the observation keeps its status line for the model
    assert (killed["exit_code"], killed["command_output"]) == (-9, "gone")
    assert (silent["exit_code"], silent["command_output"]) == (0, "")
    assert refused["status"] == "error" and refused["exit_code"] is None
    assert refused["command_output"] is None and "command" in refused["output"]

    # mini-swe-agent's result: the fields as they are, no text read
    assert command_result(ok) == {"output": "a\nb\n", "returncode": 0, "exception_info": ""}
    assert command_result(failed) == {"output": "Error: x\nhalf\n", "returncode": 3, "exception_info": ""}
    assert command_result(killed)["returncode"] == -9
    assert command_result(silent) == {"output": "", "returncode": 0, "exception_info": ""}
    assert command_result(refused)["returncode"] == -1 and command_result(refused)["exception_info"]
    timed_out = {**failed, "timed_out": True, "output": "Error: half\n[timed out after 120 s]"}
    assert command_result(timed_out)["returncode"] == -1
    assert "timed out" in command_result(timed_out)["exception_info"]


def test_an_agents_tool_calls_run_through_the_gateway_it_plays_on(renderer):
    """play_agent's task runs the env's tools through the in-process gateway's own work: the same structured
    result as the HTTP endpoint, refusals as RuntimeError with the gateway's message."""
    from toolgym.gateway import play_agent
    from toolgym.rollout.keys import episode_rows

    [row] = episode_rows("toolgym/Calculator-v0", 1, seed=0)
    seen: dict[str, Any] = {}

    async def agent(task, base_url, api_key):
        seen["run"] = await task.run_tool("calculator", {"expression": "6*7"})
        seen["text"] = await task.call_tool("calculator", {"expression": "1+1"})
        with pytest.raises(RuntimeError, match="has no tool 'shell'"):
            await task.run_tool("shell", {})
        return "42"

    async def main():
        async with Gateway(CONFIG, client=ScriptedClient(renderer, []), renderer=renderer) as gateway:
            return await play_agent(gateway, agent, row.key)

    episode = run(main)
    assert seen["run"] == {
        "name": "calculator",
        "status": "ok",
        "output": "42",
        "exit_code": None,
        "timed_out": False,
        "command_output": None,
    }
    assert seen["text"] == "2"
    assert [r["name"] for r in episode.session["tool_runs"]] == ["calculator", "calculator"]
