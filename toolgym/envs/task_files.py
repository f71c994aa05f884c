"""Task files: the readers that turn a file's rows into a ``RowSource``, the per-process cache every env
shares them through, and verl-format rows.

Readers: ``jsonl_source`` (JSON lines, or a ``.json`` file holding one array), ``parquet_source`` (its Arrow
table), ``hf_source`` (a Hugging Face ``datasets`` object or a local dataset directory), each mapping columns
to ``Task`` fields with ``FieldMap``; ``read_task_file`` picks one by the path's suffix. Rows are kept
compact (JSONL as its raw lines, Parquet as its Arrow table) and a ``Task`` is built when drawn.

Task files at training scale: a verl worker makes an env per concurrent episode, all with the same
``tasks=`` file. So a file is read once per process and shared (``shared_file_source``: one immutable source
per path, size, modification time, layout and the options that shape its tasks; a changed file is read
again), and opened only when a task is drawn from it: ``LazyFileSource``, what the envs hold, never opens the
file for an episode that pins its task (verl rows, ``options={"task": ...}``), so such rows still play after
the file is gone. ``load_tasks`` is that front for a plain task file.

verl rows (``verl_file_source``, ``verl_row_task``): the layout DAPO-Math-17k, Search-R1, DeepCoder and
SkyRL-SQL ship in, and ``toolgym export verl`` writes; every env's file loader (``*_tasks.py`` beside this
module) reads such rows through it before shaping them its own way.

Why one module of this length: the row readers, the per-process cache and the verl layout are one path (a file
to a shared source whose tasks are built when drawn), and every loader beside it uses them together; each
piece is short.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from toolgym.core.errors import UnknownNameError
from toolgym.core.task import FiniteSource, RowSource, Task
from toolgym.util.jsonl import json_object, read_jsonl


class JsonlRows(Sequence[dict[str, Any]]):
    """A JSON-lines file as one bytes buffer and the offsets of its lines, each parsed when asked for: the
    file's size plus 16 bytes a row in memory, and no Python object per row. Blank lines are skipped; a line
    that is not a JSON object is an error naming the file and line."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._data = data = self.path.read_bytes()
        newlines = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == ord("\n"))
        starts = np.concatenate(([0], newlines + 1))
        ends = np.concatenate((newlines, [len(data)]))
        keep = ends - starts > 2  # longer lines hold something; the short ones are checked one by one
        for i in np.flatnonzero(~keep):
            keep[i] = bool(data[starts[i] : ends[i]].strip())
        self._starts, self._ends = starts[keep], ends[keep]
        self._linenos = np.flatnonzero(keep) + 1

    def __len__(self) -> int:
        return len(self._starts)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        line = self._data[self._starts[index] : self._ends[index]]
        return json_object(line, self.path, int(self._linenos[index]))


