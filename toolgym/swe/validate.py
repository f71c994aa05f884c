"""SWE-bench's validation of a row, on this machine: its gold patch passes every listed test, and the
unpatched repository fails a FAIL_TO_PASS test (SWE-v0 runs it when a row is first drawn; ``toolgym swe
validate`` runs it over a whole file, in parallel).

With built environments (``envs=``) each result is kept in ``ENVS/validation/`` (``ValidationCache``),
keyed by what decides it (the row's commit, patches and tests, the environment, the judge's own code and
its time limits),
so that a row validated once, by the command or by any training process, is not validated again, and one
validated by a toolgym whose judge decided otherwise is validated anew.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toolgym.core.task import Task
from toolgym.rewards.swe import DEFAULT_TEST_TIMEOUT, DEFAULT_TIMEOUT, FileChanges, judge, test_sandbox_for
from toolgym.sandbox.judge_driver import JUDGE_DRIVER, RUNNER
from toolgym.tools.bash import BashTool

#: the judge's own code, in each result's key: a toolgym whose judge decides otherwise validates again
JUDGE_CODE = hashlib.sha256((JUDGE_DRIVER + RUNNER).encode()).hexdigest()[:16]


class ValidationCache:
    """Validation results under ``root/validation/``, one JSON file per (row, environment, limits).

    ``limits``: the judge's seconds for its whole run and per test. They are in the key: a row refused
    because a test ran past 120 s is judged again under a larger limit, never answered from the cache."""

    def __init__(
        self, root: str | Path, limits: tuple[float, float] = (DEFAULT_TIMEOUT, DEFAULT_TEST_TIMEOUT)
    ) -> None:
        self.dir = Path(root) / "validation"
        self.limits = tuple(float(x) for x in limits)

    def key(self, task: Task, python: str) -> str:
        d = task.data
        try:  # a rebuilt environment is a new one (its interpreter's link is made anew)
            stamp = os.lstat(python).st_mtime_ns
        except OSError:
            stamp = 0
        body = [d.get("instance_id"), d.get("base_commit"), d.get("patch"), d.get("test_patch"),
                d.get("fail_to_pass"), d.get("pass_to_pass"), python, stamp, JUDGE_CODE,
                self.limits]  # fmt: skip
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:24]

    def get(self, task: Task, python: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.dir / f"{self.key(task, python)}.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, task: Task, python: str, result: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / f"{self.key(task, python)}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(dict(result)))
        os.replace(tmp, path)  # atomic: a reader sees the whole result or none


def validate_row(
    task: Task,
    workspaces: Any,
    bash: BashTool,
    python: str,
    timeout: float,
    test_timeout: float,
    judge_options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Validate one row: ``{"ok", "reason", "gold", "bare", "seconds", "python"}``."""
    started = time.monotonic()
    out: dict[str, Any] = {"instance_id": task.data.get("instance_id", task.id), "python": python}

    def done(reason: str | None, **more: Any) -> dict[str, Any]:
        return {**out, "ok": reason is None, "reason": reason, **more,
                "seconds": round(time.monotonic() - started, 2)}  # fmt: skip

    paths = bash.workspace_paths()
    if isinstance(paths, str):
        return done(f"the sandbox cannot hold its workspace: {paths}")
    sandbox, archive, tests = test_sandbox_for(bash), workspaces.archive(task), workspaces.test_files(task)
    options: dict[str, Any] = {"paths": paths, "python": python, "timeout": timeout}
    options.update(test_timeout=test_timeout, **(judge_options or {}))
    gold = judge(sandbox, archive, FileChanges.of(workspaces.gold_files(task)), task, tests, **options)
    if gold.error:
        return done(f"the judge cannot run its tests here: {gold.error}", gold=gold.details)
    if not gold.passed:
        failing = {**gold.details["fail_to_pass"], **gold.details["pass_to_pass_failed"]}
        failing = {k: v for k, v in failing.items() if v != "passed"}
        sample = ", ".join(f"{k} ({v})" for k, v in list(failing.items())[:3])
        if gold.details.get("looked_up"):
            hosts = ", ".join(gold.details["looked_up"])
            return done(
                f"it needs a real network: its tests look up {hosts}, which nothing here answers (the "
                f"judge's runs reach only their own loopback), and its gold patch fails {len(failing)} "
                f"tests: {sample}",
                gold=gold.details,
            )
        if gold.details.get("tampering"):  # (the test it stopped in reads "timed out": the run ended there)
            caught = "; ".join(gold.details["tampering"])
            return done(
                f"its gold patch's run stopped where the code under test did what the judge's seal refuses "
                f"({caught}), after {gold.details.get('tests_passed', '?')} tests passed",
                gold=gold.details,
            )
        if "timed out" in failing.values():
            return done(
                f"its gold patch does not pass here ({len(failing)} tests: {sample}): a test ran past the "
                f"judge's {test_timeout:g} s per test (give more with --test-timeout, or test_timeout= to "
                f"SWE-v0)",
                gold=gold.details,
            )
        return done(
            f"its gold patch does not pass here ({len(failing)} tests: {sample}); the interpreter {python} "
            f"may lack what the repository needs. Output: {gold.details.get('output', '')[-300:]}",
            gold=gold.details,
        )
    bare = judge(sandbox, archive, FileChanges(), task, tests, **options)
    if not bare.error and bare.passed:
        return done("the unpatched repository already passes its FAIL_TO_PASS tests")
    matched = gold.details.get("matched_ids")
    return done(
        None, tests_passed=gold.details["tests_passed"], **({"matched_ids": matched} if matched else {})
    )


def validator(
    workspaces: Any,
    bash: BashTool,
    python_for: Callable[[Task], str],
    timeout: float,
    test_timeout: float,
    judge_options: Callable[[Task], Mapping[str, Any]] | None = None,
    cache: ValidationCache | None = None,
) -> Callable[[Task], str | None]:
    """SWE-v0's draw-time check: why a row fails validation (None: it holds), read from ``cache`` when a
    result is there, and written to it after a run."""

    def check(task: Task) -> str | None:
        python = python_for(task)
        if cache is not None:
            known = cache.get(task, python)
            if known is not None:
                return known["reason"]
        options = judge_options(task) if judge_options is not None else {}
        result = validate_row(task, workspaces, bash, python, timeout, test_timeout, options)
        if cache is not None and not str(result.get("reason") or "").startswith("the sandbox cannot"):
            cache.put(task, python, result)
        return result["reason"]

    return check
