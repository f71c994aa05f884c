"""Tasks and the sources they come from.

A ``Task`` is what one episode is about: the prompt the model sees, the gold answer and whatever the verifier
needs (tests, tolerance, ...). A ``TaskSource`` hands tasks to an env: by id (so a GRPO group can pin one
task) and by sampling with the env's own RNG (so seeding an env reproduces its tasks without touching global
RNGs).

Sources: ``ProceduralSource`` (tasks generated from an integer seed, unlimited), ``ListSource`` (in memory),
and loaders for JSONL, Parquet and Hugging Face ``datasets`` that map columns to fields with ``FieldMap``.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from toolgym.core.errors import UnknownNameError

#: procedural seeds at or above this are the evaluation split; training draws below it
EVAL_SEED_START = 2**31


class Task(BaseModel):
    """One problem. ``data`` holds what the verifier needs and the model never sees (tests, steps, ...)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    prompt: str
    answer: Any = None
    data: dict[str, Any] = Field(default_factory=dict)
    source: str = ""


class TaskSource(ABC):
    """Where an env's tasks come from."""

    name: str = "tasks"

    @abstractmethod
    def get(self, task_id: str) -> Task:
        """The task with this id; ``KeyError`` with a helpful message if there is none."""

    @abstractmethod
    def sample(self, rng: np.random.Generator) -> Task:
        """A task drawn with the caller's RNG (the env's ``np_random``), never a global one."""

    def __len__(self) -> int:
        raise TypeError(f"{type(self).__name__} has no fixed size")

    def eval_tasks(self, n: int | None = None) -> list[Task]:
        """A fixed evaluation split (the same tasks every time): the first ``n`` of it, or all of it."""
        raise TypeError(f"{type(self).__name__} defines no evaluation split")

    def describe(self) -> str:
        """A short description for ``toolgym list``."""
        try:
            return f"{self.name} ({len(self):,} tasks)"
        except TypeError:
            return f"{self.name} (procedural)"


class ProceduralSource(TaskSource):
    """Tasks generated from an integer seed: ``generate(seed) -> Task``. Unlimited and reproducible.

    A task's id is ``f"{name}/{seed}"``, so any generated task can be rebuilt from its id alone.
    """

    def __init__(self, name: str, generate: Callable[[int], Task]):
        self.name = name
        self._generate = generate

    def get(self, task_id: str) -> Task:
        prefix, _, seed = str(task_id).rpartition("/")
        if prefix != self.name or not seed.isdigit():
            raise KeyError(f"task id {task_id!r} is not of the form '{self.name}/<seed>'")
        return self.task_for_seed(int(seed))

    def task_for_seed(self, seed: int) -> Task:
        task = self._generate(seed)
        return task.model_copy(update={"id": f"{self.name}/{seed}", "source": task.source or self.name})

    def sample(self, rng: np.random.Generator) -> Task:
        return self.task_for_seed(int(rng.integers(0, EVAL_SEED_START)))

    def eval_tasks(self, n: int | None = None) -> list[Task]:
        """Seeds from ``EVAL_SEED_START`` on, which ``sample`` never draws: evaluation never sees a training
        task. Procedural sources are unlimited, so ``n`` defaults to 100."""
        return self.take(100 if n is None else n, start=EVAL_SEED_START)

    def take(self, n: int, start: int = 0) -> list[Task]:
        """The tasks for seeds ``start .. start+n-1`` (an evaluation split, a demo)."""
        return [self.task_for_seed(s) for s in range(start, start + n)]


class ListSource(TaskSource):
    """A fixed list of tasks, looked up by id and sampled uniformly."""

    def __init__(self, tasks: Iterable[Task], name: str = "tasks"):
        self.name = name
        self.tasks: list[Task] = list(tasks)
        if not self.tasks:
            raise ValueError(f"task source {name!r} is empty")
        self._by_id: dict[str, Task] = {}
        for task in self.tasks:
            if task.id in self._by_id:
                raise ValueError(f"task source {name!r} has two tasks with id {task.id!r}")
            self._by_id[task.id] = task

    def get(self, task_id: str) -> Task:
        try:
            return self._by_id[str(task_id)]
        except KeyError:
            raise KeyError(
                f"no task with id {task_id!r} in {self.name!r} ({len(self.tasks):,} tasks)"
            ) from None

    def sample(self, rng: np.random.Generator) -> Task:
        return self.tasks[int(rng.integers(0, len(self.tasks)))]

    def __len__(self) -> int:
        return len(self.tasks)

    def eval_tasks(self, n: int | None = None) -> list[Task]:
        return self.tasks[:n]

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)


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


def _rows_to_source(rows: Iterable[Mapping[str, Any]], fields: FieldMap | None, name: str) -> ListSource:
    fields = fields or FieldMap()
    return ListSource((fields.to_task(row, i, name) for i, row in enumerate(rows)), name=name)


def read_jsonl(path: str | Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a JSON-lines file, lazily; blank lines are skipped and a bad line's error names
    the file and line number."""
    path = Path(path)
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}")
            yield row


def jsonl_source(path: str | Path, fields: FieldMap | None = None, name: str | None = None) -> ListSource:
    """Tasks from a JSON-lines file, one object per line (blank lines ignored)."""
    path = Path(path)
    return _rows_to_source(read_jsonl(path), fields, name or path.stem)


def parquet_source(path: str | Path, fields: FieldMap | None = None, name: str | None = None) -> ListSource:
    """Tasks from a Parquet file (read with pyarrow)."""
    import pyarrow.parquet as pq

    path = Path(path)
    return _rows_to_source(pq.read_table(path).to_pylist(), fields, name or path.stem)


def hf_source(
    dataset: Any, fields: FieldMap | None = None, split: str = "train", name: str | None = None
) -> ListSource:
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
    return _rows_to_source(iter(dataset), fields, name or "dataset")


def load_tasks(spec: str | Path, fields: FieldMap | None = None) -> ListSource:
    """Tasks from a path, by its suffix: ``.jsonl``/``.json`` lines, ``.parquet``, or a dataset directory."""
    path = Path(spec)
    if not path.exists():
        raise FileNotFoundError(
            f"no task file or dataset at {path}: pass a .jsonl or .parquet file, or a saved dataset directory"
        )
    if path.is_dir():
        return hf_source(path, fields)
    if path.suffix in (".jsonl", ".json"):
        return jsonl_source(path, fields)
    if path.suffix == ".parquet":
        return parquet_source(path, fields)
    raise ValueError(
        f"don't know how to read tasks from {path.name!r}: use .jsonl, .parquet or a dataset dir"
    )
