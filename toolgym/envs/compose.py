"""``make_env``: compose a custom env from parts, without writing a class.

Accepts the friendly forms a user has at hand — a task file path or a list of dicts for tasks, tool names,
instances or typed functions for tools, a plain function for the verifier — and turns them into a ``ToolEnv``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from toolgym.core.task import ListSource, Task, TaskSource
from toolgym.envs.base import ToolEnv
from toolgym.envs.task_files import load_tasks
from toolgym.parsers.base import ActionParser
from toolgym.rewards.base import FunctionVerifier, Verifier
from toolgym.tools.base import Tool, make_tool


def make_env(
    tasks: TaskSource | str | Path | Iterable[Task | dict[str, Any]],
    tools: Sequence[Tool | str | Callable[..., Any]],
    verifier: Verifier | Callable[[Task, str], Any],
    action_format: str | ActionParser = "xml",
    **env_kwargs: Any,
) -> ToolEnv:
    """Build a ``ToolEnv``.

    Example::

        env = toolgym.make_env(
            tasks=[{"id": "t1", "prompt": "What is 123456789 * 987654321?", "answer": 121932631112635269}],
            tools=["calculator"],
            verifier=toolgym.rewards.NumericVerifier(),
        )

    A tool may be a registered tool's name, a ``Tool``, or a typed function with a Google-style docstring
    (``Tool.from_function``); ``tools`` and ``tasks`` take one of them or a list.
    """
    if isinstance(tasks, TaskSource):
        source = tasks
    elif isinstance(tasks, str | Path):
        source = load_tasks(tasks)
    else:
        source = ListSource(_as_task(t, i) for i, t in enumerate(_as_list(tasks, "tasks", (Task, dict))))
    built_tools = [_as_tool(t) for t in _as_list(tools, "tools", (Tool, str))]
    if not isinstance(verifier, Verifier):
        if not callable(verifier):
            raise TypeError(
                "verifier must be a Verifier or a function (task, answer) -> float | bool | Verdict"
            )
        verifier = FunctionVerifier(verifier)
    return ToolEnv(source, built_tools, verifier, action_format, **env_kwargs)


def _as_tool(spec: Tool | str | Callable[..., Any]) -> Tool:
    if isinstance(spec, Tool):
        return spec
    if isinstance(spec, str):
        return make_tool(spec)
    if isinstance(spec, type) and issubclass(spec, Tool):
        raise TypeError(f"tools takes Tool instances, got the class {spec.__name__}: write {spec.__name__}()")
    if callable(spec):
        return Tool.from_function(spec)
    raise TypeError(f"a tool is a registered name, a Tool or a typed function, got {type(spec).__name__}")


def _as_list(value: Any, what: str, single: tuple[type, ...]) -> list[Any]:
    """One item or an iterable of them, as a list. A bare string is one name, never its characters."""
    if isinstance(value, single) or (what == "tools" and callable(value)):
        return [value]
    if value is None or not isinstance(value, Iterable):
        kinds = (
            "a task file path, a TaskSource, or a list of Task/dict"
            if what == "tasks"
            else ("a registered tool name, a Tool, a typed function, or a list of them")
        )
        raise TypeError(f"make_env: {what} takes {kinds}, got {type(value).__name__}")
    return list(value)


def _as_task(spec: Task | dict[str, Any], index: int) -> Task:
    if isinstance(spec, Task):
        return spec
    if not isinstance(spec, dict):
        raise TypeError(f"make_env: task {index} must be a Task or a dict, got {type(spec).__name__}")
    try:
        return Task.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'task'}: {e['msg']}" for e in exc.errors())
        raise ValueError(
            f"make_env: task {index} ({spec!r:.80}) is not a valid task: {problems}. A task needs "
            '"id" and "prompt", and may have "answer" and "data"'
        ) from None
