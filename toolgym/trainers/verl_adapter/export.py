"""Training data for verl: Parquet that verl's ``RLHFDataset`` loads as is (``toolgym export verl``).

One row per episode to play. The row pins everything the agent loop needs to rebuild the episode on any
worker of any node: the env id and kwargs and the task itself, as JSON strings in ``extra_info`` (strings,
so that rows of different envs share one Parquet schema and a file can mix envs). ``prompt`` is the env's
real first prompt (system + user messages), so verl's overlong-prompt filter measures what the model will
see. Columns:

=================  ==========================================================================================
``data_source``    the env id (verl groups validation metrics by it)
``prompt``         the env's reset messages ``[{"role", "content"}, ...]``
``ability``        ``tool-use``
``reward_model``   ``{"style": "rule", "ground_truth": <the task's answer as text>}`` (for verl's own loops)
``agent_name``     ``toolgym`` (verl routes the row to ``ToolgymAgentLoop``), or ``toolgym_agent`` for rows a
                   user's agent program plays (``ToolgymGatewayAgentLoop``)
``extra_info``     ``index`` (unique), ``split``, ``env_id``, ``env_kwargs`` (JSON), ``task`` (JSON of the
                   ``Task``), ``task_id``, ``seed``
=================  ==========================================================================================

Which tasks a split holds: ``toolgym.rollout.keys.episode_rows`` (the same episodes every adapter's rows
name).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EnvRequest, EpisodeKey, EpisodeRow, Split, episode_rows
from toolgym.trainers.verl_adapter.names import AGENT_NAME, ROWS_HINT


def export_verl(
    envs: Sequence[EnvRequest | str],
    *,
    n: int,
    split: Split = "train",
    out: str | Path,
    seed: int = 0,
    agent_name: str = AGENT_NAME,
) -> Path:
    """Write ``n`` rows, shared among ``envs`` by weight, to ``<out>/<split>.parquet``; return its path.
    ``agent_name``: the agent loop verl routes them to."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = build_rows(envs, n=n, split=split, seed=seed, agent_name=agent_name)
    path = Path(out) / f"{split}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def build_rows(
    envs: Sequence[EnvRequest | str],
    *,
    n: int,
    split: Split = "train",
    seed: int = 0,
    agent_name: str = AGENT_NAME,
) -> list[dict[str, Any]]:
    """The rows ``export_verl`` writes (see the module docstring)."""
    if not envs:
        raise ValueError("no envs to export: give at least one env id")
    requests = [EnvRequest(id=e) if isinstance(e, str) else e for e in envs]
    return [
        verl_row(row, index, split, agent_name)
        for index, row in enumerate(episode_rows(requests, n, split=split, seed=seed))
    ]


def verl_row(row: EpisodeRow, index: int, split: Split, agent_name: str = AGENT_NAME) -> dict[str, Any]:
    """One episode as verl's row (the columns in the module docstring)."""
    return {
        "data_source": row.key.env_id,
        "prompt": row.prompt,
        "ability": "tool-use",
        "reward_model": {"style": "rule", "ground_truth": row.answer_text},
        "agent_name": agent_name,
        "extra_info": {"index": index, "split": split, **row.key.fields()},
    }


def prompt_token_lengths(parquet: str | Path, model: str, template_tools: bool = False) -> list[int]:
    """Each row's prompt length in ``model``'s tokens, rendered as the agent loop renders it (with the env's
    tool schemas in the template when ``template_tools``): what to compare with verl's ``max_prompt_length``
    (verl drops or fails longer rows)."""
    import pyarrow.parquet as pq

    from toolgym.rollout.models import make_renderer

    renderer = make_renderer(model, template_tools=template_tools)
    if not template_tools:
        prompts = pq.read_table(parquet, columns=["prompt"]).column("prompt").to_pylist()
        return [len(renderer.prompt_ids(messages)) for messages in prompts]
    rows = pq.read_table(parquet, columns=["prompt", "extra_info"]).to_pylist()
    host = EpisodeHost()  # one env per id and kwargs, for the tool schemas of each row's env
    try:
        lengths = []
        for row in rows:
            key = EpisodeKey.from_fields(row["extra_info"], how=ROWS_HINT)
            with host.session(key.env_id, key.env_kwargs) as session:
                tools = session.inner.tool_schemas
            lengths.append(len(renderer.prompt_ids(row["prompt"], tools)))
        return lengths
    finally:
        host.close()


__all__ = ["build_rows", "export_verl", "prompt_token_lengths", "verl_row"]
