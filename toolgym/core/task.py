"""Tasks and the sources they come from: the contract env code types against.

A ``Task`` is what one episode is about: the prompt the model sees, the gold answer and whatever the verifier
needs (tests, tolerance, ...). A ``TaskSource`` hands tasks to an env: by id (so a GRPO group can pin one
task) and by sampling with the env's own RNG (so seeding an env reproduces its tasks without touching global
RNGs).

Sources: ``ProceduralSource`` (tasks generated from an integer seed, unlimited), ``FiniteSource`` (a fixed
number of tasks, addressable by position), ``ListSource`` (in memory) and ``RowSource`` (a task built from
its row when drawn, over any sequence of rows). Reading task files (JSONL, JSON arrays, Parquet, Hugging Face
datasets, verl-format rows) and sharing them per process is ``toolgym.envs.task_files``.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

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


class FiniteSource(TaskSource):
    """A fixed number of tasks, each addressable by its position (``task_at``): sampled uniformly with the
    caller's RNG, the first ``n`` as the evaluation split."""

    @abstractmethod
    def __len__(self) -> int: ...

    @abstractmethod
    def task_at(self, index: int) -> Task:
        """The task at ``index`` (0 <= index < len)."""

    def sample(self, rng: np.random.Generator) -> Task:
        return self.task_at(int(rng.integers(0, len(self))))

    def eval_tasks(self, n: int | None = None) -> list[Task]:
        count = len(self) if n is None else min(n, len(self))
        return [self.task_at(i) for i in range(count)]

    def __iter__(self) -> Iterator[Task]:
        return (self.task_at(i) for i in range(len(self)))


class ListSource(FiniteSource):
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

    def task_at(self, index: int) -> Task:
        return self.tasks[index]

    def __len__(self) -> int:
        return len(self.tasks)

    def eval_tasks(self, n: int | None = None) -> list[Task]:
        return self.tasks[:n]

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)


class RowSource(FiniteSource):
    """Tasks built from rows when they are drawn: ``to_task(row, index)`` on ``rows[index]``.

    ``rows`` is any sequence of mappings (``JsonlRows``, ``ArrowRows``, a ``datasets.Dataset``): the source
    keeps them as they are and holds no ``Task`` objects, so a 200k-row file costs its rows and nothing per
    task. The first row is built at once, so a file in the wrong shape fails when it is loaded; any other
    row's problem is raised, naming it, when that row is drawn. ``map`` adds a per-task step (normalising
    tests, extracting a gold answer) on the same rows, without copying them.
    """

    def __init__(
        self, rows: Sequence[Mapping[str, Any]], to_task: Callable[[Mapping[str, Any], int], Task], name: str
    ):
        self.name = name
        self.rows = rows
        self._to_task = to_task
        self._ids: dict[str, int] | None = None
        self._ids_lock = threading.Lock()
        if len(rows) == 0:
            raise ValueError(f"task source {name!r} is empty")
        self.task_at(0)

    def task_at(self, index: int) -> Task:
        return self._to_task(self.rows[index], index)

    def __len__(self) -> int:
        return len(self.rows)

    def map(self, step: Callable[[Task], Task], name: str | None = None) -> RowSource:
        """A source whose task ``i`` is ``step(this source's task i)``, over the same rows."""
        inner = self._to_task
        return RowSource(self.rows, lambda row, i: step(inner(row, i)), name or self.name)

    def get(self, task_id: str) -> Task:
        """By id: the first lookup builds an id -> row index (one pass over the rows, once per source)."""
        with self._ids_lock:
            if self._ids is None:
                ids: dict[str, int] = {}
                for i in range(len(self)):
                    task_id_i = self.task_at(i).id
                    if task_id_i in ids:
                        raise ValueError(f"task source {self.name!r} has two tasks with id {task_id_i!r}")
                    ids[task_id_i] = i
                self._ids = ids
        index = self._ids.get(str(task_id))
        if index is None:
            raise KeyError(f"no task with id {task_id!r} in {self.name!r} ({len(self):,} tasks)")
        return self.task_at(index)
