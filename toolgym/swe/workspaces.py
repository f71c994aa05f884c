"""What a SWE task's episode and judge start from: the base archive, the hidden test files and the gold
post-image (``SWEWorkspaces``), for SWE-bench-schema rows (from the repository store,
:mod:`toolgym.swe.repos`) and for the procedural world's tasks (:mod:`toolgym.swe.world`), built once per
process; and the task's instruction, SWE-agent's framing of a problem statement.
"""

from __future__ import annotations

import difflib
import io
import tarfile
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from toolgym.core.task import Task
from toolgym.swe.repos import RepoUnavailable, cached_files_archive, shared_repo_store

if TYPE_CHECKING:
    from toolgym.swe.world import GeneratedRepo

WORKSPACE_PATH = "/testbed"


def instruction(problem: str, where: str | None) -> str:
    """The task's prompt: SWE-agent's framing of the problem statement. ``where``: the repository's path
    (``/testbed``), or None where the sandbox cannot show it there (then it is the working directory)."""
    place = f"in the directory {where}" if where else "in your working directory (every command starts there)"
    upload = f"<uploaded_files>\n{where}\n</uploaded_files>\n" if where else ""
    return (
        f"{upload}I've uploaded a python code repository {place}. Consider the following issue description:"
        f"\n\n<issue_description>\n{problem.strip()}\n</issue_description>\n\n"
        "Can you help me implement the necessary changes to the repository so that the requirements "
        "specified in the issue are met? The tests that check them are taken care of: you do not need to "
        "change any test file. Make the minimal changes to the non-test files of the repository. Explore "
        "the code, reproduce the problem with a small script, fix it, and check the fix; then give your "
        "final answer (a one-line summary of the change) to finish."
    )


# --------------------------------------------------------------------------------------- procedural


def _unified(path: str, before: str | None, after: str | None) -> str:
    a = [] if before is None else before.splitlines(keepends=True)
    b = [] if after is None else after.splitlines(keepends=True)
    head = f"diff --git a/{path} b/{path}\n"
    old = "/dev/null" if before is None else f"a/{path}"
    new = "/dev/null" if after is None else f"b/{path}"
    return head + "".join(difflib.unified_diff(a, b, old, new))


def repo_patch(before: Mapping[str, str], after: Mapping[str, str]) -> str:
    """A git-style unified diff from one set of files to another."""
    paths = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    return "".join(_unified(p, before.get(p), after.get(p)) for p in paths)


@lru_cache(maxsize=256)
def generated(seed: int, level: int) -> GeneratedRepo:
    """The procedural world's repository for (seed, level), once per process."""
    from toolgym.swe.world import generate_repo  # (imported when first drawn: `import toolgym` stays light)

    return generate_repo(seed, level)


def _sorted_files(files: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(files.items()))


def procedural_task(seed: int, level: int, where: str | None) -> Task:
    """The procedural task of ``seed`` at ``level`` (its id is set by the ``ProceduralSource``)."""
    repo = generated(seed, level)
    _, commit = cached_files_archive(_sorted_files(repo.start_files), f"{repo.name}: initial commit")
    tests_before = {p: t for p, t in repo.start_files.items() if p.startswith("tests/")}
    tests_after = {p: t for p, t in repo.files.items() if p.startswith("tests/")} | repo.hidden_tests
    code_before = {p: t for p, t in repo.start_files.items() if not p.startswith("tests/")}
    code_after = {p: t for p, t in repo.files.items() if not p.startswith("tests/")}
    return Task(
        id="",
        prompt=instruction(repo.problem_statement, where),
        answer="done",
        data={
            "kind": "procedural",
            "seed": seed,
            "level": level,
            "instance_id": f"{repo.name}-L{level}-{seed}",
            "repo": f"toolgym/{repo.name}",
            "base_commit": commit,
            "patch": repo_patch(code_before, code_after),
            "test_patch": repo_patch(tests_before, tests_after),
            "fail_to_pass": list(repo.fail_to_pass),
            "pass_to_pass": list(repo.pass_to_pass),
            "problem_statement": repo.problem_statement,
            "bugs": [f"{m.kind} in {m.path}:{m.function}" for m in repo.mutations],
        },
    )


# --------------------------------------------------------------------------------------- workspaces


class SWEWorkspaces:
    """A task's base archive, hidden test files and gold post-image, for both kinds of task (built once per
    process: the store caches rows' archives, the procedural world's are cached by their files)."""

    def __init__(self, repos: str | Path | None = None):
        self.store_root = Path(repos) if repos is not None else None

    def _store(self, task: Task):
        root = task.data.get("repos") or self.store_root
        if not root:
            raise RepoUnavailable(f"task {task.id} needs repos=DIR (the directory of owner__name clones)")
        return shared_repo_store(root)

    def _snapshot(self, task: Task):
        d = task.data
        return self._store(task).snapshot(
            d["repo"], d["base_commit"], d.get("patch") or "", d.get("test_patch") or ""
        )

    def check(self, task: Task) -> None:
        """``RepoUnavailable`` when the task's repository, commit or patches cannot be had here."""
        if task.data["kind"] != "procedural":
            self._snapshot(task)

    def archive(self, task: Task) -> bytes:
        if task.data["kind"] == "procedural":
            repo = generated(task.data["seed"], task.data["level"])
            return cached_files_archive(_sorted_files(repo.start_files), f"{repo.name}: initial commit")[0]
        return self._snapshot(task).archive

    def test_files(self, task: Task) -> dict[str, bytes | None]:
        if task.data["kind"] == "procedural":
            repo = generated(task.data["seed"], task.data["level"])
            tests = {p: t for p, t in repo.files.items() if p.startswith("tests/")} | repo.hidden_tests
            return {p: t.encode() for p, t in tests.items()}
        return dict(self._snapshot(task).test_files)

    def gold_files(self, task: Task) -> dict[str, bytes | None]:
        """The files the gold patch changes, as it leaves them (None: deleted)."""
        if task.data["kind"] == "procedural":
            repo = generated(task.data["seed"], task.data["level"])
            paths = [
                p
                for p in repo.files
                if not p.startswith("tests/") and repo.files[p] != repo.start_files.get(p)
            ]
            gone = [p for p in repo.start_files if p not in repo.files and not p.startswith("tests/")]
            return {p: repo.files[p].encode() for p in paths} | dict.fromkeys(gone)
        return dict(self._snapshot(task).gold_files)

    def base_text(self, task: Task, path: str) -> str | None:
        """A file of the base commit as text (the oracle's edits start from it), None when absent."""
        if task.data["kind"] == "procedural":
            return generated(task.data["seed"], task.data["level"]).start_files.get(path)
        with tarfile.open(fileobj=io.BytesIO(self.archive(task))) as tar:
            try:
                member = tar.extractfile(path)
            except KeyError:
                return None
            return None if member is None else member.read().decode("utf-8", "replace")
