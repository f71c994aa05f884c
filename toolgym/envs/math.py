"""toolgym/Math-v0: math problems solved with tool-integrated reasoning, judged by math-verify equivalence.

The model may compute with its tools (the calculator by default; ``tools=("python", "calculator")`` adds the
sandboxed Python interpreter) before it answers; the final answer is compared with ``MathVerifier``, so any
equivalent form scores (``\\frac{3}{4}``, ``0.75``, ``3/4``). Tasks are the seeded procedural families of
``math_tasks`` (``families=`` picks some), or a GSM8K/MATH-style JSONL/Parquet file (``tasks="path"``), or any
``TaskSource``.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from toolgym.core.registry import register_env
from toolgym.core.task import ProceduralSource, Task, TaskSource
from toolgym.core.types import ToolCall
from toolgym.envs.base import ToolEnv
from toolgym.envs.math_tasks import generate_math_task, lazy_math_file_source
from toolgym.rewards.math import DEFAULT_TIMEOUT, MathVerifier
from toolgym.tools.base import make_tool

SYSTEM_PROMPT = (
    "You solve math problems. Use the tools for any computation you cannot do reliably in your head, then "
    "give the final answer in simplest exact form: a fraction in lowest terms as \\frac{p}{q}, several "
    "solutions as a set like \\{1, 2\\}, a solution set of an inequality in interval notation like "
    "(-\\infty, 3]. The final answer is only the math, for example \\boxed{\\frac{3}{4}}, with no words."
)


def math_oracle(task: Task) -> Sequence[ToolCall | str]:
    """A correct solution for a procedural task: replay its calculator steps, then give the gold answer."""
    steps = [ToolCall(name="calculator", arguments={"expression": e}) for e in task.data.get("steps", [])]
    return [*steps, str(task.answer)]


def math_tasks(
    tasks: str | Path | TaskSource | None = None, families: Sequence[str] | None = None
) -> TaskSource:
    """The task source ``make_math_env`` uses: procedural (``families``), a file, or the source given."""
    if isinstance(families, str):  # one family, not its characters
        families = (families,)
    if isinstance(tasks, TaskSource):
        return tasks
    if tasks is not None:
        if families:
            raise ValueError("families only applies to the procedural tasks, not to a task file")
        return lazy_math_file_source(tasks)
    name = "math" if not families else "math-" + "+".join(sorted(families))
    generate_math_task(0, families)  # unknown family names fail here, at construction
    return ProceduralSource(name, partial(generate_math_task, families=tuple(families) if families else None))


@register_env(
    "toolgym/Math-v0",
    tools=["calculator"],
    task_source="procedural math (8 families) or a GSM8K/MATH JSONL/Parquet file",
    description="Math problems with tool-integrated reasoning; math-verify equivalence of the final answer.",
    oracle=math_oracle,
)
def make_math_env(
    tasks: str | Path | TaskSource | None = None,
    families: Sequence[str] | None = None,
    tools: Sequence[str] = ("calculator",),
    action_format: str = "xml",
    max_turns: int = 8,
    verifier_timeout: float = DEFAULT_TIMEOUT,
    **env_kwargs: Any,
) -> ToolEnv:
    """``tools`` are registered tool names (adding ``"python"`` is the only change the Python tool needs)."""
    if isinstance(tools, str):
        tools = (tools,)
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return ToolEnv(
        math_tasks(tasks, families),
        [make_tool(name) for name in tools],
        MathVerifier(timeout=verifier_timeout, warm=True),
        action_format,
        max_turns=max_turns,
        **env_kwargs,
    )
