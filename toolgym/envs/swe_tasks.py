"""SWE-v0's tasks: SWE-bench-schema rows on local clones, and the procedural repository world.

Both give a ``Task`` whose ``prompt`` is the instruction around the problem statement and whose ``data``
holds SWE-bench's fields (``instance_id``, ``repo``, ``base_commit``, ``patch``, ``test_patch``,
``fail_to_pass``, ``pass_to_pass`` as lists) plus ``kind`` (``swebench`` or ``procedural``).
``SWEWorkspaces`` turns a task into what its episode and judge need (the base archive, the hidden test
files, the gold post-image), built once per process.

**Rows** (SWE-bench, Verified, Lite, SWE-Gym, SWE-smith, R2E-Gym and SWE-rebench share the schema) come from
JSONL, Parquet, a Hugging Face dataset or a list of dicts; ``FAIL_TO_PASS``/``PASS_TO_PASS`` may be JSON
strings or lists; ``version``, ``environment_setup_commit``, ``image_name`` and other columns are kept in
``data``. A row is **refused when drawn**, with the reason, when its clone or base commit is missing, its
patches do not apply, its tests are not pytest node ids (Django's and SymPy's own runners are not supported)
or, with ``validate=True`` (the default), when on this machine its gold patch does not pass every listed
test or the unpatched repository already passes them (it needs what the local interpreter lacks, or the
row is wrong): ``sample`` draws another and warns once per row, ``get`` raises ``TaskRefused``.
``source.refused`` maps refused ids to reasons.

**The procedural world** (``toolgym.envs.swe_world``): seeded Python packages with injected bugs,
``level`` 1-3; task ids are ``swe-L{level}/{seed}``.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgym.core.task import FiniteSource, ListSource, ProceduralSource, Task, TaskSource
from toolgym.envs.swe_repos import RepoUnavailable, cached_files_archive, shared_repo_store
from toolgym.envs.task_files import FieldMap, hf_source, load_tasks

if TYPE_CHECKING:
    from toolgym.envs.swe_world import GeneratedRepo

log = logging.getLogger("toolgym.envs.swe")

WORKSPACE_PATH = "/testbed"
#: what SWE-bench's rows call their columns -> the names in Task.data
_ROW_FIELDS = FieldMap(prompt="problem_statement", answer=None, id="instance_id", data=None)
_NODE_ID = re.compile(r"^[^\s:]+\.py(::\S.*)?$")


class TaskRefused(KeyError):
    """A task that cannot be played here (``str(exc)`` says why)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


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


