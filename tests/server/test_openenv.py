"""``toolgym serve openenv`` against OpenEnv's own client (``GenericEnvClient``: no toolgym code on the
client side), on loopback: episodes equal the in-process env's, 256 concurrent sessions keep to themselves,
errors have OpenEnv's shapes, a full server is busy, an idle session expires, the tools answer on /mcp."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time

import gymnasium as gym
import httpx
import pytest
from openenv.cli._validation import validate_running_environment
from openenv.core.generic_client import GenericEnvClient
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import toolgym  # noqa: F401  (registers the envs)
from toolgym.rollout.host import EpisodeHost
from toolgym.server.openenv import create_app
from toolgym.server.openenv_env import EnvSource, SessionError, TextAction, ToolgymEnvironment
from toolgym.testing.scripted import oracle_script, script_texts, wrong_script
from toolgym.testing.servers import serve_in_thread

ENV_ID = "toolgym/Calculator-v0"
SESSIONS = 256


@pytest.fixture(scope="module")
def url():
    with serve_in_thread(create_app(ENV_ID, max_sessions=SESSIONS, idle_timeout=None)) as base:
        yield base


def in_process(seed: int, script=oracle_script, **reset) -> tuple[list[str], list[tuple]]:
    """The env played in process: the actions, and what reset and each step returned."""
    env = gym.make(ENV_ID)
    obs, info = env.reset(seed=seed, **reset)
    actions = script_texts(env, script(ENV_ID, env.unwrapped.task))
    steps = [(obs, None, False, info)]
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append((obs, reward, terminated or truncated, info))
    env.close()
    return actions, steps


def assert_same(results, steps) -> None:
    """The server's StepResults equal the in-process env's (observation, reward, done, chat, verdict)."""
    chat = []
    for result, (obs, reward, done, info) in zip(results, steps, strict=True):
        o = result.observation
        assert (o["text"], result.reward, result.done) == (obs, reward, done)
        assert (o["task_id"], o["turn"]) == (info["task_id"], info["turn"])
        chat += o["messages"]
        assert chat == info["messages"]  # the messages of every call concatenated: the env's chat
        verdict = info.get("verdict")
        assert o["verdict"] == (verdict.model_dump(mode="json") if verdict is not None else None)
    assert results[0].observation["tools"] == steps[0][3]["tools"]


@pytest.mark.parametrize(("script", "reward"), [(oracle_script, 1.0), (wrong_script, 0.0)])
def test_an_episode_over_openenv_equals_the_in_process_env(url, script, reward):
    for seed in (0, 7):
        actions, steps = in_process(seed, script)
        with GenericEnvClient(base_url=url).sync() as env:
            results = [env.reset(seed=seed)]
            results += [env.step({"message": action}) for action in actions]
            state = env.state()
        assert_same(results, steps)
        assert results[-1].reward == reward and results[-1].done
        assert results[-1].observation["verdict"]["passed"] is (reward == 1.0)
        assert state["step_count"] == len(actions) and state["done"] and state["env_id"] == ENV_ID
        assert state["task_id"] == steps[0][3]["task_id"]


def test_reset_pins_a_task_by_id(url):
    _, steps = in_process(3)
    task_id = steps[0][3]["task_id"]
    with GenericEnvClient(base_url=url).sync() as env:
        by_arg = env.reset(seed=99, task_id=task_id).observation
        by_options = env.reset(options={"task_id": task_id}).observation
    assert by_arg["task_id"] == by_options["task_id"] == task_id
    assert by_arg["text"] == by_options["text"] == steps[0][0]


def test_256_concurrent_sessions_each_play_their_own_task(url):
    expected = {seed: in_process(seed) for seed in range(SESSIONS)}
    assert len({steps[0][3]["task_id"] for _, steps in expected.values()}) > SESSIONS // 2

    async def main():
        clients = [GenericEnvClient(base_url=url, message_timeout_s=120) for _ in range(SESSIONS)]
        await asyncio.gather(*(c.connect() for c in clients))  # all 256 sessions are open at once

        async def play(client, seed):
            actions, _ = expected[seed]
            results = [await client.reset(seed=seed)]
            for action in actions:
                results.append(await client.step({"message": action}))
            return results

        try:
            return await asyncio.gather(*(play(c, seed) for seed, c in enumerate(clients)))
        finally:
            await asyncio.gather(*(c.close() for c in clients))

    started = time.perf_counter()
    played = asyncio.run(main())
    elapsed = time.perf_counter() - started
    for seed, results in enumerate(played):
        assert_same(results, expected[seed][1])
        assert results[-1].reward == 1.0
    print(f"\n{SESSIONS} concurrent sessions, {sum(map(len, played))} calls: {elapsed:.2f} s")


def test_sessions_start_no_thread_each_and_lease_their_env_at_reset(url):
    """OpenEnv makes a thread per WebSocket session for the env's constructor and close unless the env sets
    its REQUIRES_SINGLE_THREAD_EXECUTOR flag; toolgym's does (its constructor leases nothing), so 32 open
    sessions share one such thread of OpenEnv's (its threads are unnamed ``ThreadPoolExecutor-*``)."""

    def openenv_threads() -> set[int]:
        return {t.ident or 0 for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor-")}

    async def main():
        async with contextlib.AsyncExitStack() as stack:
            sockets = [await stack.enter_async_context(ws_connect(_ws_url(url))) for _ in range(32)]
            for seed, ws in enumerate(sockets):
                await ws.send(json.dumps({"type": "reset", "data": {"seed": seed}}))
            replies = [json.loads(await ws.recv()) for ws in sockets]
            return replies, openenv_threads()

    before = openenv_threads()
    replies, during = asyncio.run(main())
    assert [r["data"]["observation"]["task_id"] for r in replies] == [
        in_process(seed)[1][0][3]["task_id"] for seed in range(32)
    ]
    assert len(during - before) <= 1, f"{len(during - before)} new OpenEnv threads for 32 sessions"


def test_a_session_leases_its_env_at_its_first_reset_and_gives_it_back_on_close():
    built = []

    def make():
        built.append(gym.make(ENV_ID))
        return built[-1]

    source = EnvSource(ENV_ID, {}, EpisodeHost(factory=make, name="test"))
    session = ToolgymEnvironment(source)  # what OpenEnv calls on its shared thread: no env built
    with pytest.raises(SessionError, match="reset before step"):
        session.step(TextAction(message="<answer>1</answer>"))
    assert built == [] and not session.state.done
    assert session.reset(seed=0).task_id == in_process(0)[1][0][3]["task_id"]
    assert len(built) == 1
    session.close()
    again = ToolgymEnvironment(source)
    again.reset(seed=1)
    assert len(built) == 1  # the first session's env, given back to the host's pool
    unused = ToolgymEnvironment(source)
    unused.close()
    with pytest.raises(SessionError, match="session is closed"):
        unused.reset(seed=0)
    with pytest.raises(SessionError, match="session is closed"):
        unused.step(TextAction(message="<answer>1</answer>"))
    assert len(built) == 1
    again.close()
    source.host.close()


def _ws_url(url: str) -> str:
    return url.replace("http://", "ws://") + "/ws"


def test_malformed_actions_get_openenv_error_shapes(url):
    async def main():
        async with ws_connect(_ws_url(url)) as ws:

            async def send(message):
                await ws.send(json.dumps(message))
                return json.loads(await ws.recv())

            before_reset = await send({"type": "step", "data": {"message": "<answer>1</answer>"}})
            await send({"type": "reset", "data": {"seed": 0}})
            missing = await send({"type": "step", "data": {"msg": "hi"}})
            wrong_type = await send({"type": "step", "data": {"message": 5}})
            not_json = await ws.send("{not json") or json.loads(await ws.recv())
            still_fine = await send({"type": "step", "data": {"message": "<calculator>1+1</calculator>"}})
            return before_reset, missing, wrong_type, not_json, still_fine

    before_reset, missing, wrong_type, not_json, still_fine = asyncio.run(main())
    assert before_reset["type"] == "error" and before_reset["data"]["code"] == "EXECUTION_ERROR"
    assert "reset before step" in before_reset["data"]["message"]
    for error in (missing, wrong_type):
        assert error["type"] == "error" and error["data"]["code"] == "VALIDATION_ERROR"
        assert error["data"]["errors"][0]["loc"] == ["message"]
    assert not_json["type"] == "error" and not_json["data"]["code"] == "INVALID_JSON"
    assert still_fine["type"] == "observation" and still_fine["data"]["observation"]["text"].strip()

    # the same through the generic client, and OpenEnv's HTTP shapes
    with GenericEnvClient(base_url=url).sync() as env:
        env.reset(seed=0)
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            env.step({"msg": "hi"})
    bad = httpx.post(f"{url}/step", json={"action": {"msg": "hi"}})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["message"]
    stateless = httpx.post(f"{url}/step", json={"action": {"message": "<answer>1</answer>"}})
    assert stateless.status_code == 409 and "/ws" in stateless.json()["detail"]
    unknown = httpx.post(f"{url}/reset", json={"seed": 0, "colour": "red"})
    assert unknown.status_code == 422 and "colour" in unknown.json()["detail"]
    with GenericEnvClient(base_url=url).sync() as env:
        with pytest.raises(RuntimeError, match="colour"):
            env.reset(seed=0, colour="red")
        with pytest.raises(RuntimeError, match="no-such-task"):
            env.reset(task_id="no-such-task")


def test_the_tools_answer_on_openenv_mcp_route(url):
    def rpc(method, params):
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return httpx.post(f"{url}/mcp", json=body).json()

    listed = rpc("tools/list", {})["result"]["tools"]
    env = gym.make(ENV_ID)
    schema = env.unwrapped.tool_schemas[0]["function"]
    assert listed == [
        {"name": "calculator", "description": schema["description"], "inputSchema": schema["parameters"]}
    ]
    called = rpc("tools/call", {"name": "calculator", "arguments": {"expression": "48213*1937"}})["result"]
    assert called["content"] == [{"type": "text", "text": str(48213 * 1937)}] and not called["isError"]
    bad = rpc("tools/call", {"name": "calculator", "arguments": {"expression": "1/0"}})["result"]
    assert bad["isError"] and bad["structuredContent"]["status"] == "error"
    assert "not found" in rpc("tools/call", {"name": "nope", "arguments": {}})["error"]["message"].lower()

    async def in_a_session():  # MCP messages inside a /ws session use that session's env
        async with ws_connect(_ws_url(url)) as ws:
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "calculator", "arguments": {"expression": "6*7"}}}  # fmt: skip
            await ws.send(json.dumps({"type": "mcp", "data": call}))
            return json.loads(await ws.recv())

    reply = asyncio.run(in_a_session())
    assert reply["data"]["result"]["content"][0]["text"] == "42"
    report = validate_running_environment(url)  # OpenEnv's own runtime conformance check
    assert report["passed"], report["summary"]


