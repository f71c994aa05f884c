"""``toolgym rollout`` and ``toolgym eval`` end to end, and the pass@k arithmetic."""

import json
import subprocess
import sys

from toolgym.core.types import Trajectory, Verdict
from toolgym.rollout import RolloutConfig, load_trajectories
from toolgym.rollout.evaluate import evaluate, score


def _traj(task_id, passed, turns=1):
    return Trajectory(
        task_id=task_id,
        verdict=Verdict(reward=float(passed), passed=passed),
        reward=float(passed),
    )


def test_pass_at_k_arithmetic():
    trajs = [
        _traj("a", True),
        _traj("a", False),
        _traj("b", False),
        _traj("b", False),
        _traj("c", True),
        _traj("c", True),
    ]
    report = score("env", trajs, k=2)
    assert report.tasks == 3
    assert report.pass_at_1 == (0.5 + 0.0 + 1.0) / 3
    assert report.pass_at_k == 2 / 3
    assert report.reward_mean == 3 / 6
    assert [s.passed for s in report.per_task] == [1, 0, 2]


def test_evaluate_uses_the_fixed_eval_split_with_k_samples(engine, tmp_path):
    out = tmp_path / "eval.jsonl"
    config = RolloutConfig(max_response_tokens=64, max_tokens_per_turn=32)
    report = engine.run(
        evaluate(
            "toolgym/Calculator-v0",
            engine.client,
            engine.renderer,
            config,
            k=2,
            num_tasks=3,
            out=str(out),
            progress=False,
        )
    )
    assert report.tasks == 3 and report.k == 2 and report.errors == 0
    assert all(s.samples == 2 for s in report.per_task)
    assert [s.task_id for s in report.per_task] == sorted(f"calculator-L1/{2**31 + i}" for i in range(3))
    assert len(load_trajectories(out)) == 6
    assert 0.0 <= report.pass_at_1 <= report.pass_at_k <= 1.0


def test_rollout_command_writes_trajectories_and_a_summary(tmp_path):
    out = tmp_path / "r.jsonl"
    cmd = [
        sys.executable,
        "-m",
        "toolgym.cli",
        "rollout",
        "--env",
        "toolgym/Calculator-v0",
        "--env",
        "toolgym/Search-v0",
        "--model",
        "tiny",
        "--episodes",
        "2",
        "--group-size",
        "2",
        "--out",
        str(out),
        "--max-response-tokens",
        "96",
        "--max-tokens-per-turn",
        "32",
        "--no-progress",
        "--format",
        "hermes",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "toolgym/Calculator-v0" in proc.stdout and "toolgym/Search-v0" in proc.stdout
    assert "8 trajectories appended" in proc.stdout
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 8 and {row["env_id"] for row in lines} == {
        "toolgym/Calculator-v0",
        "toolgym/Search-v0",
    }
    assert all(len(row["response_ids"]) == len(row["response_mask"]) <= 96 for row in lines)
    assert all(row["error"] is None for row in lines)


def test_rollout_command_explains_missing_model():
    proc = subprocess.run(
        [sys.executable, "-m", "toolgym.cli", "rollout", "--env", "toolgym/Calculator-v0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--model" in proc.stderr
