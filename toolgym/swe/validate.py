"""SWE-bench's validation of a row, on this machine: its gold patch passes every listed test, and the
unpatched repository fails a FAIL_TO_PASS test (SWE-v0 runs it when a row is first drawn; ``toolgym swe
validate`` runs it over a whole file)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from toolgym.core.task import Task
from toolgym.rewards.swe import FileChanges, judge, test_sandbox_for
from toolgym.swe.workspaces import SWEWorkspaces
from toolgym.tools.bash import BashTool


def validator(
    spaces: SWEWorkspaces,
    bash: BashTool,
    python_for: Callable[[Task], str],
    timeout: float,
    test_timeout: float,
):
    """SWE-bench's validation of a row, on this machine: the gold patch passes every listed test, and the
    unpatched repository fails a FAIL_TO_PASS test. Returns why a row fails it (None: it holds)."""

    def check(task: Task) -> str | None:
        python = python_for(task)
        paths = bash.workspace_paths()
        if isinstance(paths, str):
            return f"the sandbox cannot hold its workspace: {paths}"
        sandbox, archive, tests = test_sandbox_for(bash), spaces.archive(task), spaces.test_files(task)
        options: dict[str, Any] = {
            "paths": paths,
            "python": python,
            "timeout": timeout,
            "test_timeout": test_timeout,
        }
        gold = judge(sandbox, archive, FileChanges.of(spaces.gold_files(task)), task, tests, **options)
        if gold.error:
            return f"the judge cannot run its tests here: {gold.error}"
        if not gold.passed:
            failing = {**gold.details["fail_to_pass"], **gold.details["pass_to_pass_failed"]}
            failing = {k: v for k, v in failing.items() if v != "passed"}
            sample = ", ".join(f"{k} ({v})" for k, v in list(failing.items())[:3])
            return (
                f"its gold patch does not pass here ({len(failing)} tests: {sample}); the local interpreter "
                f"{python} may lack what the repository needs. "
                f"Output: {gold.details.get('output', '')[-300:]}"
            )
        bare = judge(sandbox, archive, FileChanges(), task, tests, **options)
        if not bare.error and bare.passed:
            return "the unpatched repository already passes its FAIL_TO_PASS tests"
        return None

    return check
