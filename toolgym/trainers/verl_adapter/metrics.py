"""toolgym's episode stats in verl's step metrics, so every logger verl has (console, tensorboard, wandb, ...)
shows them beside verl's own.

verl logs the numbers of its agent loops' ``reward_extra_info`` only for validation; for training steps it
logs reward, advantage, lengths and ``num_turns``, but not whether the tools failed, whose fault it was, or
which env passed. A user watching a mixed run could not tell a policy that stopped calling tools from a
sandbox that stopped answering. This module (imported by verl in every process of a ``toolgym train`` run,
through ``VERL_USE_EXTERNAL_MODULES``) wraps verl's ``compute_data_metrics`` in the modules of its trainers,
so each training step also logs, from the batch's per-episode stats (``Trajectory.stats``, which toolgym's
agent loop hands verl as ``reward_extra_info``):

- ``toolgym/<stat>/mean`` for turns, tool calls, tool errors, infra errors, verifier errors, episode errors
  and the trainable share, and ``toolgym/<stat>/total`` for the counts of errors;
- ``toolgym/segments/mean`` and ``toolgym/dropped_segments/total``: the segments of each sample's session
  (1 for the runner's episodes; an agent program that rewrote its history has more, of which verl trains on
  the last);
- ``toolgym/agent_program/mean``: the batch's share of samples that a user's agent program played (a run
  whose envs are played by toolgym's runner and by agent programs mixes both in one batch);
- ``toolgym/pass_rate`` over the batch and ``toolgym/pass_rate/<env id>`` per env (the rows' ``data_source``,
  without the module of a ``module:id``: a metric name has no colon);
- how old the samples' weights are (:func:`staleness_metrics`): ``toolgym/staleness/mean`` and ``/max``,
  per sample the trainer's weights version when it took the batch less the oldest version that sampled
  one of the sample's tokens (0 in synchronous training, 1 one step off the policy, up to the staleness
  threshold in fully-async training), ``toolgym/stale_samples/total`` (staleness >= 1),
  ``toolgym/mixed_version_samples/total`` (samples sampled by two or more versions: a weight update
  interrupted them and they resumed) and ``toolgym/resumed_generations/total``. The samples verl's
  fully-async rollouter dropped as too stale never reach a batch: verl counts them itself
  (``fully_async/count/dropped_stale_samples``), beside these in the same step's metrics.

Rows that did not come from toolgym's agent loop carry none of these keys, and nothing is added for them.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

#: the stats logged as a batch mean
MEAN_STATS = ("turns", "tool_calls", "tool_errors", "infra_errors", "verifier_error", "error", "trainable")
#: the counts also logged as a batch total: a handful of errors in a large batch is what a user looks for
TOTAL_STATS = ("tool_errors", "infra_errors", "verifier_error", "error")
#: beyond the Trajectory's stats: the segments of each sample's session (an agent program that rewrote its
#: history has several; verl trains on the last and drops the others: ``gateway_loop.py``)
SEGMENT_MEANS, SEGMENT_TOTALS = ("segments",), ("dropped_segments", "resumed_generations")
#: which loop played each sample: 1 for an agent program (the gateway loop), 0 for toolgym's runner
LOOP_MEANS = ("agent_program",)
#: the verl modules that import ``compute_data_metrics`` and call it once per training step
TRAINER_MODULES = (
    "verl.trainer.ppo.ray_trainer",
    "verl.trainer.ppo.v1.trainer_base",
    "verl.experimental.separation.ray_trainer",
)


def episode_metrics(non_tensor_batch: Mapping[str, Any]) -> dict[str, float]:
    """toolgym's metrics for one training batch, from its per-episode columns (see the module docstring)."""
    metrics: dict[str, float] = {}
    means, totals = (*MEAN_STATS, *SEGMENT_MEANS, *LOOP_MEANS), (*TOTAL_STATS, *SEGMENT_TOTALS)
    columns = {
        key: _floats(non_tensor_batch[key]) for key in (*means, *totals, "passed") if key in non_tensor_batch
    }
    for key in means:
        if key in columns and columns[key].size:
            metrics[f"toolgym/{key}/mean"] = float(columns[key].mean())
    for key in totals:
        if key in columns:
            metrics[f"toolgym/{key}/total"] = float(columns[key].sum())
    passed = columns.get("passed")
    if passed is not None and passed.size:
        metrics["toolgym/pass_rate"] = float(passed.mean())
        sources = non_tensor_batch.get("data_source")
        if sources is not None and len(sources) == passed.size:
            env_ids = np.array([str(s).rpartition(":")[2] for s in sources], dtype=object)  # module:id -> id
            for env_id in sorted(set(env_ids)):
                metrics[f"toolgym/pass_rate/{env_id}"] = float(passed[env_ids == env_id].mean())
    return metrics


