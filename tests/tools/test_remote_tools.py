"""Tools on a tool server: an env given ``tool_server=URL`` behaves as with local tools (same observations,
results and rewards for the same actions), its python state lives in a server session freed at episode end,
and the client batches concurrent calls, retries what may pass and fails loudly on what will not."""

from __future__ import annotations

import itertools
import json
import threading
import time

import gymnasium as gym
import httpx
import pytest

import toolgym  # noqa: F401  (registers the envs)
from toolgym.core.types import ToolCall
from toolgym.sandbox import shared_sandbox
from toolgym.server.tools_api import ToolServerConfig
from toolgym.server.tools_app import create_app
from toolgym.testing.servers import serve_in_thread
from toolgym.tools.calculator import Calculator
from toolgym.tools.remote import RemoteTool, ToolServerClient, ToolServerError


@pytest.fixture(scope="module")
def server():
    app = create_app(ToolServerConfig(tools=["python", "calculator"]), sandbox=shared_sandbox())
    with serve_in_thread(app) as url:
        yield url, app.state.runtime


def _episode(env, turns, seed=0):
    """(observation, reward, terminated, truncated, tool_results) per step of a scripted episode."""
    env.reset(seed=seed)
    parser = env.unwrapped.parser
    out = []
    for turn in turns:
        action = parser.format_call(turn) if isinstance(turn, ToolCall) else turn
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, [_measured_out(r) for r in info["tool_results"]]))
        if terminated or truncated:
            break
    return out


def test_python_code_env_is_the_same_with_a_tool_server(server):
    url, runtime = server
    local = gym.make("toolgym/PythonCode-v0", max_turns=8)
    remote = gym.make("toolgym/PythonCode-v0", max_turns=8, tool_server=url)
    assert all(isinstance(t, RemoteTool) for t in remote.unwrapped.tools.values())
    assert remote.unwrapped.system_prompt == local.unwrapped.system_prompt
    assert remote.unwrapped.tool_schemas == local.unwrapped.tool_schemas
    task = local.unwrapped.tasks.get("HumanEval/0")
    code = lambda c: ToolCall(name="python", arguments={"code": c})  # noqa: E731
    turns = [
        code("def helper(x):\n    return x * 2\nprint(helper(21))"),
        code("print(helper(5))"),  # state persists between calls
        code("raise ValueError('boom')"),  # the model's error
        "no tool call here",  # invalid
        code("print('x' * 20000)"),  # cut in the middle
        {"answer": task.answer},  # the final answer: verified locally either way
    ]

    def python_calls():
        return sum(n for key, n in runtime.metrics.counters.items() if key[:2] == ("tool_calls", "python"))

    before = python_calls()
    mine = _episode_pinned(local, turns)
    theirs = _episode_pinned(remote, turns)
    assert theirs == mine
    assert mine[1][0] == "<output>\n10\n</output>" and mine[2][4][0].status == "error"
    assert mine[-1][1] == 1.0 and mine[-1][2] is True
    assert python_calls() - before == 4  # the remote env's calls really ran on the server
    assert len(runtime.sessions) == 0  # the episode's server session was freed at its end
    local.close()
    remote.close()


def _measured_out(result):
    """A tool result without ``metadata["wait_s"]``: the seconds the call waited for a sandbox session slot, a
    measurement of the machine (2 ms on a loaded CI run, 0 on an idle one), not of the episode."""
    meta = {k: v for k, v in result.metadata.items() if k != "wait_s"}
    return result.model_copy(update={"metadata": meta})


def _episode_pinned(env, turns):
    """Each step's observation, reward, end flags and tool results (without their wait measurements)."""
    env.reset(options={"task_id": "HumanEval/0"})
    parser = env.unwrapped.parser
    out = []
    for turn in turns:
        if isinstance(turn, dict):
            action = parser.format_answer(turn["answer"])
        else:
            action = parser.format_call(turn) if isinstance(turn, ToolCall) else turn
        obs, reward, terminated, truncated, info = env.step(action)
        out.append((obs, reward, terminated, truncated, [_measured_out(r) for r in info["tool_results"]]))
    return out


def test_calculator_env_with_hermes_calls_is_the_same(server):
    url, _ = server
    kwargs = {"action_format": "hermes", "max_turns": 4}
    local = gym.make("toolgym/Calculator-v0", **kwargs)
    remote = gym.make("toolgym/Calculator-v0", tool_server=url, **kwargs)
    calc = lambda e: ToolCall(name="calculator", arguments={"expression": e})  # noqa: E731
    turns = [
        calc("48213*1937 - 12345"),
        calc("2**0.5"),
        '<tool_call>{"name": "calculator"}</tool_call>',
        "12",
    ]
    assert _episode(remote, turns, seed=3) == _episode(local, turns, seed=3)


