"""Prompt data for OpenRLHF: one JSON line per episode to play.

``prompt`` is the env's real first prompt (system and user messages), which OpenRLHF renders with the
model's chat template (``--data.apply_chat_template``); ``label`` is the episode key as JSON (env id and
kwargs, the task, the reset seed), which OpenRLHF hands to the agent executor with every sample of the
prompt. Which tasks: ``toolgym.rollout.keys.episode_rows``, as for every adapter.
"""

from __future__ import annotations

import json
from pathlib import Path

from toolgym.rollout.keys import EnvSource, Split, episode_rows


def export_openrlhf(
    env: EnvSource, *, n: int, out: str | Path, split: Split = "train", seed: int = 0
) -> Path:
    """Write ``n`` rows to ``<out>/<split>.jsonl`` (``--data.prompt_dataset``) and return its path."""
    path = Path(out) / f"{split}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in episode_rows(env, n, split=split, seed=seed):
            record = {
                "prompt": row.prompt,
                "label": row.key.to_json(),
                "env_id": row.key.env_id,
                "task_id": row.key.task.id,
            }
            fh.write(json.dumps(record) + "\n")
    return path


__all__ = ["export_openrlhf"]
