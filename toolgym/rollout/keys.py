"""Episode keys: what a trainer's data row pins, and which tasks a split of rows holds.

Every trainer hands its rollout code a row and nothing else (verl a Parquet row, TRL a prompt, OpenRLHF a
label, SkyRL a row's extra columns, verifiers a task's data). So the row must name its whole episode: an
:class:`EpisodeKey` (env id, ``gym.make`` kwargs, the pinned task, the seed ``env.reset`` gets), from which
any worker on any node replays it, and every sample of a GRPO group plays the same task. The trainer
adapters only *format* keys into their row shapes; choosing the rows and reading the keys back is here,
once:

- :func:`episode_rows` chooses ``n`` episodes of a split. ``split="val"`` takes each env's fixed evaluation
  split (``TaskSource.eval_tasks``, the tasks ``toolgym eval`` scores); ``split="train"`` takes a fixed
  list's tasks once each in a seeded order (again when more rows are asked for than it has), and for a
  procedural source the tasks ``env.reset(seed=seed + i)`` draws, which never overlap the evaluation split.
  A mix of envs is shared by weight (at least one row each) and shuffled with ``seed``.
- :meth:`EpisodeKey.parse` and :meth:`EpisodeKey.from_fields` read a key back from what a row carries (JSON,
  a mapping, or verl's flat ``extra_info`` fields), with an error that says how to write such rows.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

import gymnasium as gym
import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolgym.core.task import FiniteSource, Task
from toolgym.envs.base import ToolEnv

Split = Literal["train", "val"]
EnvFactory = Callable[[], gym.Env]


class EnvRequest(BaseModel):
    """An env to roll out: its id, its ``gym.make`` kwargs and, in a mix of envs, its share (``weight``)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    weight: float = Field(1.0, gt=0.0)


#: what names the envs to train on: an id, an ``EnvRequest`` (id, kwargs, weight), a list of those, or a
#: factory returning a toolgym env (for envs built with ``toolgym.make_env`` and never registered)
EnvSource = str | EnvRequest | Sequence[str | EnvRequest] | EnvFactory