def test_a_tool_the_server_does_not_serve_is_an_infra_error_naming_the_fix():
    app = create_app(ToolServerConfig(tools=["calculator"]))
    with serve_in_thread(app) as calc_only:
        env = gym.make("toolgym/PythonCode-v0", tool_server=ToolServerClient(calc_only, retries=0))
        env.reset(seed=0)
        _, _, _, _, info = env.step("<python>print(1)</python>")
        (result,) = info["tool_results"]
        assert result.status == "infra_error"
        assert "does not serve 'python'" in result.output and "--tools" in result.output


def test_an_unreachable_server_is_an_infra_error_after_the_retries():
    with serve_in_thread(create_app(ToolServerConfig(tools=["calculator"]))) as url:
        pass  # the server is gone now; its port refuses connections
    client = ToolServerClient(url, retries=2, backoff=0.01, timeout=2)
    tool = RemoteTool(Calculator(), client)
    result = tool(ToolCall(name="calculator", arguments={"expression": "1+1"}))
    assert result.status == "infra_error" and "failed after 3 attempts" in result.output
    # the model's mistakes are still found locally, with the local tool's message
    assert tool({"expr": "1"}).output == Calculator()({"expr": "1"}).output
    client.close()


def _mock(handler):
    return ToolServerClient("http://tools.test", transport=httpx.MockTransport(handler), backoff=0.001)


def _ok(request: httpx.Request) -> httpx.Response:
    calls = json.loads(request.content)["calls"]
    results = [{"name": c["name"], "output": c["arguments"]["expression"]} for c in calls]
    return httpx.Response(200, json={"results": results})


def test_retries_overload_then_succeeds_and_refusals_raise_at_once():
    answers = iter([httpx.Response(503, headers={"Retry-After": "0"}), httpx.Response(429)])

    def flaky(request):
        return next(answers, None) or _ok(request)

    client = _mock(flaky)
    assert client.call("calculator", {"expression": "1"}).output == "1"

    seen = []

    def refusing(request):
        seen.append(request)
        return httpx.Response(422, json={"detail": "calls[0]: calculator: invalid arguments"})

    with pytest.raises(ToolServerError, match="refused: HTTP 422: calls\\[0\\]"):
        _mock(refusing).call("calculator", {"expression": "1"})
    assert len(seen) == 1


def test_concurrent_calls_are_batched():
    requests = []
    gate = threading.Event()

    def slow(request):
        requests.append(len(json.loads(request.content)["calls"]))
        gate.wait(5)
        return _ok(request)

    client = ToolServerClient(
        "http://tools.test", transport=httpx.MockTransport(slow), max_workers=1, batch_size=64
    )
    results: dict[int, str] = {}

    def call(i):
        results[i] = client.call("calculator", {"expression": str(i)}).output

    threads = [threading.Thread(target=call, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    time.sleep(0.3)  # the first request holds the one connection; the rest queue up
    gate.set()
    for t in threads:
        t.join()
    assert results == {i: str(i) for i in range(40)}  # every caller got its own answer
    assert sum(requests) == 40 and len(requests) < 10  # in a few batches, not 40 requests


class _FakeClock:
    """The remote client's ``time``: it moves only when the client sleeps, so the gaps between the starts
    the handler records are exactly the waits the client chose, however the threads are scheduled."""

    def __init__(self):
        self.now = 1000.0
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self.now

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.now += seconds


def test_request_interval_spaces_the_requests(monkeypatch):
    clock = _FakeClock()
    monkeypatch.setattr("toolgym.tools.remote.time", clock)
    starts = []

    def record(request):
        starts.append(clock.monotonic())
        return _ok(request)

    client = ToolServerClient(
        "http://tools.test", transport=httpx.MockTransport(record), request_interval=0.05
    )
    for i in range(4):
        client.call("calculator", {"expression": str(i)})
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps == pytest.approx([0.05] * 3)


def test_client_settings_are_checked():
    with pytest.raises(ValueError, match="http://host:8002"):
        ToolServerClient("localhost:8002")
    with pytest.raises(ValueError, match="max_workers >= 1"):
        ToolServerClient("http://x", max_workers=0)
