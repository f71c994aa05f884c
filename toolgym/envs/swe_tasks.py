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
patches do not apply, its tests are not pytest node ids and it names no other runner's test command
(Django's ``tests/runtests.py``, SymPy's ``bin/test``: ``toolgym.swe.runners``) or, with ``validate=True``
(the default), when on this machine its gold patch does not pass every listed
test or the unpatched repository already passes them (it needs what the local interpreter lacks, or the
row is wrong): ``sample`` draws another and warns once per row, ``get`` raises ``TaskRefused``.
``source.refused`` maps refused ids to reasons.

**The procedural world** (``toolgym.swe.world``): seeded Python packages with injected bugs,
``level`` 1-3; task ids are ``swe-L{level}/{seed}``.
"""

from __future__ import annotations

import io
import logging
import re
import tarfile
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toolgym.core.task import FiniteSource, ListSource, ProceduralSource, Task, TaskSource
from toolgym.envs.task_files import FieldMap, hf_source, load_tasks
from toolgym.swe.repos import RepoUnavailable
from toolgym.swe.runners import listed_ids, row_command
from toolgym.swe.workspaces import SWEWorkspaces, instruction, procedural_task

log = logging.getLogger("toolgym.envs.swe")

#: what SWE-bench's rows call their columns -> the names in Task.data
_ROW_FIELDS = FieldMap(prompt="problem_statement", answer=None, id="instance_id", data=None)
_NODE_ID = re.compile(r"^[^\s:]+\.py(::\S.*)?$")


class TaskRefused(KeyError):
    """A task that cannot be played here (``str(exc)`` says why)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _id_list(value: Any, column: str, task_id: str) -> list[str]:
    try:
        return listed_ids(value)
    except ValueError as exc:
        raise TaskRefused(f"{task_id}: {column} {exc}") from None


#: pytest's progress marker (``[100%]``), which SWE-bench's log parser kept as a test id in a few published
#: rows (Verified's pytest-5262 and pytest-7521 list it among PASS_TO_PASS): it names no test
_PROGRESS_MARKER = re.compile(r"\[\s*\d{1,3}%\]")


def row_task(task: Task, repos: str | None, where: str | None) -> Task:
    """A row's task with SWE-v0's data: lists for the test ids, ``kind``, the store's directory. A listed
    id that is pytest's progress marker is left out, and named in ``data["not_test_ids"]``
    (``_without_absent_files`` leaves out the ids of files the repository does not have)."""
    data = dict(task.data)
    for column in ("FAIL_TO_PASS", "PASS_TO_PASS", "fail_to_pass", "pass_to_pass"):
        if column in data:
            data[column.lower()] = _id_list(data.pop(column), column, task.id)
    data.setdefault("fail_to_pass", [])
    data.setdefault("pass_to_pass", [])
    for column in ("fail_to_pass", "pass_to_pass"):
        markers = [t for t in data[column] if _PROGRESS_MARKER.fullmatch(t.strip())]
        if markers:
            data[column] = [t for t in data[column] if t not in markers]
            data.setdefault("not_test_ids", {})[column] = markers
    data.update(kind="swebench", instance_id=task.id, repos=repos)
    for needed in ("repo", "base_commit"):
        if not data.get(needed):
            raise TaskRefused(f"{task.id}: the row has no {needed}")
    return task.model_copy(update={"prompt": instruction(task.prompt, where), "data": data, "answer": "done"})


def _without_absent_files(task: Task, workspaces: SWEWorkspaces) -> Task:
    """The task without the PASS_TO_PASS node ids whose file the repository does not have, base, tests and
    gold patch together (named in ``data["not_test_ids"]``): SWE-bench's log parser also read the summary
    lines of the inner pytest sessions that pytest's own tests run (pytest-7521 lists
    ``test_capsysbinary.py::test_hello``, a file its test writes in a temporary directory). Such an id
    passes in no run, and pytest given a missing file runs nothing."""
    listed = [t for t in task.data["pass_to_pass"] if _NODE_ID.match(t) and t.split("::")[0].endswith(".py")]
    if not listed:
        return task
    changed = {**workspaces.test_files(task), **workspaces.gold_files(task)}
    with tarfile.open(fileobj=io.BytesIO(workspaces.archive(task))) as tar:
        present = {p for p in tar.getnames() if changed.get(p, b"") is not None}
    present |= {p for p, data in changed.items() if data is not None}
    absent = [t for t in listed if t.split("::")[0] not in present]
    if not absent:
        return task
    data = dict(task.data, pass_to_pass=[t for t in task.data["pass_to_pass"] if t not in absent])
    data["not_test_ids"] = {**data.get("not_test_ids", {})}
    data["not_test_ids"]["pass_to_pass"] = [*data["not_test_ids"].get("pass_to_pass", []), *absent]
    return task.model_copy(update={"data": data})


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
            command = row_command(task.data) if bad else None
            if bad and (command is None or command.kind == "pytest"):
                raise TaskRefused(
                    f"its tests are not pytest node ids ({bad[0]!r}) and the row names no test command of "
                    "another runner (Django's tests/runtests.py, SymPy's bin/test): "
                    + (f"its command runs {command.program}" if command else "it has none")
                )
            if not task.data["fail_to_pass"]:
                raise TaskRefused("it lists no FAIL_TO_PASS test")
            self.workspaces.check(task)
            task = _without_absent_files(task, self.workspaces)
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


def procedural_source(level: int, where: Callable[[], str | None]) -> TaskSource:
    """The procedural world's tasks at ``level`` (ids ``swe-L<level>/<seed>``)."""
    return ProceduralSource(f"swe-L{level}", lambda seed: procedural_task(seed, level, where()))