def _id_list(value: Any, column: str, task_id: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except ValueError:
            raise TaskRefused(f"{task_id}: {column} is neither a JSON list nor a list") from None
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TaskRefused(f"{task_id}: {column} must be a list of test ids")
    return list(value)


def row_task(task: Task, repos: str | None, where: str | None) -> Task:
    """A row's task with SWE-v0's data: lists for the test ids, ``kind``, the store's directory."""
    data = dict(task.data)
    for column in ("FAIL_TO_PASS", "PASS_TO_PASS", "fail_to_pass", "pass_to_pass"):
        if column in data:
            data[column.lower()] = _id_list(data.pop(column), column, task.id)
    data.setdefault("fail_to_pass", [])
    data.setdefault("pass_to_pass", [])
    data.update(kind="swebench", instance_id=task.id, repos=repos)
    for needed in ("repo", "base_commit"):
        if not data.get(needed):
            raise TaskRefused(f"{task.id}: the row has no {needed}")
    return task.model_copy(update={"prompt": instruction(task.prompt, where), "data": data, "answer": "done"})


def _not_pytest(ids: Sequence[str]) -> list[str]:
    return [t for t in ids if not _NODE_ID.match(t)]


class SWERows(FiniteSource):
    """SWE-bench-schema rows as SWE-v0 tasks, refused when drawn if they cannot play here (module doc)."""

    def __init__(
        self,
        rows: FiniteSource,
        workspaces: SWEWorkspaces,
        where: Callable[[], str | None],
        validate: Callable[[Task], str | None] | None = None,
    ):
        self.rows, self.workspaces, self._where, self._validate = rows, workspaces, where, validate
        self.name = getattr(rows, "name", "swe-rows")
        self.refused: dict[str, str] = {}
        self._checked: dict[str, Task] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.rows)

    def _ready(self, raw: Task) -> Task:
        with self._lock:
            if raw.id in self.refused:
                raise TaskRefused(f"{raw.id}: {self.refused[raw.id]}")
            if raw.id in self._checked:
                return self._checked[raw.id]
        try:
            task = row_task(raw, str(self.workspaces.store_root or ""), self._where())
            bad = _not_pytest(task.data["fail_to_pass"] + task.data["pass_to_pass"])
            if bad:
                raise TaskRefused(
                    f"its tests are not pytest node ids ({bad[0]!r}): only pytest suites run here"
                )
            if not task.data["fail_to_pass"]:
                raise TaskRefused("it lists no FAIL_TO_PASS test")
            self.workspaces.check(task)
            why = self._validate(task) if self._validate is not None else None
            if why:
                raise TaskRefused(why)
        except (TaskRefused, RepoUnavailable) as exc:
            why = str(exc).removeprefix(f"{raw.id}: ")
            with self._lock:
                first = raw.id not in self.refused
                self.refused[raw.id] = why
            if first:
                log.warning("SWE-v0 refuses task %s: %s", raw.id, why)
            raise TaskRefused(f"{raw.id}: {why}") from None
        with self._lock:
            self._checked[raw.id] = task
        return task

    def task_at(self, index: int) -> Task:
        return self._ready(self.rows.task_at(index))

    def get(self, task_id: str) -> Task:
        return self._ready(self.rows.get(task_id))

    def sample(self, rng: np.random.Generator) -> Task:
        order = rng.permutation(len(self))
        for index in order:
            try:
                return self.task_at(int(index))
            except TaskRefused:
                continue
        reasons = "; ".join(f"{k}: {v}" for k, v in list(self.refused.items())[:5])
        raise TaskRefused(f"every task of {self.name} is refused here ({reasons})")

    def eval_tasks(self, n: int | None = None) -> list[Task]:
        out: list[Task] = []
        for index in range(len(self)):
            if n is not None and len(out) >= n:
                break
            try:
                out.append(self.task_at(index))
            except TaskRefused:
                continue
        return out

    def describe(self) -> str:
        return f"{self.name} ({len(self):,} SWE-bench-schema rows)"


def row_source(tasks: Any) -> FiniteSource:
    """The rows of ``tasks=``: a JSONL/JSON/Parquet path or dataset dir, a ``datasets.Dataset``, or dicts."""
    if isinstance(tasks, str | Path):
        return load_tasks(tasks, fields=_ROW_FIELDS)
    if isinstance(tasks, Sequence) and all(isinstance(r, Mapping) for r in tasks):
        return ListSource([_ROW_FIELDS.to_task(r, i, "rows") for i, r in enumerate(tasks)], name="swe-rows")
    if hasattr(tasks, "column_names"):
        return hf_source(tasks, _ROW_FIELDS)
    raise TypeError(f"tasks= takes a task file, a dataset or a list of dicts, not {type(tasks).__name__}")


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
    from toolgym.envs.swe_world import (
        generate_repo,
    )  # (imported when first drawn: `import toolgym` stays light)

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
        import io
        import tarfile

        with tarfile.open(fileobj=io.BytesIO(self.archive(task))) as tar:
            try:
                member = tar.extractfile(path)
            except KeyError:
                return None
            return None if member is None else member.read().decode("utf-8", "replace")


def procedural_source(level: int, where: Callable[[], str | None]) -> TaskSource:
    """The procedural world's tasks at ``level`` (ids ``swe-L<level>/<seed>``)."""
    return ProceduralSource(f"swe-L{level}", lambda seed: procedural_task(seed, level, where()))
