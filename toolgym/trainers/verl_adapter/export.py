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
``agent_name``     ``toolgym`` (verl routes the row to ``ToolgymAgentLoop``)
``extra_info``     ``index`` (unique), ``split``, ``env_id``, ``env_kwargs`` (JSON), ``task`` (JSON of the
                   ``Task``), ``task_id``, ``seed``
=================  ==========================================================================================

Which tasks: ``split="val"`` takes each env's fixed evaluation split (``TaskSource.eval_tasks``, the tasks
``toolgym eval`` scores). ``split="train"`` takes a fixed list's tasks once each in a seeded order (again
when more rows are asked for than it has), and for a procedural source the tasks ``env.reset(seed=seed + i)``
draws, which never overlap the evaluation split. Rows of a mix are shuffled with ``seed``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
import numpy as np

from toolgym.core.task import FiniteSource, Task
from toolgym.envs.base import ToolEnv
from toolgym.rollout.pool import EnvPool, EnvRequest, EpisodeKey, draw_task
from toolgym.trainers.verl_adapter import AGENT_NAME

Split = Literal["train", "val"]


def export_verl(
    envs: Sequence[EnvRequest | str],
    *,
    n: int,
    split: Split = "train",
    out: str | Path,
    seed: int = 0,
) -> Path:
    """Write ``n`` rows, shared among ``envs`` by weight, to ``<out>/<split>.parquet``; return its path."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = build_rows(envs, n=n, split=split, seed=seed)
    path = Path(out) / f"{split}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def build_rows(
    envs: Sequence[EnvRequest | str], *, n: int, split: Split = "train", seed: int = 0
) -> list[dict[str, Any]]:
    """The rows ``export_verl`` writes (see the module docstring)."""
    import toolgym  # noqa: F401 - registers the envs

    requests = [EnvRequest(id=e) if isinstance(e, str) else e for e in envs]
    if not requests:
        raise ValueError("no envs to export: give at least one env id")
    if n < len(requests):
        raise ValueError(f"n={n} rows cannot cover {len(requests)} envs: ask for at least one row per env")
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    rows: list[dict[str, Any]] = []
    for request, count in zip(requests, _shares(n, [r.weight for r in requests]), strict=True):
        env = gym.make(request.id, **request.kwargs)
        try:
            rows += env_rows(env, request, count, split, seed)
        finally:
            env.close()
    order = np.random.default_rng(seed).permutation(len(rows)) if len(requests) > 1 else range(len(rows))
    rows = [rows[i] for i in order]
    for index, row in enumerate(rows):
        row["extra_info"]["index"] = index
    return rows


def episode_key(extra_info: Any) -> EpisodeKey:
    """The episode an exported row pins, read back from its ``extra_info`` (a clear error for rows that were
    not exported by toolgym)."""
    if not isinstance(extra_info, dict) or not extra_info.get("env_id") or not extra_info.get("task"):
        raise ValueError(
            "the row has no extra_info.env_id/task: write the data with `toolgym export verl` (or give rows "
            "that toolgym's agent loop should not play another agent_name)"
        )
    kwargs = extra_info.get("env_kwargs") or "{}"
    seed = extra_info.get("seed")
    return EpisodeKey(
        env_id=str(extra_info["env_id"]),
        env_kwargs=json.loads(kwargs) if isinstance(kwargs, str) else dict(kwargs),
        task=Task.model_validate_json(extra_info["task"]),
        seed=None if seed is None else int(seed),
    )


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
    pool = EnvPool()  # one env per id and kwargs, for the tool schemas of each row's env
    try:
        lengths = []
        for row in rows:
            key = episode_key(row["extra_info"])
            with pool.lease(key.env_id, key.env_kwargs) as env:
                tools = env.unwrapped.tool_schemas
            lengths.append(len(renderer.prompt_ids(row["prompt"], tools)))
        return lengths
    finally:
        pool.close()


def env_rows(env: gym.Env, request: EnvRequest, count: int, split: Split, seed: int) -> list[dict]:
    inner = env.unwrapped
    if not isinstance(inner, ToolEnv):
        raise TypeError(f"{request.id} is not a toolgym env ({type(inner).__name__}); verl export needs one")
    kwargs = json.dumps(request.kwargs, sort_keys=True)
    rows = []
    for i, task in enumerate(_tasks(env, inner, request.id, count, split, seed)):
        _, info = env.reset(seed=seed + i, options={"task": task})
        rows.append(
            {
                "data_source": request.id,
                "prompt": [{"role": m["role"], "content": m["content"]} for m in info["messages"]],
                "ability": "tool-use",
                "reward_model": {"style": "rule", "ground_truth": _answer_text(task.answer)},
                "agent_name": AGENT_NAME,
                "extra_info": {
                    "index": 0,
                    "split": split,
                    "env_id": request.id,
                    "env_kwargs": kwargs,
                    "task": task.model_dump_json(),
                    "task_id": task.id,
                    "seed": seed + i,
                },
            }
        )
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
        tasks: list[Task] = []
        while len(tasks) < count:
            tasks += [source.task_at(int(i)) for i in rng.permutation(len(source))[: count - len(tasks)]]
        return tasks
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


def _answer_text(answer: Any) -> str:
    if answer is None:
        return ""
    if isinstance(answer, str):
        return answer
    if isinstance(answer, bool | int | float):
        return str(answer)
    return json.dumps(answer, default=str)


__all__ = ["build_rows", "env_rows", "episode_key", "export_verl", "prompt_token_lengths"]