class JsonArrayRows(Sequence[dict[str, Any]]):
    """A JSON file holding one array of objects (Spider's ``train_spider.json``, BIRD's ``train.json``),
    parsed whole: such files are the datasets' own small exports; write large ones as JSON lines."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            rows = json.loads(self.path.read_bytes())
        except json.JSONDecodeError as exc:
            raise ValueError(f"{self.path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(rows, list):
            raise ValueError(f"{self.path}: expected a JSON array of objects, got {type(rows).__name__}")
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        row = self._rows[index]
        if not isinstance(row, dict):
            raise ValueError(f"{self.path}: item {index} is {type(row).__name__}, not a JSON object")
        return row


def task_rows(path: str | Path) -> Sequence[dict[str, Any]]:
    """A task file's rows, kept compact: Parquet as its Arrow table, JSON lines as one buffer, a JSON array
    (a ``.json`` file starting with ``[``) parsed whole."""
    path = Path(path)
    if path.suffix == ".parquet":
        return ArrowRows(path)
    if path.suffix == ".json" and _starts_with_bracket(path):
        return JsonArrayRows(path)
    return JsonlRows(path)


def _starts_with_bracket(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip()
    return head.startswith(b"[")


class ArrowRows(Sequence[dict[str, Any]]):
    """A Parquet file as its Arrow table (columnar, compact); a row becomes a dict when asked for."""

    def __init__(self, path: str | Path):
        import pyarrow.parquet as pq

        self.table = pq.read_table(path)

    def __len__(self) -> int:
        return self.table.num_rows

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(index)
        return self.table.slice(index % n, 1).to_pylist()[0]


# ------------------------------------------------------------------------------------ one copy per process

_SHARED: dict[tuple, FiniteSource] = {}
_SHARED_LOCKS: dict[tuple, threading.Lock] = {}
_SHARED_GUARD = threading.Lock()
#: (path as spelled, device, inode, size, mtime, layout, shape) -> the shared source: the fast path
_SEEN: dict[tuple, FiniteSource] = {}


def shared_file_source(
    path: str | Path, layout: str, build: Callable[[Path], FiniteSource], **shape: Any
) -> FiniteSource:
    """The process's one source for this file: ``build(path)`` runs once per (path, size, modification time,
    ``layout``, ``shape``), under a lock, however many envs and threads ask; a changed file is read again
    (and the old copy dropped). ``shape`` are the options that change the tasks built from the rows.

    A path seen before (the same spelling, file and version) is found without resolving it again: a trainer
    makes an env per concurrent episode, and resolving symlinks was a third of what making one cost."""
    spelled = os.path.abspath(path)
    stat = os.stat(spelled)
    shape_key = json.dumps(shape, sort_keys=True, default=repr)
    seen = (spelled, stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, layout, shape_key)
    found = _SEEN.get(seen)
    if found is not None:
        return found
    resolved = Path(path).resolve()
    stat = resolved.stat()
    key = (str(resolved), stat.st_size, stat.st_mtime_ns, layout, shape_key)
    found = _shared(key, resolved, build)
    with _SHARED_GUARD:
        if _SHARED.get(key) is found:  # (not dropped meanwhile by a newer version of the file)
            _SEEN[seen] = found
    return found


def _shared(key: tuple, resolved: Path, build: Callable[[Path], FiniteSource]) -> FiniteSource:
    with _SHARED_GUARD:
        found = _SHARED.get(key)
        if found is not None:
            return found
        lock = _SHARED_LOCKS.setdefault(key, threading.Lock())
    with lock:
        with _SHARED_GUARD:
            found = _SHARED.get(key)
        if found is None:
            found = build(resolved)
            with _SHARED_GUARD:
                stale = [k for k in _SHARED if k[0] == key[0] and k[3:] == key[3:] and k != key]
                for old in stale:  # the file changed: its old copy goes
                    dropped = _SHARED.pop(old)
                    _SHARED_LOCKS.pop(old, None)
                    for spelling in [k for k, v in _SEEN.items() if v is dropped]:
                        del _SEEN[spelling]
                _SHARED[key] = found
    return found


def clear_shared_file_sources() -> None:
    """Forget every shared task file (the next use reads it again)."""
    with _SHARED_GUARD:
        _SHARED.clear()
        _SHARED_LOCKS.clear()
        _SEEN.clear()


class LazyFileSource(FiniteSource):
    """A task file's tasks, read when first drawn, through ``shared_file_source``: what an env holds for
    ``tasks=PATH``. Making the env opens nothing, and neither does an episode that pins its task. ``missing``
    is the error a draw raises if the file does not exist (and was never read; by default
    ``missing_task_file``'s); if it disappears after it was read, the copy already in memory keeps
    serving."""

    def __init__(
        self,
        path: str | Path,
        layout: str,
        build: Callable[[Path], FiniteSource],
        *,
        missing: str | None = None,
        **shape: Any,
    ):
        self.path = Path(path)
        self.name = self.path.stem
        self.layout, self._build, self.shape = layout, build, shape
        self.missing = missing if missing is not None else missing_task_file(self.path)
        self._last: FiniteSource | None = None
        self._seen: tuple[int, int, int] | None = None

    def loaded(self) -> FiniteSource:
        """The shared source of the file as it is now (read now if it is not in memory yet)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            if self._last is not None:
                return self._last
            raise FileNotFoundError(self.missing) from None
        seen = (stat.st_size, stat.st_mtime_ns, stat.st_ino)
        if self._last is not None and seen == self._seen:
            return self._last  # unchanged since this env last looked: no lookup (a draw per reset)
        source = shared_file_source(self.path, self.layout, self._build, **self.shape)
        self._last, self._seen = source, seen
        self.name = source.name
        return source

    def sample(self, rng: np.random.Generator) -> Task:
        return self.loaded().sample(rng)

    def task_at(self, index: int) -> Task:
        return self.loaded().task_at(index)

    def __len__(self) -> int:
        return len(self.loaded())

    def get(self, task_id: str) -> Task:
        return self.loaded().get(task_id)

    def eval_tasks(self, n: int | None = None) -> list[Task]:
        return self.loaded().eval_tasks(n)

    def describe(self) -> str:
        return self.loaded().describe()


class FieldMap(BaseModel):
    """Which column of a row becomes which Task field. ``data`` columns are copied into ``Task.data``;
    ``None`` there means "every column not used elsewhere". ``id`` missing → the row index."""

    model_config = ConfigDict(frozen=True)

    prompt: str = "prompt"
    answer: str | None = "answer"
    id: str | None = "id"
    data: Sequence[str] | None = None

    def to_task(self, row: Mapping[str, Any], index: int, source: str) -> Task:
        if self.prompt not in row:
            raise UnknownNameError(
                f"row {index} of {source!r} has no {self.prompt!r} column (columns: {sorted(row)}); "
                "pass fields=FieldMap(prompt=...) to choose one"
            )
        used = {self.prompt, self.answer, self.id}
        data_cols = [c for c in row if c not in used] if self.data is None else list(self.data)
        task_id = row.get(self.id) if self.id else None
        return Task(
            id=str(task_id) if task_id is not None else f"{source}/{index}",
            prompt=str(row[self.prompt]),
            answer=row.get(self.answer) if self.answer else None,
            data={c: _plain(row[c]) for c in data_cols if c in row},
            source=source,
        )


def _plain(value: Any) -> Any:
    """Arrow/numpy scalars and arrays → plain Python, so tasks stay JSON-serialisable."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _rows_to_source(rows: Sequence[Mapping[str, Any]], fields: FieldMap | None, name: str) -> RowSource:
    fields = fields or FieldMap()
    return RowSource(rows, lambda row, i: fields.to_task(row, i, name), name=name)


def jsonl_source(path: str | Path, fields: FieldMap | None = None, name: str | None = None) -> RowSource:
    """Tasks from a JSON-lines file, one object per line (blank lines ignored), or a ``.json`` file holding
    one array of objects, built when drawn."""
    path = Path(path)
    return _rows_to_source(task_rows(path), fields, name or path.stem)


def parquet_source(path: str | Path, fields: FieldMap | None = None, name: str | None = None) -> RowSource:
    """Tasks from a Parquet file (its Arrow table, read with pyarrow), built when drawn."""
    path = Path(path)
    return _rows_to_source(ArrowRows(path), fields, name or path.stem)


def hf_source(
    dataset: Any, fields: FieldMap | None = None, split: str = "train", name: str | None = None
) -> RowSource:
    """Tasks from a Hugging Face ``datasets`` object, a ``DatasetDict`` (``split`` picks one), or a local
    path saved with ``save_to_disk`` or loadable by ``datasets.load_dataset`` (a data directory or script).

    Only local data is read: nothing is downloaded.
    """
    if isinstance(dataset, str | Path):
        import datasets

        path = Path(dataset)
        if not path.exists():
            raise FileNotFoundError(f"no dataset at {path} (toolgym reads local datasets only)")
        try:
            dataset = datasets.load_from_disk(str(path))
        except FileNotFoundError:
            dataset = datasets.load_dataset(str(path))
        name = name or path.name
    if hasattr(dataset, "keys") and not hasattr(dataset, "column_names"):
        raise TypeError("expected a Dataset or DatasetDict")
    if isinstance(getattr(dataset, "column_names", None), dict):  # DatasetDict
        if split not in dataset:
            raise UnknownNameError(f"split {split!r} not in dataset (splits: {sorted(dataset)}); pass split=")
        dataset = dataset[split]
    return _rows_to_source(dataset, fields, name or "dataset")


def read_task_file(spec: str | Path, fields: FieldMap | None = None) -> RowSource:
    """Read tasks from a path now, by its suffix: ``.jsonl``/``.json`` lines, ``.parquet``, or a dataset
    directory (``load_tasks`` is the shared, lazy front of this)."""
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(missing_task_file(path))
    if path.is_dir():
        return hf_source(path, fields)
    if path.suffix in (".jsonl", ".json"):
        return jsonl_source(path, fields)
    return parquet_source(path, fields)


# ------------------------------------------------------------------------------------------ verl rows


def file_columns(path: str | Path) -> list[str]:
    """A task file's column names (Parquet's schema, or the first JSON object's keys)."""
    path = Path(path)
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    if path.suffix == ".json" and _starts_with_bracket(path):
        rows = JsonArrayRows(path)
        return list(rows[0]) if len(rows) else []
    first = next(read_jsonl(path), None)
    return list(first) if first else []


def is_verl_layout(columns: Sequence[str]) -> bool:
    """Whether a file's columns are verl's (DAPO-Math-17k, Search-R1, DeepCoder, SkyRL-SQL ship this way):
    ``prompt`` and ``reward_model`` (SkyRL-gym's own rows say ``reward_spec``)."""
    return "prompt" in columns and ("reward_model" in columns or "reward_spec" in columns)


def verl_row_task(row: Mapping[str, Any], index: int, source: str) -> Task:
    """One verl-format row as a Task: the question is the last user message of ``prompt``; ``answer`` is
    ``reward_model.ground_truth`` (Search-R1's ``{"target": [...]}`` becomes the list); ``data`` holds
    ``extra_info``, ``data_source`` and the raw ``ground_truth``. A row written by ``toolgym export verl``
    carries its Task in ``extra_info.task`` and reads back as exactly that Task."""
    extra = _plain(row.get("extra_info")) or {}
    if not isinstance(extra, Mapping):
        extra = {}
    pinned = extra.get("task")
    if pinned is not None:
        return (
            Task.model_validate_json(pinned)
            if isinstance(pinned, str | bytes)
            else Task.model_validate(pinned)
        )
    messages = _plain(row.get("prompt"))
    if isinstance(messages, str):
        question = messages
    else:
        users = [m for m in messages or () if isinstance(m, Mapping) and m.get("role") == "user"]
        if not users:
            raise ValueError(f"row {index} of {source!r}: 'prompt' has no user message: {messages!r:.200}")
        question = str(users[-1].get("content") or "")
    reward = _plain(row.get("reward_model") or row.get("reward_spec")) or {}  # reward_spec: SkyRL-gym's name
    gold = reward.get("ground_truth") if isinstance(reward, Mapping) else None
    gold = _plain(gold)
    if isinstance(gold, Mapping) and "target" in gold:
        gold = [str(t) for t in _plain(gold["target"])]
    if gold is None:
        raise ValueError(f"row {index} of {source!r} has no reward_model.ground_truth")
    task_id = extra.get("id", extra.get("index"))
    data = {k: _plain(v) for k, v in extra.items()}
    data.update(data_source=_plain(row.get("data_source")), ground_truth=gold)
    return Task(
        id=str(task_id) if task_id is not None else f"{source}/{index}",
        prompt=question,
        answer=gold,
        data=data,
        source=str(row.get("data_source") or source),
    )


def verl_file_source(path: str | Path, name: str | None = None) -> RowSource:
    """Tasks from a verl-format ``.parquet``/``.jsonl`` file (``verl_row_task`` per row, built when drawn):
    the one reader every env's file loader uses for such rows, before shaping them its own way."""
    path = Path(path)
    rows = task_rows(path)
    label = name or path.stem
    return RowSource(rows, lambda row, i: verl_row_task(row, i, label), name=label)


def missing_task_file(path: Path) -> str:
    return (
        f"no task file or dataset at {path}: pass a .jsonl, .json or .parquet file, or a saved dataset "
        "directory"
    )


def load_tasks(spec: str | Path, fields: FieldMap | None = None) -> FiniteSource:
    """Tasks from a path, by its suffix: ``.jsonl``/``.json`` lines, ``.parquet``, or a dataset directory.

    Shared and lazy (see the module docstring): the file is read on the first draw, once per process.
    """
    path = Path(spec)
    if path.suffix not in (".jsonl", ".json", ".parquet") and not path.is_dir():
        if not path.exists():
            raise FileNotFoundError(missing_task_file(path))
        raise ValueError(
            f"don't know how to read tasks from {path.name!r}: use .jsonl, .parquet or a dataset dir"
        )
    shape = (fields or FieldMap()).model_dump()
    return LazyFileSource(path, "tasks", lambda p: read_task_file(p, fields), fields=shape)
