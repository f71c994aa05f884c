"""Prompt rows for trainers that hand a rollout function only the prompt (TRL) or a prompt and a label
(OpenRLHF): each row carries an :class:`EpisodeKey` — the env, its kwargs, the pinned task and the env seed —
so every sample of a GRPO group plays the same task, on any rank, from data alone.

Which tasks a split holds is decided by the verl exporter's rules (``build_rows``: the eval split of each
env, a seeded order of a fixed list, the procedural draws ``env.reset(seed=seed + i)``, a mix shared by
weight); the rows here are the same episodes in the shapes TRL and OpenRLHF read.

TRL passes a rollout function the ``prompt`` column only, so the key travels inside the prompt: the last
message of the env's real first prompt gets a ``toolgym`` field holding the key as JSON (the other messages
have ``toolgym: None``, so every row has one schema). Chat templates ignore the field; the rollout function
renders the env's own messages anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import gymnasium as gym

from toolgym.rollout.pool import EnvRequest, EpisodeKey

#: the message field that carries a row's episode key in TRL prompts
KEY_FIELD = "toolgym"

Split = Literal["train", "val"]
EnvFactory = Callable[[], gym.Env]
#: what names the envs to train on: an id, an ``EnvRequest`` (id, kwargs, weight), a list of those, or a
#: factory returning a toolgym env (for envs built with ``toolgym.make_env`` and never registered)
EnvSource = str | EnvRequest | Sequence[str | EnvRequest] | EnvFactory


def env_requests(env: EnvSource) -> list[EnvRequest] | None:
    """The env ids (with kwargs and weights) ``env`` names; ``None`` for a factory."""
    if callable(env) and not isinstance(env, str | EnvRequest):
        return None
    items = [env] if isinstance(env, str | EnvRequest) else list(env)
    if not items:
        raise ValueError("no envs given: name at least one env id")
    return [EnvRequest(id=e) if isinstance(e, str) else EnvRequest.model_validate(e) for e in items]


def unknown_env_ids(env_ids: Sequence[str]) -> list[str]:
    """The ids ``gym.make`` cannot make: not registered, after importing the module of a ``module:Env-v0``
    id (Gymnasium's own syntax for envs registered on import of a module)."""
    import importlib

    import toolgym  # noqa: F401 - registers the built-in envs

    unknown = []
    for env_id in env_ids:
        module, _, name = env_id.rpartition(":")
        try:
            if module:
                importlib.import_module(module)
        except ImportError:
            unknown.append(env_id)
            continue
        if name not in gym.registry:
            unknown.append(env_id)
    return unknown


def episode_rows(env: EnvSource, n: int, *, split: Split = "train", seed: int = 0) -> list[dict[str, Any]]:
    """``n`` rows, each ``{"prompt": messages, "key": EpisodeKey, "env_id", "task_id"}``: the env's real first
    prompt (system and user messages) and the key that replays it. A mix is shared by weight and shuffled."""
    requests = env_requests(env)
    if requests is None:
        return _factory_rows(env, n, split, seed)  # type: ignore[arg-type]
    from toolgym.trainers.verl_adapter.export import build_rows

    return [_row(verl_row) for verl_row in build_rows(requests, n=n, split=split, seed=seed)]


def _factory_rows(factory: EnvFactory, n: int, split: Split, seed: int) -> list[dict[str, Any]]:
    from toolgym.trainers.verl_adapter.export import env_rows

    made = factory()
    try:
        env_id = made.spec.id if made.spec is not None else type(made.unwrapped).__name__
        return [_row(r) for r in env_rows(made, EnvRequest(id=env_id), n, split, seed)]
    finally:
        made.close()


def _row(verl_row: dict[str, Any]) -> dict[str, Any]:
    from toolgym.trainers.verl_adapter.export import episode_key

    key = episode_key(verl_row["extra_info"])
    return {"prompt": verl_row["prompt"], "key": key, "env_id": key.env_id, "task_id": key.task.id}


def trl_prompt(messages: Sequence[dict[str, Any]], key: EpisodeKey) -> list[dict[str, Any]]:
    """The env's messages with the key in the last one's ``toolgym`` field (``None`` in the others)."""
    last = len(messages) - 1
    return [
        {"role": m["role"], "content": m["content"], KEY_FIELD: key.to_json() if i == last else None}
        for i, m in enumerate(messages)
    ]


def prompt_dataset(env: EnvSource, n: int, *, split: Split = "train", seed: int = 0) -> Any:
    """A ``datasets.Dataset`` for ``GRPOTrainer(train_dataset=...)``: ``n`` rows of the env's task source
    (see :func:`episode_rows`), columns ``prompt`` (conversational, carrying the episode key), ``env_id`` and
    ``task_id`` (extra columns reach reward functions as keyword arguments)."""
    from datasets import Dataset

    rows = episode_rows(env, n, split=split, seed=seed)
    return Dataset.from_list(
        [
            {"prompt": trl_prompt(r["prompt"], r["key"]), "env_id": r["env_id"], "task_id": r["task_id"]}
            for r in rows
        ]
    )


def key_of_prompt(prompt: Any) -> EpisodeKey:
    """The episode key a TRL prompt carries (see the module docstring); a clear error for other prompts."""
    if isinstance(prompt, list):
        for message in reversed(prompt):
            value = message.get(KEY_FIELD) if isinstance(message, dict) else None
            if value:
                return EpisodeKey.from_json(value)
    raise ValueError(
        "this prompt carries no toolgym episode key: build the train dataset with "
        "toolgym.trainers.trl_adapter.prompt_dataset(env, n) (each row pins its env, task and seed)"
    )


__all__ = [
    "KEY_FIELD",
    "EnvSource",
    "EpisodeKey",
    "env_requests",
    "episode_rows",
    "key_of_prompt",
    "prompt_dataset",
    "trl_prompt",
    "unknown_env_ids",
]
