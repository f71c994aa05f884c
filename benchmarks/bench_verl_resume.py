"""A verl run killed after step 2 and started again with the same command resumes from step 2, and its step 3
is the uninterrupted run's step 3: the same rows, the same episodes, the same update.

Three real ``toolgym train`` runs (``toolgym.testing.verl.train_with_agent_loop``, greedy) of the tiny
model on a CPU (``examples/verl/tiny-cpu.yaml`` with 3 steps and a checkpoint after every step): one
uninterrupted; one killed (its whole process session) as soon as its step-2 checkpoint is on disk and
step 2's metrics are in its log; and that one again, the same command in the same run dir, which verl's
``resume_mode: auto`` resumes from the newest checkpoint (actor, optimizer, dataloader position). Sampling
is greedy and every row pins its env, task and seed, so with the same weights the episodes are the same
tokens: step 3's rollouts must be identical and its losses equal up to float noise. A resume that reloaded
the wrong step, lost the optimizer state or restarted the dataloader would differ.

Not in ``make test``: three verl starts, about 18 minutes on two cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from toolgym.testing.verl import GREEDY_AGENT_LOOP, end_session
from toolgym.trainers.verl_adapter.progress import step_metrics

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "verl" / "tiny-cpu.yaml"
TIMEOUT_S = 1800
#: what makes the three runs comparable: greedy sampling (``GreedyAgentLoop``), weights that move (an entropy
#: bonus, a large learning rate: the tiny model's rewards are all 0), a checkpoint after every step, rollouts
#: dumped
OVERRIDES = [
    "actor_rollout_ref.actor.entropy_coeff=0.01",
    "actor_rollout_ref.actor.optim.lr=0.01",
]
COMPARED = ("actor/entropy", "actor/grad_norm", "actor/pg_loss", "response_length/mean")


def _config(tmp_path: Path) -> Path:
    cfg = yaml.safe_load(EXAMPLE.read_text())
    cfg |= {"train_rows": 6, "steps": 3, "save_freq": 1}
    path = tmp_path / "resume.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _command(config: Path, out: Path) -> list[str]:
    rollouts = f"trainer.rollout_data_dir={out / 'rollouts'}"
    train = ["--config", str(config), "--out", str(out), "--agent-loop", GREEDY_AGENT_LOOP]
    return [sys.executable, "-m", "toolgym.testing.verl", *train, "--", *OVERRIDES, rollouts]


def _run(command: list[str], stop_after_checkpoint: int | None = None, out: Path | None = None) -> str:
    """Run ``toolgym train``; with ``stop_after_checkpoint``, kill its session once that step is over: its
    checkpoint recorded (verl writes ``latest_checkpointed_iteration.txt`` after the checkpoint) *and* its
    metrics printed. verl saves before it logs the step, so stopping at the checkpoint alone raced verl's
    own output on a loaded machine (the step's metrics were not yet in the log)."""
    log_path = Path(command[command.index("--out") + 1]) / f"train-{time.monotonic_ns()}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("w") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        tracker = out / "checkpoints" / "latest_checkpointed_iteration.txt" if out else None
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while proc.poll() is None:
                if time.monotonic() > deadline:
                    pytest.fail(f"toolgym train did not finish in {TIMEOUT_S}s: {log_path}")
                recorded = tracker.read_text().strip() if tracker and tracker.exists() else None
                step_over = recorded == str(stop_after_checkpoint) and (
                    stop_after_checkpoint in step_metrics(log_path.read_text())
                )
                if step_over:
                    break
                time.sleep(1)
        finally:
            end_session(proc.pid)
            proc.wait()
    text = log_path.read_text()
    if stop_after_checkpoint is None:
        assert proc.returncode == 0, f"toolgym train failed; the end of its log:\n{text[-6000:]}"
    return text


def _rows(out: Path, step: int) -> list[dict]:
    return [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]


def test_a_killed_run_resumes_where_it_stopped_and_its_next_step_is_the_uninterrupted_ones(tmp_path):
    config = _config(tmp_path)
    whole, resumed = tmp_path / "uninterrupted", tmp_path / "killed"

    whole_steps = step_metrics(_run(_command(config, whole)))
    assert sorted(whole_steps) == [1, 2, 3]

    first = _run(_command(config, resumed), stop_after_checkpoint=2, out=resumed)
    assert sorted(step_metrics(first))[:2] == [1, 2]
    assert 3 not in step_metrics(first) or not (resumed / "checkpoints" / "global_step_3").exists()

    again = _run(_command(config, resumed))
    again_steps = step_metrics(again)
    assert sorted(again_steps) == [3], f"the resumed run trained steps {sorted(again_steps)}, not only step 3"
    assert f"Resuming from {resumed / 'checkpoints' / 'global_step_2'}" in again  # verl's own line

    assert [r["input"] for r in _rows(resumed, 3)] == [r["input"] for r in _rows(whole, 3)], "other rows"
    assert [r["output"] for r in _rows(resumed, 3)] == [r["output"] for r in _rows(whole, 3)], (
        "other episodes"
    )
    assert whole_steps[3]["actor/grad_norm"] > 0 and whole_steps[3]["actor/entropy"] > 0  # a real update
    table = []
    for key in COMPARED:
        a, b = whole_steps[3][key], again_steps[3][key]
        table.append(f"{key:>24}: uninterrupted {a:.6g}  resumed {b:.6g}")
        assert b == pytest.approx(a, rel=1e-3, abs=1e-6), key
    print("\nstep 3, uninterrupted vs killed after step 2 and resumed\n" + "\n".join(table))
