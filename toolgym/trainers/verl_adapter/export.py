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
                   ``Task``), ``task_id``, ``seed``; with ``agents``, ``agent``: the spec of the agent program
                   that plays the row (null for the runner's rows of the mix)
=================  ==========================================================================================

Which tasks a split holds: ``toolgym.rollout.keys.episode_rows`` (the same episodes every adapter's rows
name). ``agents`` names, per env of the mix, the agent program that plays its rows (``toolgym train``: an
env entry's ``agent:``), so one file, and one batch, mixes rows of toolgym's runner and of agent programs;
two entries of one env (one plays it with the runner, one with an agent) draw the same tasks, as two entries
of one env always do.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EnvRequest, EpisodeKey, EpisodeRow, Split, episode_rows
from toolgym.trainers.verl_adapter.names import AGENT_FIELD, AGENT_NAME, GATEWAY_AGENT_NAME, ROWS_HINT


def export_verl(
    envs: Sequence[EnvRequest | str],
    *,
    n: int,
    split: Split = "train",
    out: str | Path,
    seed: int = 0,
    agent_name: str = AGENT_NAME,
    agents: Sequence[str | None] | None = None,
) -> Path:
    """Write ``n`` rows, shared among ``envs`` by weight, to ``<out>/<split>.parquet``; return its path.
    ``agent_name``: the agent loop verl routes them to; ``agents``: per env, the agent program that plays its
    rows (routed to the gateway loop, ``toolgym_agent``), or None for ``agent_name``'s loop."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = build_rows(envs, n=n, split=split, seed=seed, agent_name=agent_name, agents=agents)
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
    agents: Sequence[str | None] | None = None,
) -> list[dict[str, Any]]:
    """The rows ``export_verl`` writes (see the module docstring)."""
    if not envs:
        raise ValueError("no envs to export: give at least one env id")
    requests = [EnvRequest(id=e) if isinstance(e, str) else e for e in envs]
    if agents is None or not any(agents):
        chosen = episode_rows(requests, n, split=split, seed=seed)
        return [verl_row(row, index, split, agent_name) for index, row in enumerate(chosen)]
    if len(agents) != len(requests):
        raise ValueError(
            f"agents names {len(agents)} agent programs for {len(requests)} envs: give one per env"
        )
    chosen = episode_rows(requests, n, split=split, seed=seed)
    return [
        verl_row(row, index, split, agent_name, agent=agents[row.entry], with_agent_field=True)
        for index, row in enumerate(chosen)
    ]


def verl_row(
    row: EpisodeRow,
    index: int,
    split: Split,
    agent_name: str = AGENT_NAME,
    *,
    agent: str | None = None,
    with_agent_field: bool = False,
) -> dict[str, Any]:
    """One episode as verl's row (the columns in the module docstring): with ``agent``, a row that agent
    program plays (routed to the gateway loop); ``with_agent_field`` writes the field even without one (the
    rows of one file share a schema)."""
    extra: dict[str, Any] = {"index": index, "split": split, **row.key.fields()}
    if agent is not None or with_agent_field:
        extra[AGENT_FIELD] = agent
    return {
        "data_source": row.key.env_id,
        "prompt": row.prompt,
        "ability": "tool-use",
        "reward_model": {"style": "rule", "ground_truth": row.answer_text},
        "agent_name": GATEWAY_AGENT_NAME if agent is not None else agent_name,
        "extra_info": extra,
    }


def prompt_token_lengths(parquet: str | Path, model: str, template_tools: bool = False) -> list[int]:
    """Each row's prompt length in ``model``'s tokens, rendered as the agent loop renders it (with the env's
    tool schemas in the template when ``template_tools``, and always for the rows an agent program plays:
    its tools travel as OpenAI functions): what to compare with verl's ``max_prompt_length`` (verl drops or
    fails longer rows)."""
    import pyarrow.parquet as pq

    from toolgym.rollout.models import make_renderer

    table = pq.read_table(parquet)
    columns = [c for c in ("prompt", "extra_info", "agent_name") if c in table.column_names]
    rows = table.select(columns).to_pylist()
    with_tools = [template_tools or row.get("agent_name") == GATEWAY_AGENT_NAME for row in rows]
    renderer = make_renderer(model, template_tools=any(with_tools))
    host = EpisodeHost() if any(with_tools) else None  # one env per id and kwargs, for its tool schemas
    try:
        lengths = []
        for row, tools_too in zip(rows, with_tools, strict=True):
            tools = None
            if tools_too and host is not None:
                key = EpisodeKey.from_fields(row["extra_info"], how=ROWS_HINT)
                with host.session(key.env_id, key.env_kwargs) as session:
                    tools = session.inner.tool_schemas
            lengths.append(len(renderer.prompt_ids(row["prompt"], tools)))
        return lengths
    finally:
        if host is not None:
            host.close()


__all__ = ["build_rows", "export_verl", "prompt_token_lengths", "verl_row"]
