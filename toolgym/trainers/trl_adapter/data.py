"""TRL prompt rows: each row carries an :class:`~toolgym.rollout.keys.EpisodeKey` (the env, its kwargs, the
pinned task and the env seed), so every sample of a GRPO group plays the same task, on any rank, from data
alone. Which tasks a split holds: ``toolgym.rollout.keys.episode_rows``, as for every adapter.

TRL passes a rollout function the ``prompt`` column only, so the key travels inside the prompt: the last
message of the env's real first prompt gets a ``toolgym`` field holding the key as JSON (the other messages
have ``toolgym: None``, so every row has one schema). Chat templates ignore the field; the rollout function
renders the env's own messages anyway.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from toolgym.rollout.keys import EnvSource, EpisodeKey, Split, episode_rows

#: the message field that carries a row's episode key in TRL prompts
KEY_FIELD = "toolgym"


def trl_prompt(messages: Sequence[dict[str, Any]], key: EpisodeKey) -> list[dict[str, Any]]:
    """The env's messages with the key in the last one's ``toolgym`` field (``None`` in the others)."""
    last = len(messages) - 1
    return [
        {"role": m["role"], "content": m["content"], KEY_FIELD: key.to_json() if i == last else None}
        for i, m in enumerate(messages)
    ]


def prompt_dataset(env: EnvSource, n: int, *, split: Split = "train", seed: int = 0) -> Any:
    """A ``datasets.Dataset`` for ``GRPOTrainer(train_dataset=...)``: ``n`` episodes of the env's task source
    (``episode_rows``: an id, ``EnvRequest``s, a mix shared by weight, or a factory), columns ``prompt``
    (conversational, carrying the episode key), ``env_id`` and ``task_id`` (extra columns reach reward
    functions as keyword arguments)."""
    from datasets import Dataset

    return Dataset.from_list(
        [
            {"prompt": trl_prompt(row.prompt, row.key), "env_id": row.key.env_id, "task_id": row.key.task.id}
            for row in episode_rows(env, n, split=split, seed=seed)
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


__all__ = ["KEY_FIELD", "key_of_prompt", "prompt_dataset", "trl_prompt"]