class EpisodeKey(BaseModel):
    """What one training row pins: the env (id and ``gym.make`` kwargs), the task and the seed ``env.reset``
    gets. Every sample of a GRPO group shares its row's key, so they all play the same task."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env_id: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    task: Task
    seed: int | None = None

    def to_json(self) -> str:
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> EpisodeKey:
        return cls.model_validate_json(text)

    @classmethod
    def parse(cls, value: Any, *, how: str) -> EpisodeKey:
        """The key in ``value`` (its JSON, or a mapping); ``how`` says how to write rows that carry one, for
        the error a row without a key gets."""
        try:
            if isinstance(value, str | bytes):
                return cls.model_validate_json(value)
            if isinstance(value, Mapping):
                return cls.model_validate(dict(value))
        except (ValidationError, ValueError):
            pass
        raise ValueError(f"not a toolgym episode key ({str(value)[:80]!r}): {how}")

    def fields(self) -> dict[str, Any]:
        """The key as flat fields whose values are strings or numbers (rows of different envs then share one
        Parquet schema): ``env_id``, ``env_kwargs`` and ``task`` (JSON), ``task_id``, ``seed``."""
        return {
            "env_id": self.env_id,
            "env_kwargs": json.dumps(self.env_kwargs, sort_keys=True),
            "task": self.task.model_dump_json(),
            "task_id": self.task.id,
            "seed": self.seed,
        }

    @classmethod
    def from_fields(cls, fields: Any, *, how: str) -> EpisodeKey:
        """The key :meth:`fields` wrote; ``how`` as in :meth:`parse`."""
        if not isinstance(fields, Mapping) or not fields.get("env_id") or not fields.get("task"):
            raise ValueError(f"the row has no env_id/task fields: {how}")
        kwargs = fields.get("env_kwargs") or "{}"
        seed = fields.get("seed")
        return cls(
            env_id=str(fields["env_id"]),
            env_kwargs=json.loads(kwargs) if isinstance(kwargs, str) else dict(kwargs),
            task=Task.model_validate_json(fields["task"]),
            seed=None if seed is None else int(seed),
        )


@dataclass(frozen=True)
class EpisodeRow:
    """One episode of a split: the env's real first prompt (its system and user messages, so a trainer's
    prompt-length filter measures what the model sees) and the key that replays it."""

    prompt: list[dict[str, Any]]
    key: EpisodeKey
    #: which entry of the mix the row came from (two entries of one env give equal rows: only this tells
    #: them apart, e.g. the one a trainer plays with an agent program)
    entry: int = 0

    @property
    def answer_text(self) -> str:
        """The task's reference answer as text (for trainers' own ``ground_truth`` columns)."""
        answer = self.key.task.answer
        if answer is None:
            return ""
        if isinstance(answer, str):
            return answer
        if isinstance(answer, bool | int | float):
            return str(answer)
        return json.dumps(answer, default=str)


def env_requests(env: EnvSource) -> list[EnvRequest] | None:
    """The env ids (with kwargs and weights) ``env`` names; ``None`` for a factory."""
    if callable(env) and not isinstance(env, str | EnvRequest):
        return None
    items = [env] if isinstance(env, str | EnvRequest) else list(env)
    if not items:
        raise ValueError("no envs given: name at least one env id")
    return [EnvRequest(id=e) if isinstance(e, str) else EnvRequest.model_validate(e) for e in items]


def check_env_ids(env_ids: Sequence[str], where: str = "envs") -> None:
    """Fail now, naming the entry (``<where>.<i>.id``) and the closest registered id, on an id ``gym.make``
    cannot make: not registered, or a ``module:Env-v0`` id (Gymnasium's syntax for envs registered on import
    of a module) whose module does not import. A misspelt id otherwise fails in a worker, minutes into a
    run."""
    import difflib

    import toolgym

    for i, env_id in enumerate(env_ids):
        module, _, name = env_id.rpartition(":")
        if module:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise ValueError(f"{where}.{i}.id: cannot import {module!r} for {env_id!r}: {exc}") from exc
        if name not in toolgym.ENVS and name not in gym.registry:
            close = difflib.get_close_matches(env_id, list(toolgym.ENVS), n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ValueError(
                f"{where}.{i}.id: unknown env {env_id!r}; {hint}`toolgym list` shows the registered envs"
            )


def episode_rows(env: EnvSource, n: int, *, split: Split = "train", seed: int = 0) -> list[EpisodeRow]:
    """``n`` episodes of ``split`` for ``env`` (an id, ``EnvRequest``s, a mix, or a factory), chosen as the
    module docstring says."""
    import toolgym  # noqa: F401 - registers the envs

    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    requests = env_requests(env)
    if requests is None:  # a factory: every row is an episode of the env it makes
        made = cast(EnvFactory, env)()
        try:
            env_id = made.spec.id if made.spec is not None else type(made.unwrapped).__name__
            return _env_rows(made, EnvRequest(id=env_id), n, split, seed)
        finally:
            made.close()
    if n < len(requests):
        raise ValueError(f"n={n} rows cannot cover {len(requests)} envs: ask for at least one row per env")
    rows: list[EpisodeRow] = []
    shares = _shares(n, [r.weight for r in requests])
    for entry, (request, count) in enumerate(zip(requests, shares, strict=True)):
        made = gym.make(request.id, **request.kwargs)
        try:
            rows += [replace(row, entry=entry) for row in _env_rows(made, request, count, split, seed)]
        finally:
            made.close()
    if len(requests) > 1:
        rows = [rows[i] for i in np.random.default_rng(seed).permutation(len(rows))]
    return rows


def draw_task(env: gym.Env, seed: int) -> Task:
    """The task ``env.reset(seed=seed)`` draws: run once per GRPO group, then pin it for every sample."""
    env.reset(seed=seed)
    task = getattr(env.unwrapped, "task", None)
    if not isinstance(task, Task):
        raise TypeError(f"{type(env.unwrapped).__name__} has no task after reset: not a toolgym env")
    return task


def _env_rows(env: gym.Env, request: EnvRequest, count: int, split: Split, seed: int) -> list[EpisodeRow]:
    inner = env.unwrapped
    if not isinstance(inner, ToolEnv):
        raise TypeError(f"{request.id} is not a toolgym env ({type(inner).__name__}); training rows need one")
    rows = []
    for i, task in enumerate(_tasks(env, inner, request.id, count, split, seed)):
        _, info = env.reset(seed=seed + i, options={"task": task})
        key = EpisodeKey(env_id=request.id, env_kwargs=request.kwargs, task=task, seed=seed + i)
        rows.append(EpisodeRow([{"role": m["role"], "content": m["content"]} for m in info["messages"]], key))
    return rows


def _tasks(env: gym.Env, inner: ToolEnv, env_id: str, count: int, split: Split, seed: int) -> list[Task]:
    source = inner.tasks
    if split == "val":
        try:
            tasks = source.eval_tasks(count)
        except TypeError as exc:
            raise ValueError(f"{env_id} has no evaluation split to export as 'val': {exc}") from None
        if len(tasks) < count:
            raise ValueError(
                f"{env_id}'s evaluation split has {len(tasks)} tasks, fewer than the {count} rows asked for: "
                f"ask for fewer rows (n) or give it more tasks"
            )
        return tasks
    if isinstance(source, FiniteSource):
        rng = np.random.default_rng(seed)
        chosen: list[Task] = []
        while len(chosen) < count:
            chosen += [source.task_at(int(i)) for i in rng.permutation(len(source))[: count - len(chosen)]]
        return chosen
    return [draw_task(env, seed + i) for i in range(count)]


def _shares(n: int, weights: Sequence[float]) -> list[int]:
    """``n`` split in proportion to ``weights`` (largest remainders), at least one each."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [max(1, int(x)) for x in exact]
    by_remainder = sorted(range(len(weights)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    for i in by_remainder[: max(0, n - sum(counts))]:
        counts[i] += 1
    while sum(counts) > n:  # the minimum of one per env overshot: take back from the largest
        counts[counts.index(max(counts))] -= 1
    return counts


__all__ = [
    "EnvFactory",
    "EnvRequest",
    "EnvSource",
    "EpisodeKey",
    "EpisodeRow",
    "Split",
    "check_env_ids",
    "draw_task",
    "env_requests",
    "episode_rows",
]
