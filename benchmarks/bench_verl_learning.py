"""verl learns through toolgym's agent loop, and the inverted-mask control does not: real verl runs of
``examples/verl/learn-cpu.yaml`` (GRPO) and ``learn-ppo-cpu.yaml`` (PPO: a critic, GAE) on a CPU, each with
toolgym's agent loop and with the control.

All runs train the embedded tiny model (random weights) on ``toolgym-debug/Probe-v0`` with the same config
and seeds; only the agent loop differs. The normal run uses toolgym's (``ToolgymAgentLoop``): the loss is on
the tokens the model generated, each episode gets its own verdict, and the mean reward climbs from about 0.1
(a tenth of the tiny model's tokens start with ``s`` or ``t``) to about 1.0. The control
(``toolgym.testing.verl.InvertedMaskAgentLoop``) inverts the loss mask, so the loss falls on the probe's
observation and the template tokens instead, and the reward stays where it started. A wiring bug of the kind
verl's multi-turn users report (masks or rewards reaching the wrong tokens or samples) makes the two curves
alike and fails here.

Not in ``make test``: each run is a full verl start (about 4 minutes on two cores) plus 25 steps, about 8
minutes; the four take about half an hour. ``make bench`` runs them and prints the per-step table of each.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from toolgym.testing.probe import check_probe_curve
from toolgym.testing.verl import INVERTED_MASK_AGENT_LOOP, run_in_session
from toolgym.trainers.verl_adapter.progress import step_metrics, step_table

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "verl"
CONFIGS = {"grpo": EXAMPLES / "learn-cpu.yaml", "ppo": EXAMPLES / "learn-ppo-cpu.yaml"}
TIMEOUT_S = 2400


def _train(config: Path, out: Path, target: str | None) -> dict[int, dict[str, float]]:
    command = [sys.executable, "-m", "toolgym.testing.verl", "--config", str(config), "--out", str(out)]
    command += ["--agent-loop", target] if target else []
    code, log = run_in_session(command, TIMEOUT_S)
    if code is None:
        pytest.fail(f"the run did not finish in {TIMEOUT_S}s; the end of its log:\n{log[-6000:]}")
    (out / "train.log").write_text(log)
    assert code == 0, f"the run failed; the end of its log:\n{log[-6000:]}"
    steps = step_metrics(log)
    print(f"\n{out.name}: {len(steps)} steps\n{step_table(steps)}")
    return steps


def _rewards(steps: dict[int, dict[str, float]]) -> list[float]:
    return [steps[step]["critic/score/mean"] for step in sorted(steps)]


@pytest.mark.parametrize("loop", ["toolgym", "inverted-mask"])
@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_verl_learning_curve(algorithm, loop, tmp_path):
    target = INVERTED_MASK_AGENT_LOOP if loop == "inverted-mask" else None
    rewards = _rewards(_train(CONFIGS[algorithm], tmp_path / f"{algorithm}-{loop}", target))
    curve = [round(r, 2) for r in rewards]
    print(f"mean reward per step, {algorithm}, {loop} agent loop: {curve}")
    check_probe_curve(rewards, learns=loop == "toolgym")
