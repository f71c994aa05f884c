"""toolgym/Calculator-v0: multi-step arithmetic word problems with large operands and a calculator tool.

The answers are exact integers that are impractical to compute in one's head, so a policy that learns to call
the calculator and carry results between steps gets reward 1.0; the verifier compares the final answer
exactly, tolerant of formatting such as ``1,234`` or ``1234.0``.
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
from toolgym.envs.calculator_tasks import generate_calculator_task
from toolgym.envs.math_tasks import lazy_math_file_source
from toolgym.rewards.numeric import NumericVerifier
from toolgym.tools.calculator import Calculator

SYSTEM_PROMPT = (
    "You solve arithmetic word problems exactly. Use the calculator for every computation; do not compute "
    "large numbers in your head. When you are done, give only the final number as your answer."
)


def calculator_oracle(task: Task) -> Sequence[ToolCall | str]:
    """A correct solution: replay the task's solution steps through the calculator, then answer."""
    steps = [ToolCall(name="calculator", arguments={"expression": e}) for e in task.data.get("steps", ())]
    return [*steps, str(task.answer)]


@register_env(
    "toolgym/Calculator-v0",
    tools=["calculator"],
    task_source="procedural arithmetic word problems (level 1-3), or a numeric task file (tasks=)",
    description="Multi-step word problems with large operands; exact numeric answer.",
    oracle=calculator_oracle,
)
def make_calculator_env(
    level: int = 1,
    action_format: str = "xml",
    max_turns: int = 8,
    tasks: str | Path | TaskSource | None = None,
    **env_kwargs: Any,
) -> ToolEnv:
    """``tasks``: procedural word problems by default (``level`` 1-3); or a file of numeric problems read
    like Math-v0's (question/answer columns, or verl-format rows), or a ``TaskSource``."""
    if level not in (1, 2, 3):
        raise ValueError(f"level must be 1, 2 or 3, got {level!r}")
    source: TaskSource
    if tasks is None:
        source = ProceduralSource(f"calculator-L{level}", partial(generate_calculator_task, level=level))
    elif isinstance(tasks, TaskSource):
        source = tasks
    else:
        source = lazy_math_file_source(tasks)
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return ToolEnv(
        source, [Calculator()], NumericVerifier(), action_format, max_turns=max_turns, **env_kwargs
    )