def staleness_metrics(
    non_tensor_batch: Mapping[str, Any], trainer_version: int | None, *, labels_lead: bool = False
) -> dict[str, float]:
    """How many weight updates behind ``trainer_version`` each sample's oldest token was sampled (see the
    module docstring), from the ``min_global_steps``/``max_global_steps`` columns toolgym's agent loops (and
    verl's) fill; nothing when the trainer's version or the samples' are unknown. ``labels_lead``: the
    samples' labels run one ahead of the updates in their weights (one step off the policy publishes step
    N's weights, N-1 updates, under N; 0 and 1 are both the initial weights)."""
    lows, highs = non_tensor_batch.get("min_global_steps"), non_tensor_batch.get("max_global_steps")
    if trainer_version is None or lows is None or highs is None:
        return {}
    lead = 1 if labels_lead else 0
    pairs = [
        (max(int(lo) - lead, 0), max(int(hi) - lead, 0))
        for lo, hi in zip(lows, highs, strict=False)
        if lo is not None and hi is not None
    ]
    if not pairs:
        return {}
    staleness = np.array([trainer_version - lo for lo, _ in pairs], dtype=np.float64)
    return {
        "toolgym/staleness/mean": float(staleness.mean()),
        "toolgym/staleness/max": float(staleness.max()),
        "toolgym/stale_samples/total": float((staleness >= 1).sum()),
        "toolgym/mixed_version_samples/total": float(sum(hi > lo for lo, hi in pairs)),
    }


def trainer_weights_version(trainer: Any) -> int | None:
    """The version of the weights ``trainer`` (verl's, the caller of ``compute_data_metrics``) held when it
    took the batch, as its rollout servers count versions: fully-async's ``current_param_version`` as its
    step's metrics recorded it then (it moves on before the metrics are computed); for the step-by-step
    trainers the updates so far, ``global_steps - 1`` (step N trains the weights of N-1 updates)."""
    metrics = getattr(trainer, "metrics", None)
    if isinstance(metrics, Mapping) and "fully_async/count/current_param_version" in metrics:
        return int(metrics["fully_async/count/current_param_version"])
    step = getattr(trainer, "global_steps", None)
    return int(step) - 1 if isinstance(step, int) else None


def labels_lead(trainer: Any) -> bool:
    """Whether ``trainer`` labels its weights one ahead of their updates: verl's one-step-off trainer syncs
    at the start of step N under N, before step N's update (the synchronous trainer syncs after it)."""
    return any(k.__name__ == "OneStepOffRayTrainer" for k in type(trainer).__mro__)


def _floats(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).reshape(-1)


def _with_episode_metrics(compute_data_metrics):
    @functools.wraps(compute_data_metrics)
    def wrapper(batch, *args, **kwargs):
        metrics = compute_data_metrics(batch, *args, **kwargs)
        columns = getattr(batch, "non_tensor_batch", None) or {}
        metrics.update(episode_metrics(columns))
        # verl's trainers call this from a method of theirs: the caller's ``self`` is the trainer
        trainer = sys._getframe(1).f_locals.get("self")
        version = trainer_weights_version(trainer)
        metrics.update(staleness_metrics(columns, version, labels_lead=labels_lead(trainer)))
        return metrics

    wrapper.__toolgym_wrapped__ = True  # type: ignore[attr-defined]  # a marker: wrap verl's function once
    return wrapper


def _patch(module: Any) -> None:
    original = getattr(module, "compute_data_metrics", None)
    if original is not None and not getattr(original, "__toolgym_wrapped__", False):
        module.compute_data_metrics = _with_episode_metrics(original)


def install() -> None:
    """Wrap ``compute_data_metrics`` in each trainer module, now if loaded, else at its first import."""
    from toolgym.trainers.verl_adapter.compat import after_import

    for name in TRAINER_MODULES:
        after_import(name, _patch)


install()
