"""toolgym's episode stats in verl's step metrics (``toolgym.trainers.verl_adapter.metrics``).

The real run's console log is checked in ``test_train_cpu.py``; here, the numbers for a mixed batch and the
wrapping of a trainer module's ``compute_data_metrics``."""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import pytest

from toolgym.core.types import Trajectory
from toolgym.trainers.verl_adapter import metrics


def _batch(rows: list[dict]) -> dict[str, np.ndarray]:
    """verl's ``non_tensor_batch``: one object array per column."""
    return {key: np.array([row[key] for row in rows], dtype=object) for key in rows[0]}


def _row(source: str, passed: float, **stats: float) -> dict:
    return {
        "data_source": source,
        **dict.fromkeys(Trajectory(task_id="t").stats(), 0.0),
        "passed": passed,
        **stats,
    }


def test_a_mixed_batch_gives_means_totals_and_a_pass_rate_per_env():
    rows = [
        _row("toolgym/Math-v0", 1.0, turns=2.0, tool_calls=1.0),
        _row("toolgym/Math-v0", 0.0, turns=4.0, tool_calls=3.0, tool_errors=2.0),
        _row("toolgym/SQL-v0", 1.0, turns=3.0, tool_calls=2.0, infra_errors=1.0),
        _row("toolgym/SQL-v0", 1.0, turns=3.0, verifier_error=1.0, trainable=0.0),
    ]
    for row in rows[:3]:
        row["trainable"] = 1.0
    got = metrics.episode_metrics(_batch(rows))
    assert got["toolgym/turns/mean"] == 3.0
    assert got["toolgym/tool_calls/mean"] == 1.5
    assert got["toolgym/tool_errors/total"] == 2.0
    assert got["toolgym/infra_errors/total"] == 1.0
    assert got["toolgym/verifier_error/total"] == 1.0
    assert got["toolgym/error/total"] == 0.0
    assert got["toolgym/trainable/mean"] == 0.75
    assert got["toolgym/pass_rate"] == 0.75
    assert got["toolgym/pass_rate/toolgym/Math-v0"] == 0.5
    assert got["toolgym/pass_rate/toolgym/SQL-v0"] == 1.0


def test_the_segments_of_agent_programs_sessions_are_logged():
    """Every toolgym loop sends ``segments`` (the runner's episodes: 1); an agent program that rewrote its
    history had more, of which verl trained on the last."""
    rows = [_row("toolgym/Math-v0", 1.0, segments=1.0, dropped_segments=0.0) for _ in range(3)]
    rows.append(_row("toolgym/Math-v0", 0.0, segments=3.0, dropped_segments=2.0))
    got = metrics.episode_metrics(_batch(rows))
    assert got["toolgym/segments/mean"] == 1.5 and got["toolgym/dropped_segments/total"] == 2.0


def test_the_share_of_samples_agent_programs_played_is_logged():
    """A run whose envs are played by toolgym's runner and by agent programs mixes both in a batch; each
    sample says which (``agent_program``)."""
    rows = [_row("toolgym/Math-v0", 0.0, agent_program=float(i < 3)) for i in range(4)]
    assert metrics.episode_metrics(_batch(rows))["toolgym/agent_program/mean"] == 0.75


def test_rows_from_another_agent_loop_add_nothing():
    assert metrics.episode_metrics({"data_source": np.array(["gsm8k"], dtype=object)}) == {}
    assert metrics.episode_metrics({}) == {}


def test_the_stats_are_the_trajectorys_own_keys():
    """What the agent loop sends (``Trajectory.stats``) is what this module reads."""
    assert set(metrics.MEAN_STATS) | {"passed", "wait_s"} == set(Trajectory(task_id="t").stats())


def test_a_trainer_modules_compute_data_metrics_is_wrapped_once():
    def compute_data_metrics(batch, use_critic=True):
        return {"critic/score/mean": 0.5, "use_critic": float(use_critic)}

    module = types.ModuleType("fake_trainer")
    module.compute_data_metrics = compute_data_metrics
    metrics._patch(module)
    wrapped = module.compute_data_metrics
    metrics._patch(module)  # imported twice (every verl process imports the module): no second layer
    assert module.compute_data_metrics is wrapped

    batch = types.SimpleNamespace(non_tensor_batch=_batch([_row("toolgym/Math-v0", 1.0, turns=2.0)]))
    got = module.compute_data_metrics(batch=batch, use_critic=False)
    assert got["critic/score/mean"] == 0.5 and got["use_critic"] == 0.0  # verl's own, as they were
    assert got["toolgym/pass_rate/toolgym/Math-v0"] == 1.0
    assert got["toolgym/turns/mean"] == 2.0


@pytest.mark.parametrize("name", metrics.TRAINER_MODULES)
def test_every_trainer_module_named_calls_compute_data_metrics(name):
    """A verl release that renames the function or the module would silently drop the metrics."""
    import verl

    # read, not imported: verl's v1 trainer needs transfer_queue, which toolgym does not install
    path = Path(verl.__file__).parent.joinpath(*name.split(".")[1:]).with_suffix(".py")
    assert "compute_data_metrics(batch=" in path.read_text(encoding="utf-8"), path


def test_an_env_given_as_module_and_id_is_named_by_its_id():
    """``module:id`` (as gym.make takes it) would put a colon in the metric's name."""
    batch = {
        "data_source": np.array(["toolgym.testing.probe:toolgym-debug/Probe-v0"] * 2, dtype=object),
        "passed": np.array([1.0, 0.0], dtype=object),
    }
    assert metrics.episode_metrics(batch)["toolgym/pass_rate/toolgym-debug/Probe-v0"] == 0.5
