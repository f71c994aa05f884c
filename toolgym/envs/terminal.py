"""toolgym/Terminal-v0: shell tasks in the local sandbox, procedural by default, Harbor tasks from disk.

The model works in a bash shell (the ``bash`` tool, :mod:`toolgym.tools.bash`) and views and edits files
with ``str_replace_editor`` (:mod:`toolgym.tools.editor`, the same workspace): each command runs isolated in
the episode's sandbox session, whose workspace persists for the episode (a fresh copy of the task's files
each episode). When the model answers, the verifier judges the **final workspace** (and the answer) after the
episode, outside the workspace's process tree:

- procedural tasks (:mod:`toolgym.envs.terminal_tasks`, ``level`` 1-3): checks written in Python over a
  snapshot of the workspace, read back as data into the trainer's process (file lines or text, modes, the
  member names of an archive, the answer); nothing in the workspace is executed there;
- Harbor-layout tasks (``tasks=DIR``, :mod:`toolgym.envs.terminal_harbor`): the task's own ``tests/test.sh``,
  run in a fresh sandbox child that sees a copy of the final workspace at ``/app`` and writes
  ``/logs/verifier/reward.txt`` (or ``reward.json``), which only that child can write.

The oracle replays the task's solution commands (the ``solution/solve.sh`` of a Harbor task), then answers.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from toolgym.core.registry import register_env
from toolgym.core.task import ProceduralSource, Task, TaskSource
from toolgym.core.types import ToolCall, Trajectory, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.envs.terminal_harbor import harbor_source, run_harbor_tests
from toolgym.envs.terminal_tasks import KINDS, LEVELS, generate_terminal_task
from toolgym.rewards.base import Verifier
from toolgym.tools.bash import DEFAULT_TIMEOUT, BashTool, Workspace
from toolgym.tools.editor import EditorTool

SYSTEM_PROMPT = (
    "You complete tasks in a Linux shell. Run bash commands with the bash tool to look at the files and to "
    "change them; standard tools (find, grep, sed, awk, sort, uniq, wc, tar, chmod, python3) are there, the "
    "network is not. Check your result before you finish, then give the final answer the task asks for."
)


def terminal_oracle(task: Task) -> Sequence[ToolCall | str]:
    """A correct solution: the task's solution commands through the bash tool, then the answer."""
    steps = [ToolCall(name="bash", arguments={"command": c}) for c in task.data.get("solution", ())]
    return [*steps, str(task.answer)]


def _same_answer(given: str, expected: str) -> bool:
    def norm(text: str) -> str:
        text = text.strip().strip("'\"`").rstrip(".").strip().lower()
        return text.replace(",", "") if text.replace(",", "").lstrip("-").isdigit() else text

    return norm(given) == norm(expected)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip("\n").split("\n")] if text.strip() else []


def _tar_members(data: bytes) -> list[str] | str:
    """The regular files' names of a tar archive (read as data: nothing is extracted), or why not."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
            return sorted(m.name.removeprefix("./") for m in tar.getmembers() if m.isfile())
    except (tarfile.TarError, OSError, EOFError) as exc:
        return f"not a readable tar archive: {exc}"


def check_workspace(check: dict, ws: Workspace, answer: str) -> str | None:
    """One check of a procedural task; None when it holds, else what is wrong (for ``Verdict.details``)."""
    kind, path = check["kind"], check.get("path", "")
    if kind == "answer":
        return None if _same_answer(answer, check["expected"]) else f"answer {answer.strip()[:80]!r} is wrong"
    if kind in ("lines", "text", "tar") and path in ws.links:
        return f"{path} is a symbolic link, not a file"
    if kind in ("lines", "text", "tar", "mode") and path not in ws.files:
        return f"{path} is missing"
    if kind == "lines":
        return (
            None
            if _lines(ws.text(path) or "") == check["expected"]
            else f"{path} does not hold the expected lines"
        )
    if kind == "text":
        return None if ws.text(path) == check["expected"] else f"{path} is not as expected"
    if kind == "mode":
        mode = ws.modes[path]
        return None if mode & check["mask"] == check["expected"] else f"{path} has mode {mode:o}"
    if kind == "tar":
        members = _tar_members(ws.files[path])
        if isinstance(members, str):
            return f"{path}: {members}"
        return None if members == check["expected"] else f"{path} holds {members[:8]}"
    raise ValueError(f"unknown check kind {kind!r}")


class TerminalVerifier(Verifier):
    """Judges a terminal episode from its final workspace (see the module docstring).

    Bound to the env's bash tool, whose session holds the workspace until the episode ends. A workspace that
    cannot be read back (the sandbox failed or is missing a layer the task needs) is ``Verdict.error``, never
    a 0."""

    name = "terminal"

    def __init__(self, tool: BashTool, test_timeout: float = 120.0):
        self.tool = tool
        self.test_timeout = test_timeout

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        ws = self.tool.for_verdict("snapshot")
        if isinstance(ws, Verdict):
            return ws
        if "harbor" in task.data:
            timeout = float(task.data["harbor"].get("verifier_timeout") or self.test_timeout)
            return run_harbor_tests(self.tool.sandbox, task, ws, timeout)
        failed = [why for check in task.data["checks"] if (why := check_workspace(check, ws, answer))]
        return Verdict(
            reward=0.0 if failed else 1.0,
            passed=not failed,
            details={"kind": task.data.get("kind"), "failed": failed, "checks": len(task.data["checks"])},
        )


@register_env(
    "toolgym/Terminal-v0",
    tools=["bash", "str_replace_editor"],
    task_source="procedural shell tasks on a generated workspace (level 1-3), or Harbor task dirs (tasks=)",
    description="Shell tasks in a sandboxed, persistent workspace; the final workspace is judged afterwards.",
    oracle=terminal_oracle,
)
def make_terminal_env(
    level: int = 1,
    kinds: str | Sequence[str] | None = None,
    tasks: str | Path | TaskSource | None = None,
    action_format: str = "xml",
    max_turns: int = 16,
    timeout: float = DEFAULT_TIMEOUT,
    tool: BashTool | None = None,
    **env_kwargs: Any,
) -> ToolEnv:
    """``level`` 1-3 and ``kinds`` (names of ``terminal_tasks.KINDS``, comma-separated or a list; default all)
    shape the procedural tasks. ``tasks``: a Harbor task dir or a folder of them (or a ``TaskSource``).
    ``timeout``: seconds per command (everything it started is killed then). ``tool``: a
    ``BashTool`` of your own (another sandbox, limits)."""
    if level not in LEVELS:
        raise ValueError(f"level must be 1, 2 or 3, got {level!r}")
    source: TaskSource
    if tasks is None:
        chosen = tuple(kinds.split(",") if isinstance(kinds, str) else kinds or KINDS)
        unknown = [k for k in chosen if k not in KINDS]
        if unknown or not chosen:
            raise ValueError(f"unknown task kinds {unknown}; choose from {', '.join(KINDS)}")
        name = f"terminal-L{level}" + ("" if chosen == tuple(KINDS) else "-" + "+".join(chosen))
        source = ProceduralSource(name, partial(generate_terminal_task, level=level, kinds=chosen))
    elif isinstance(tasks, TaskSource):
        source = tasks
    else:
        source = harbor_source(tasks)
    bash = tool or BashTool(timeout=timeout)
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    tools = [bash, EditorTool(bash)]
    return ToolEnv(source, tools, TerminalVerifier(bash), action_format, max_turns=max_turns, **env_kwargs)