async def _first_message(url: str) -> dict:
    async with ws_connect(_ws_url(url)) as ws:
        return json.loads(await ws.recv())


def test_a_full_server_is_busy_and_an_idle_session_expires():
    app = create_app(ENV_ID, max_sessions=1, idle_timeout=0.5)
    with serve_in_thread(app, lifespan="on") as url:  # lifespan: OpenEnv's reaper starts with the app
        holder = GenericEnvClient(base_url=url).sync()
        holder.connect()
        holder.reset(seed=0)
        busy = asyncio.run(_first_message(url))  # a full server says so at once, then closes
        assert busy["type"] == "error" and busy["data"]["code"] == "CAPACITY_REACHED"
        assert "at capacity: 1/1 sessions" in busy["data"]["message"]

        # OpenEnv's client sees the error, or the closed socket when its first send comes after the close
        # OpenEnv's reaper looks every 5 s; the deadline is only a hang guard, far past that
        started, deadline = time.monotonic(), time.monotonic() + 120
        while True:
            try:
                with GenericEnvClient(base_url=url).sync() as fresh:
                    assert fresh.reset(seed=1).observation["task_id"]
                break
            except (RuntimeError, ConnectionClosed) as exc:
                assert isinstance(exc, ConnectionClosed) or "CAPACITY_REACHED" in str(exc)
                assert time.monotonic() < deadline, "the idle session was never freed"
                time.sleep(0.5)
        print(f"\nidle session freed after {time.monotonic() - started:.1f} s")
        with pytest.raises(RuntimeError, match="session is closed"):
            holder.step({"message": "<answer>1</answer>"})
        holder.close()
