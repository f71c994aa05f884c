"""verl's synchronous and asynchronous trainers side by side on one workload with long-tailed tool latencies,
and the asynchronous modes' learning with the inverted-mask control: real ``toolgym train`` runs on a CPU.

**Timing** (``test_sync_and_async_modes_on_long_tailed_tools``): ``examples/verl/learn-cpu.yaml`` (GRPO on
``toolgym-debug/Probe-v0``, the tiny model) with the probe tool taking a long-tailed latency per task (most
calls 50 ms, one in eight 1 s, one in sixteen 4 s: a slow sandbox run or search call), run in each mode:
``sync`` (rollout, then training, in turn), ``one_step_off`` (step N+1 rolls out while step N trains) and
``fully_async`` (the rollout streams episodes into a queue; staleness threshold 0.5, partial rollouts): the
``learn-*-cpu.yaml`` examples of each mode with the latencies. Each run
is traced (``toolgym.testing.verl_trace``: when each episode and each actor update ran) and the table gives,
per mode: the median wall time of a step (from one actor update to the next, the first step left out), the
trainer's median wait for rollouts per step (verl's own ``timing_s/gen``: the time the trainer spent waiting
for its batch), the share of actor-update time during which episodes were in flight (generation and
training overlapping), the mean staleness of the samples trained on, and the ratio of each mode's step time
to the synchronous one. A timeline strip per mode shows the overlap: ``T`` an actor update alone, ``r``
episodes alone, ``B`` both, ``.`` neither (verl's other work: log-probs, advantages, the weight sync).

On two CPU cores the rollout's vLLM server, the FSDP actor and the tools share the same cores, so the
overlap buys less than on GPUs, where each pool has its own: the ratio is reported as measured.

**Learning** (``test_the_modes_learn_on_every_seed_and_the_inverted_mask_does_not``): ``learn-cpu.yaml``,
``learn-one-step-off-cpu.yaml`` and ``learn-fully-async-cpu.yaml`` as they are, three seeds each with
toolgym's agent loop and one with the inverted-mask control (``toolgym.testing.verl.InvertedMaskAgentLoop``):
the reward climbs from about 0.1 to about 1.0 with toolgym's loop and not with the control
(docs/training.md's table of the seeds, and why the asynchronous configs move PPO's upper clip).

Not in ``make test`` (each run is a full verl start plus its steps; all of them take about an hour on two
cores). ``make bench`` runs them; ``-k timing`` or ``-k learn`` one part.
"""

from __future__ import annotations

import itertools
import os
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from toolgym.testing.probe import check_probe_curve
from toolgym.testing.verl import INVERTED_MASK_AGENT_LOOP, run_in_session
from toolgym.testing.verl_trace import read_trace, trace_env
from toolgym.trainers.verl_adapter.progress import step_metrics, step_table

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "verl"
#: each mode's learning config (the same run as learn-cpu.yaml, in that mode)
LEARN = {
    "sync": EXAMPLES / "learn-cpu.yaml",
    "one_step_off": EXAMPLES / "learn-one-step-off-cpu.yaml",
    "fully_async": EXAMPLES / "learn-fully-async-cpu.yaml",
}
TIMEOUT_S = 2400
#: seconds per probe call, one per task by its id: mostly quick, a long tail of slow calls
LONG_TAIL = [0.05] * 13 + [1.0] * 2 + [4.0]
TIMING_STEPS = 8
MODES = tuple(LEARN)
TIMING: dict[str, dict[str, Any]] = {}


def mode_config(mode: str, out: Path, **changes: Any) -> Path:
    """The mode's learning config with ``changes``, written to ``out``."""
    cfg = yaml.safe_load(LEARN[mode].read_text())
    cfg.update(changes)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return out


def train(
    config: Path,
    out: Path,
    target: str | None = None,
    env: dict[str, str] | None = None,
    overrides: tuple[str, ...] = (),
) -> str:
    command = [sys.executable, "-m", "toolgym.testing.verl", "--config", str(config), "--out", str(out)]
    command += ["--agent-loop", target] if target else []
    command += list(overrides)
    code, log = run_in_session(command, TIMEOUT_S, env={**os.environ, **(env or {})})
    (out / "train.log").parent.mkdir(parents=True, exist_ok=True)
    (out / "train.log").write_text(log)
    if code is None:
        pytest.fail(f"{config.name} did not finish in {TIMEOUT_S}s; the end of its log:\n{log[-6000:]}")
    assert code == 0, f"{config.name} failed; the end of its log:\n{log[-6000:]}"
    return log


def intervals(events: list[dict[str, Any]], kind: str) -> list[tuple[float, float]]:
    return sorted((e["start"], e["time"]) for e in events if e["kind"] == kind and "start" in e)


