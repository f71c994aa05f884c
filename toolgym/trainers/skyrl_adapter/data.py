"""SkyRL prompt data: one row per episode, in the shape SkyRL's ``PromptDataset`` reads.

SkyRL hands an env every column of its row except ``prompt`` and ``env_class`` as ``extras``; the
``toolgym`` column carries the episode key (env id and kwargs, the pinned task, the reset seed) as JSON, so
every sample of a prompt plays the same task on any worker. Which tasks:
``toolgym.rollout.keys.episode_rows``, as for every adapter.

=================  ==========================================================================================
``prompt``         the env's first messages (system and user), which SkyRL renders with the chat template
``env_class``      the env id: the SkyRL-Gym id ``register_all`` registered it under
``data_source``    the env id (SkyRL groups evaluation metrics by it)
``toolgym``        the episode key as JSON
=================  ==========================================================================================
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from toolgym.rollout.keys import EnvSource, Split, episode_rows

#: the row column (an ``extras`` key in the env) that carries the episode key
KEY_COLUMN = "toolgym"


def skyrl_rows(env: EnvSource, n: int, *, split: Split = "train", seed: int = 0) -> list[dict[str, Any]]:
    """``n`` SkyRL dataset rows for ``env`` (an id, ``EnvRequest``s, a mix or a factory; see the module
    docstring)."""
    return [
        {
            "prompt": row.prompt,
            "env_class": row.key.env_id,
            "data_source": row.key.env_id,
            KEY_COLUMN: row.key.to_json(),
        }
        for row in episode_rows(env, n, split=split, seed=seed)
    ]


def export_skyrl(env: EnvSource, *, n: int, out: str | Path, split: Split = "train", seed: int = 0) -> Path:
    """Write ``n`` rows to ``<out>/<split>.parquet`` (SkyRL's ``data.train_data``/``val_data``); return it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(out) / f"{split}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(skyrl_rows(env, n, split=split, seed=seed)), path)
    return path


__all__ = ["KEY_COLUMN", "export_skyrl", "skyrl_rows"]
