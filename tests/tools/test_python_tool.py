"""The ``python`` tool: per-episode state, what the model sees, error vs infra_error, the shared sandbox, and
tool-integrated reasoning on Math-v0 with python."""

from __future__ import annotations

import asyncio

import gymnasium as gym
import pytest

import toolgym.sandbox.shared as shared_module
from toolgym.core.task import Task
from toolgym.core.types import ToolCall
from toolgym.sandbox import ExecResult, close_shared_sandbox, shared_sandbox
from toolgym.tools import make_tool
from toolgym.tools.python import PythonTool, render_exec_result


@pytest.fixture
def tool():
    t = PythonTool(timeout=2)  # the process-wide shared sandbox
    t.start_episode("ep")
    yield t
    t.close()


def test_registered_with_a_code_argument():
    tool = make_tool("python")
    assert isinstance(tool, PythonTool) and tool.primary_arg == "code"
    assert tool.schema()["function"]["parameters"]["required"] == ["code"]
    assert tool._session is None  # nothing runs until the first call


def test_state_persists_within_an_episode_and_not_across(tool):
    assert tool("x = 41").ok
    assert tool({"code": "def f(y):\n    return x + y"}).ok
    assert tool("print(f(1))").output == "42"
    tool.end_episode("ep")
    tool.start_episode("ep2")
    fresh = tool("print(x)")
    assert fresh.status == "error" and "NameError" in fresh.output


def test_episodes_do_not_share_state_between_tools():
    a, b = PythonTool(), PythonTool()
    a.start_episode("a")
    b.start_episode("b")
    try:
        a("secret = 7")
        assert "NameError" in b("print(secret)").output
        assert a("print(secret)").output == "7"
    finally:
        a.close()
        b.close()


def test_output_is_stdout_then_stderr_then_status(tool):
    out = tool("import sys\nprint('to stderr', file=sys.stderr)\nprint('to stdout')")
    assert out.ok and out.output == "to stdout\nto stderr"
    assert tool("pass").output == "(no output; use print() to see values)"
    boom = tool("print('before')\n1/0")
    assert boom.status == "error"
    assert boom.output.startswith("before\nTraceback") and "ZeroDivisionError" in boom.output
    assert boom.output.endswith("[exit code 1]")
    exited = tool("import sys\nsys.exit(3)")
    assert exited.status == "error" and exited.output == "[exit code 3]"


def test_a_timeout_is_the_models_error_and_resets_the_state(tool):
    tool("kept = 1")
    slow = tool("while True:\n    pass")
    assert slow.status == "error" and slow.metadata["exec_status"] == "timeout"
    assert slow.output == "[timed out after 2 s; the interpreter was stopped, earlier variables are gone]"
    after = tool("print('alive')")
    assert after.ok and after.output.startswith("[note: session was reset") and after.output.endswith("alive")


@pytest.mark.parametrize(
    ("status", "status_line", "tool_status"),
    [
        ("memory", "[out of memory; earlier variables are gone]", "error"),
        ("output_limit", "[killed for printing too much output; earlier variables are gone]", "error"),
        ("killed", "[the interpreter died by signal 11 (it exited, crashed or hit a limit); ", "error"),
        ("sandbox_error", "[sandbox error: fork server died]", "infra_error"),
    ],
)
def test_every_status_is_rendered_and_classified(status, status_line, tool_status):
    res = ExecResult(status=status, stdout="partial\n", signal=11 if status == "killed" else None)
    res = res.model_copy(update={"detail": "fork server died"})

    class Session:
        def run(self, code, timeout=None):
            return res

        def close(self):
            pass

    class Sandbox:
        def session(self, limits=None):
            return Session()

    out = PythonTool(sandbox=Sandbox())("print('x')")
    assert out.status == tool_status and out.output.startswith("partial\n" + status_line)
    assert render_exec_result(res, 1.0) == out.output


def test_a_broken_sandbox_is_an_infra_error():
    class Unavailable:
        def session(self, limits=None):
            raise RuntimeError("sandbox is closed")

    out = PythonTool(sandbox=Unavailable())("print(1)")
    assert out.status == "infra_error" and "sandbox is closed" in out.output


def test_acall_runs_through_the_bounded_async_front_end(tool):
    async def main():
        return await asyncio.gather(
            *(
                tool.acall(ToolCall(name="python", id=str(i), arguments={"code": f"print({i})"}))
                for i in range(3)
            )
        )

    results = asyncio.run(main())
    assert [(r.output, r.call_id) for r in results] == [("0", "0"), ("1", "1"), ("2", "2")]
    assert asyncio.run(tool.acall({"nope": 1})).status == "error"


def test_the_shared_sandbox_is_one_per_process_and_lazy(monkeypatch):
    assert shared_sandbox() is shared_sandbox()
    monkeypatch.setattr(shared_module, "_shared", None)  # pretend nothing started yet (restored after)

    def refuse(*args, **kwargs):
        raise AssertionError("a sandbox was started at construction")

    monkeypatch.setattr(shared_module, "LocalSandbox", refuse)
    env = gym.make("toolgym/PythonCode-v0")
    env.reset(seed=0)
    env.close()
    gym.make("toolgym/Math-v0", tools=("python", "calculator")).reset(seed=0)
    monkeypatch.undo()
    monkeypatch.setattr(shared_module, "_shared", None)
    mine = shared_sandbox()
    assert shared_module._shared[1] is mine
    close_shared_sandbox()
    assert shared_module._shared is None


@pytest.mark.parametrize("fmt", ["xml", "markdown", "hermes"])
def test_tool_integrated_reasoning_on_math_with_python(fmt):
    """A scripted TIR episode: compute with python, read the result from the observation, answer with it."""
    env = gym.make("toolgym/Math-v0", tools=("python", "calculator"), action_format=fmt)
    inner = env.unwrapped
    assert list(inner.tools) == ["python", "calculator"]
    task = Task(id="squares", prompt="Sum of k^2 for k = 1..100?", answer="338350")
    env.reset(options={"task": task})
    code = "total = sum(k * k for k in range(1, 101))\nprint(total)"
    obs, reward, terminated, _, info = env.step(
        inner.parser.format_call(ToolCall(name="python", arguments={"code": code}))
    )
    assert info["tool_results"][0].ok and reward == 0.0 and not terminated
    computed = info["tool_results"][0].output.strip()
    assert computed in obs
    _, reward, terminated, _, info = env.step(inner.parser.format_answer(f"\\boxed{{{computed}}}"))
    assert terminated and reward == 1.0 and info["verdict"].passed
    env.close()