def covered(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Seconds of [start, end) inside the union of ``spans``."""
    total, reach = 0.0, start
    for a, b in sorted(spans):
        a, b = max(a, reach), min(b, end)
        if b > a:
            total += b - a
            reach = b
    return total


def update_steps(trains: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The actor updates, one per training step: these configs update once a step (``ppo_mini_batch_size`` is
    the whole batch) on one rank."""
    return sorted(trains)


def timeline(
    episodes: list[tuple[float, float]], trains: list[tuple[float, float]], t0: float, t1: float
) -> str:
    """One character per second (see the module docstring)."""
    chars = []
    for i in range(int(t1 - t0)):
        a, b = t0 + i, t0 + i + 1
        rolling, training = covered(episodes, a, b) > 0.3, covered(trains, a, b) > 0.3
        chars.append("B" if rolling and training else "T" if training else "r" if rolling else ".")
    return "".join(chars)


def summarize(mode: str, log: str, trace_dir: Path) -> dict[str, Any]:
    events = read_trace(trace_dir)
    episodes, trains = intervals(events, "episode"), intervals(events, "train")
    steps = update_steps(trains)
    assert len(steps) >= 3, f"{mode}: {len(steps)} actor updates traced"
    walls = [b2 - b1 for (_, b1), (_, b2) in itertools.pairwise(steps[1:])]
    overlap = sum(covered(episodes, a, b) for a, b in trains) / max(sum(b - a for a, b in trains), 1e-9)
    metrics = step_metrics(log)
    waits = [m["timing_s/gen"] for s, m in sorted(metrics.items()) if "timing_s/gen" in m and s > 1]
    stale = [m["toolgym/staleness/mean"] for m in metrics.values() if "toolgym/staleness/mean" in m]
    print(f"\n{mode}: {len(steps)} steps\n{step_table(metrics)}")
    return {
        "step_s": statistics.median(walls),
        "wait_s": statistics.median(waits) if waits else float("nan"),
        "overlap": overlap,
        "staleness": statistics.mean(stale) if stale else float("nan"),
        "timeline": timeline(episodes, trains, steps[1][0] - 2, steps[-1][1] + 1),
    }


@pytest.mark.parametrize("mode", MODES)
def test_sync_and_async_modes_on_long_tailed_tools(mode, tmp_path):
    """timing: one run per mode (module docstring); the table prints after the last."""
    changes = {
        "envs": [
            {"id": "toolgym.testing.probe:toolgym-debug/Probe-v0", "kwargs": {"tool_latency": LONG_TAIL}}
        ],
        "steps": TIMING_STEPS,
        "train_rows": 256,
    }
    config = mode_config(mode, tmp_path / f"{mode}.yaml", **changes)
    trace = tmp_path / "trace"
    log = train(config, tmp_path / mode, env=trace_env(trace))
    TIMING[mode] = summarize(mode, log, trace)
    if len(TIMING) == len(MODES):
        print_timing()


def print_timing() -> None:
    sync = TIMING["sync"]["step_s"]
    print(
        f"\nverl on 2 CPU cores, Probe-v0 with tool latencies {sorted(set(LONG_TAIL))} s (long tail), "
        f"{TIMING_STEPS} steps of 32 episodes; medians over the steps after the first"
    )
    print(f"{'mode':14}{'step s':>8}{'trainer wait s':>16}{'overlap':>9}{'staleness':>11}{'vs sync':>9}")
    for mode in MODES:
        t = TIMING[mode]
        print(
            f"{mode:14}{t['step_s']:>8.1f}{t['wait_s']:>16.1f}{t['overlap']:>9.0%}{t['staleness']:>11.2f}"
            f"{t['step_s'] / sync:>8.2f}x"
        )
    for mode in MODES:
        print(f"\n{mode} timeline (1 char = 1 s; T update, r rollout, B both, . neither):")
        strip = TIMING[mode]["timeline"]
        print("\n".join(strip[i : i + 100] for i in range(0, len(strip), 100)))


def seeded(seed: int) -> tuple[str, ...]:
    """The overrides that make a run of a learning config another seed's: the rows' order and vLLM's draws."""
    return (f"data.seed={seed}", f"actor_rollout_ref.rollout.seed={seed}")


@pytest.mark.parametrize(
    ("loop", "seed"), [("toolgym", 1), ("toolgym", 2), ("toolgym", 3), ("inverted-mask", 1)]
)
@pytest.mark.parametrize("mode", ["sync", "one_step_off", "fully_async"])
def test_the_modes_learn_on_every_seed_and_the_inverted_mask_does_not(mode, loop, seed, tmp_path):
    """learning: the reward per step of each mode over three seeds, with toolgym's loop, and the control
    (docs/training.md's table)."""
    target = INVERTED_MASK_AGENT_LOOP if loop == "inverted-mask" else None
    log = train(LEARN[mode], tmp_path / f"{mode}-{loop}-{seed}", target, overrides=seeded(seed))
    steps = step_metrics(log)
    print(f"\n{mode}, {loop} agent loop: {len(steps)} steps\n{step_table(steps)}")
    rewards = [steps[s]["critic/score/mean"] for s in sorted(steps)]
    curve = [round(r, 2) for r in rewards]
    print(f"mean reward per step, {mode}, {loop} agent loop, seed {seed}: {curve}")
    check_probe_curve(rewards, learns=loop == "toolgym")
