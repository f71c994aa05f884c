"""``toolgym rollout`` and ``toolgym eval`` end to end, and the pass@k arithmetic."""

import contextlib
import json
import os
import subprocess
import sys

import gymnasium as gym

from toolgym.core.types import Trajectory, Verdict
from toolgym.rollout import RolloutConfig, load_trajectories
from toolgym.rollout.evaluate import evaluate, score
from toolgym.rollout.keys import draw_task
from toolgym.testing.openai_scripted import scripted_completions_app
from toolgym.testing.scripted import ScriptedClient, oracle_policy
from toolgym.testing.servers import serve_in_thread


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


ENVS = ("toolgym/Calculator-v0", "toolgym/Search-v0")


def test_rollout_command_writes_trajectories_and_a_summary(renderer, tmp_path):
    """``toolgym rollout`` as a user runs it (a new process), against a server that answers each env's tasks
    with its oracle: the rewards are real, and the run ends with the summary table and the file it wrote.
    (The in-process engine's start-up and its quiet logs are ``toolgym demo``'s test: tests/test_cli.py.)"""
    tasks = {env_id: [draw_task(gym.make(env_id), seed) for seed in range(2)] for env_id in ENVS}
    policies = [oracle_policy(env_id, env_tasks) for env_id, env_tasks in tasks.items()]

    def policy(request_id, turn, prompt_text):
        for env_policy in policies:
            with contextlib.suppress(LookupError):
                return env_policy(request_id, turn, prompt_text)
        raise LookupError(f"no task of {ENVS} in the conversation of {request_id}")

    out = tmp_path / "r.jsonl"
    args = ["--episodes", "2", "--group-size", "2", "--out", str(out), "--max-response-tokens", "2048"]
    args += ["--max-tokens-per-turn", "128", "--no-progress"]
    with serve_in_thread(scripted_completions_app(ScriptedClient(renderer, policy))) as url:
        cmd = [sys.executable, "-m", "toolgym.cli", "rollout", "--env", ENVS[0], "--env", ENVS[1]]
        cmd += ["--model", "tiny", "--server", url, *args]
        env = os.environ | {"PYTHONUNBUFFERED": "1"}  # stdout in the order it was written
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after_table = ("\n" + proc.stdout).split("\nenv ", 1)[1].splitlines()
    assert after_table[0].split()[:3] == ["episodes", "reward", "success"], proc.stdout[-2000:]
    rows = {line.split()[0]: line.split() for line in after_table if line.startswith("toolgym/")}
    assert sorted(rows) == sorted(ENVS) and all(row[1:3] == ["4", "1.000"] for row in rows.values())
    assert after_table[-1] == "8 trajectories appended to " + str(out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 8 and {row["env_id"] for row in lines} == set(ENVS)
    assert all(row["reward"] == 1.0 and row["error"] is None for row in lines)
    assert all(len(row["response_ids"]) == len(row["response_mask"]) <= 2048 for row in lines)


def test_every_command_that_starts_an_engine_takes_verbose():
    """``--verbose`` leaves vLLM's log level alone; without it, WARNING unless the user set a level."""
    from toolgym.cli import _build_parser
    from toolgym.server.agent import _build_parser as agent_parser

    parser = _build_parser()
    assert parser.parse_args(["rollout", "--env", "E", "--model", "tiny", "--verbose"]).verbose
    assert not parser.parse_args(["eval", "--env", "E", "--model", "tiny"]).verbose
    assert parser.parse_args(["eval", "--env", "E", "--model", "tiny", "--verbose"]).verbose
    assert parser.parse_args(["demo", "--verbose"]).verbose
    assert agent_parser().parse_args(["--env", "E", "--model", "tiny", "--verbose"]).verbose
    code = (
        "import os, sys\n"
        "from toolgym.rollout.clients.vllm_inproc import quiet_engine_logs\n"
        "quiet_engine_logs(verbose=sys.argv[1] == 'verbose')\n"
        "print(os.environ.get('VLLM_LOGGING_LEVEL'), 'vllm' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "VLLM_LOGGING_LEVEL"}

    def level(mode, **extra):
        run = [sys.executable, "-c", code, mode]
        out = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env | extra)
        return out.stdout.split()

    assert level("quiet") == ["WARNING", "False"]  # set before vLLM is imported
    assert level("verbose") == ["None", "False"]
    assert level("quiet", VLLM_LOGGING_LEVEL="DEBUG") == ["DEBUG", "False"]


def test_rollout_command_explains_missing_model():
    proc = subprocess.run(
        [sys.executable, "-m", "toolgym.cli", "rollout", "--env", "toolgym/Calculator-v0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "--model" in proc.stderr
