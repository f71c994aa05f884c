"""toolgym/SWE-v0: fix a bug in a Python repository at /testbed, judged by the task's tests, without Docker.

The repository is a git work tree at the task's base commit whose history ends there
(:mod:`toolgym.swe.repos`), unpacked into the episode's sandbox session: the workspace machinery of
Terminal-v0 (``BashTool``), at SWE-bench's path ``/testbed``. The model has ``bash`` and
``str_replace_editor`` (SWE-agent's and OpenHands' editor); the observation is the problem statement; the
episode ends with a final answer. Each live episode holds one sandbox session slot, like a python session,
so hundreds of concurrent episodes keep their files.

After the answer the judge (:mod:`toolgym.rewards.swe`) runs the task's FAIL_TO_PASS and PASS_TO_PASS tests on
the agent's changes in a fresh sandbox child, with the test files and test configuration put back: reward 1
when all pass (``reward="fraction"``: the share). Tasks (:mod:`toolgym.envs.swe_tasks`): the procedural
repository world by default (``level`` 1-3), or SWE-bench-schema rows with ``tasks=`` and ``repos=DIR``
(``owner__name`` clones). ``toolgym swe mine REPO`` makes rows from any local repository with a test suite.

Where the sandbox has no read-only view (a container without CAP_SYS_ADMIN, a cluster user without user
namespaces), ``/testbed`` cannot exist: the repository is the session's own working directory, the
instruction says so, and the editor still takes ``/testbed/...`` paths.

The oracle writes the gold patch with the editor (a ``str_replace`` per changed region, ``create`` for a
new file, ``rm`` for a removed one), then answers.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from toolgym.core.registry import register_env
from toolgym.core.task import FiniteSource, Task, TaskSource
from toolgym.core.types import ToolCall
from toolgym.envs.base import ToolEnv
from toolgym.envs.swe_tasks import SWERows, TaskRefused, procedural_source, row_source
from toolgym.rewards.swe import DEFAULT_TEST_TIMEOUT, DEFAULT_TIMEOUT, SWEJudge
from toolgym.sandbox.limits import MiB
from toolgym.swe.interpreters import interpreter_for, interpreters, sandbox_for
from toolgym.swe.row_envs import RowEnvironments
from toolgym.swe.runners import judge_options_for
from toolgym.swe.validate import ValidationCache, validator
from toolgym.swe.workspaces import WORKSPACE_PATH, SWEWorkspaces
from toolgym.tools.bash import TERMINAL_LIMITS, BashTool
from toolgym.tools.editor import EditorTool

SYSTEM_PROMPT = (
    "You are a software engineer fixing an issue in a Python repository. Work in the shell with the bash "
    "tool (git, grep, find, sed and python are there; the network is not) and view and edit files with "
    "str_replace_editor. Read the relevant code, reproduce the issue, make the fix, run the tests that "
    "exercise it, then give your final answer."
)
#: seconds per shell command in a SWE episode (a test run can take a while)
COMMAND_TIMEOUT = 120.0
#: a SWE session's limits: the repository lives in its private /tmp (disk), pytest runs in it
SWE_LIMITS = TERMINAL_LIMITS.model_copy(
    update={
        "memory_bytes": 2048 * MiB,
        "disk_bytes": 1024 * MiB,
        "file_size_bytes": 256 * MiB,
        "processes": 128,
        "open_files": 1024,
        "cpu_s": 600,
    }
)
_WORKSPACES: dict[str | None, SWEWorkspaces] = {}


def _workspaces(repos: str | Path | None) -> SWEWorkspaces:
    key = None if repos is None else str(Path(repos).resolve())
    if key not in _WORKSPACES:
        _WORKSPACES[key] = SWEWorkspaces(key)
    return _WORKSPACES[key]


def _edits(path: str, before: str, after: str) -> list[ToolCall]:
    """``str_replace`` calls turning ``before`` into ``after``, one per changed region, each ``old_str``
    widened by whole lines until it occurs once in the file as it stands then."""
    calls = []
    text = before
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    opcodes = [
        op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    shift = 0  # lines the edits so far added
    for _, i1, i2, j1, j2 in opcodes:
        lines = text.splitlines(keepends=True)
        lo, hi = i1 + shift, i2 + shift
        new = "".join(b[j1:j2])
        while True:
            old = "".join(lines[lo:hi])
            if old and text.count(old) == 1:
                break
            if lo == 0 and hi >= len(lines):
                break
            lo, hi = max(lo - 1, 0), min(hi + 1, len(lines))
        # the widened context is kept around the new text
        prefix = "".join(lines[lo : i1 + shift])
        suffix = "".join(lines[i2 + shift : hi])
        replacement = prefix + new + suffix
        calls.append(
            ToolCall(
                name="str_replace_editor",
                arguments={"command": "str_replace", "path": path, "old_str": old, "new_str": replacement},
            )
        )
        text = text.replace(old, replacement, 1)
        shift += (j2 - j1) - (i2 - i1)
    return calls


def swe_oracle(task: Task) -> Sequence[ToolCall | str]:
    """A correct solution: the gold patch written with the editor, then the answer."""
    spaces = _workspaces(task.data.get("repos") or None)
    steps: list[ToolCall | str] = []
    for rel, data in sorted(spaces.gold_files(task).items()):
        path = f"{WORKSPACE_PATH}/{rel}"
        before = spaces.base_text(task, rel)
        if data is None:
            steps.append(ToolCall(name="bash", arguments={"command": f"rm -f -- '{rel}'"}))
        elif before is None:
            steps.append(
                ToolCall(
                    name="str_replace_editor",
                    arguments={"command": "create", "path": path, "file_text": data.decode()},
                )
            )
        else:
            steps.extend(_edits(path, before, data.decode()))
    return [*steps, "Applied the fix."]


def swe_wrong(task: Task) -> Sequence[ToolCall | str]:
    """A wrong solution: a look at the repository, then the answer, with the bug left in place."""
    return [ToolCall(name="bash", arguments={"command": "git status --short; ls"}), "Fixed it."]


def procedural_judge_options(task: Task) -> dict[str, Any]:
    """The judge's keywords for the procedural world's tasks: pytest without the plugins installed beside
    it. Those repositories are toolgym's own, plain pytest suites judged with toolgym's interpreter, so the
    plugins there are toolgym's and its user's (hypothesis, xdist, pytest-benchmark in a dev install), none
    of the repository's. Registering them cost 0.17 s of CPU of a one-test pytest run's 0.26 s, in a fork of
    a process that had imported them already; eight procedural episodes (oracle and wrong answer, four
    tasks) took 3.45 s without them and 3.86 s with them. Rows and mined repositories keep them
    (pytest-django, pytest-mock and the like are their suites' own)."""
    return {"plugin_autoload": False}


@register_env(
    "toolgym/SWE-v0",
    tools=["bash", "str_replace_editor"],
    task_source="procedural Python repositories with injected bugs (level 1-3), or SWE-bench-schema rows on "
    "local clones (tasks=, repos=)",
    description="Fix an issue in a git repository at /testbed with bash and an editor; the task's own tests "
    "judge the change in a fresh sandbox.",
    oracle=swe_oracle,
    wrong=swe_wrong,
)
def make_swe_env(
    level: int = 1,
    tasks: Any = None,
    repos: str | Path | None = None,
    reward: Literal["resolved", "fraction"] = "resolved",
    validate: bool = True,
    python: str | Path | Mapping[str, str] | None = None,
    action_format: str = "xml",
    max_turns: int = 40,
    timeout: float = COMMAND_TIMEOUT,
    judge_timeout: float = DEFAULT_TIMEOUT,
    test_timeout: float = DEFAULT_TEST_TIMEOUT,
    tool: BashTool | None = None,
    envs: str | Path | None = None,
    **env_kwargs: Any,
) -> ToolEnv:
    """``level`` 1-3 shapes the procedural tasks (1: one bug; 2: bugs in two modules; 3: a missing feature
    whose tests are hidden). ``tasks``: SWE-bench-schema rows (a .jsonl/.json/.parquet file, a dataset dir or
    object, a list of dicts, or a ``FiniteSource``) on the clones under ``repos``. ``reward``: ``"resolved"``
    or ``"fraction"``. ``validate``: check each row's gold patch on this machine when first drawn (module
    docstring of ``swe_tasks``). ``python``: the interpreter the tests (and the agent's ``python``) run
    with: one (an executable or a venv directory) or ``{"owner/name": ..., "*": default}`` per repository
    (default this one; see ``toolgym.swe.interpreters``).
    ``timeout``: seconds per shell command; ``judge_timeout`` / ``test_timeout``: the judge's whole run and
    each test. ``tool``: a ``BashTool`` of your own (another sandbox, limits)."""
    if level not in (1, 2, 3):
        raise ValueError(f"level must be 1, 2 or 3, got {level!r}")
    if reward not in ("resolved", "fraction"):
        raise ValueError(f"reward must be 'resolved' or 'fraction', got {reward!r}")
    if repos is not None and not Path(repos).is_dir():
        raise FileNotFoundError(f"repos={repos!s}: no such directory (it holds owner__name git clones)")
    if tasks is None and repos is not None:
        raise ValueError("repos= goes with tasks= (the rows whose repositories it holds)")
    if envs is not None and tasks is None:
        raise ValueError("envs= goes with tasks= (the rows whose environments it holds)")
    if envs is not None and python is not None:
        raise ValueError("envs= gives each row its environment's interpreter: leave python= out")
    spaces: SWEWorkspaces | RowEnvironments = _workspaces(repos)
    python_for = interpreter_for(python)
    pythons = interpreters(python)
    if envs is not None:
        spaces = RowEnvironments(envs, spaces)
        python_for, pythons, judge_options = spaces.python_for, spaces.pythons(), spaces.judge_options
    else:
        judge_options = lambda task: judge_options_for(task.data)  # noqa: E731
    bash = tool or BashTool(
        sandbox=sandbox_for(pythons),
        timeout=timeout,
        limits=SWE_LIMITS,
        workspace="testbed",
        workspace_path=WORKSPACE_PATH,
        archive=spaces.archive,
        path_prefix=None
        if python is None and envs is None
        else lambda task: os.path.dirname(python_for(task)),
    )

    if envs is not None:  # every episode would be an infra error: say so now, with the fix
        paths = bash.workspace_paths()
        if isinstance(paths, str):
            raise ValueError(f"toolgym/SWE-v0 cannot play rows in their environments here: {paths}")

    def where() -> str | None:
        paths = bash.workspace_paths()
        return WORKSPACE_PATH if not isinstance(paths, str) and paths[1] == WORKSPACE_PATH else None

    source: TaskSource
    if tasks is None:
        source = procedural_source(level, where)
    else:
        rows = tasks if isinstance(tasks, FiniteSource) else row_source(tasks)
        cache = ValidationCache(envs, (judge_timeout, test_timeout)) if envs is not None else None
        check = (
            validator(spaces, bash, python_for, judge_timeout, test_timeout, judge_options, cache)
            if validate
            else None
        )
        source = SWERows(rows, spaces, where, check)  # type: ignore[arg-type]  # (the same interface)
    verifier = SWEJudge(
        bash,
        spaces,
        reward=reward,
        python=python_for,
        timeout=judge_timeout,
        test_timeout=test_timeout,
        options=judge_options if tasks is not None else procedural_judge_options,
    )
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    env_kwargs.setdefault("max_observation_chars", 16_000)
    return ToolEnv(
        source, [bash, EditorTool(bash)], verifier, action_format, max_turns=max_turns, **env_kwargs
    )


__all__ = ["TaskRefused", "make_swe_env", "swe_oracle", "swe_wrong"]
