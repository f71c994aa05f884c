"""The examples in examples/ run as written and print what their docstrings promise.

Each runs as ``python examples/NAME.py`` in a subprocess (a custom env registered by one must not leak into
the registry other tests iterate), except the pass@k example, whose evaluation runs on the session's tiny
vLLM engine: a second in-process engine would cost ~40 s for nothing. The server example gets the session's
vLLM OpenAI server (tests/conftest.py) through ``--server``.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args], capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_play_by_hand():
    out = run_example("play_by_hand.py")
    calculator, python_right, python_wrong = out.split("--- ")[1:]
    assert "observation: '<output>\\n3581820\\n</output>'" in calculator
    assert "Error: invalid expression" in calculator  # a bad tool call is an observation
    assert "reward 1.0  passed True" in calculator
    assert "observation: '<output>\\nTrue\\n</output>'" in python_right  # the session kept the function
    assert "reward 1.0  passed True  details {'tests_passed': 7, 'tests_total': 7" in python_right
    assert "reward 0.0  passed False" in python_wrong and "'tests_passed': 0" in python_wrong


def test_custom_env_scores_the_correct_episode_1_and_the_wrong_one_0():
    lines = run_example("custom_env.py").splitlines()
    assert lines == [
        "correct episode: reward 1.0  details {'relative_error': 0.0}",
        "wrong episode: reward 0.0  details {'relative_error': 0.0355}",
    ]


def test_score_with_reward_server():
    out = run_example("score_with_reward_server.py")
    scores = re.findall(r"^(\w+) +score ([\d.]+) +passed (True|False)", out, re.MULTILINE)
    assert scores == [
        ("math", "1.00", "True"),
        ("math", "0.00", "False"),
        ("numeric", "1.00", "True"),
        ("f1", "0.50", "False"),
        ("code_tests", "1.00", "True"),
    ]
    assert "refused: " in out and "HTTP 422: unknown verification type 'maths'" in out
    assert "compute_score: {'score': 1.0, 'passed': True, 'error': ''}" in out


def test_rollout_against_vllms_openai_server(vllm_server):
    out = run_example("rollout_openai_server.py", "--server", vllm_server.base_url, "--episodes", "2")
    assert re.search(r"^toolgym/Calculator-v0 +4 ", out, re.MULTILINE)  # the summary row: 4 episodes
    episodes = re.findall(
        r"^(\S+) sample (\d): .* response (\d+) tokens \((\d+) sampled, (\d+) observation\)  error (\S+)$",
        out,
        re.MULTILINE,
    )
    assert sorted((group, sample) for group, sample, *_ in episodes) == [
        ("toolgym/Calculator-v0#0", "0"),
        ("toolgym/Calculator-v0#0", "1"),
        ("toolgym/Calculator-v0#1", "0"),
        ("toolgym/Calculator-v0#1", "1"),
    ]
    for *_, total, sampled, observed, error in episodes:
        assert error == "None" and int(sampled) > 0
        assert int(sampled) + int(observed) == int(total) <= 128  # the example's max_response_tokens


def test_evaluate_pass_at_k(engine, capsys):
    import runpy

    example = runpy.run_path(str(EXAMPLES / "evaluate_pass_at_k.py"), run_name="example")
    coro = example["evaluate_both"](engine.client, engine.renderer, "toolgym/Calculator-v0", 2, 2)
    model, oracle = engine.run(coro)
    assert (model.tasks, model.k, model.errors) == (2, 2, 0)
    assert [t.samples for t in model.per_task] == [2, 2]
    assert (oracle.pass_at_1, oracle.pass_at_k, oracle.errors) == (1.0, 1.0, 0)
    assert [t.task_id for t in oracle.per_task] == [t.task_id for t in model.per_task]
    out = capsys.readouterr().out
    assert "model: toolgym/Calculator-v0, 2 tasks x 2 samples" in out
    assert "oracle: toolgym/Calculator-v0, 2 tasks x 2 samples  pass@1 1.000  pass@2 1.000" in out


@pytest.mark.parametrize("index", ["examples/README.md", "docs/examples.md"])
def test_every_example_is_indexed(index):
    text = (ROOT / index).read_text()
    examples = sorted(
        p.name for p in EXAMPLES.iterdir() if (p.suffix == ".py" or p.is_dir()) and p.name[0] not in "._"
    )
    missing = [name for name in examples if name not in text]
    assert not missing, f"{index} does not mention {missing}"


def _oracle_rewards_are_1(out: str, episodes: int) -> bool:
    lines = [line for line in out.splitlines() if "reward=" in line]
    return len(lines) == episodes and all("reward=1.0" in line and "'passed': 1.0" in line for line in lines)


def test_the_skyrl_example_scores_the_oracle_1():
    """Each env's oracle, played through SkyRL-Gym's make/init/step."""
    out = run_example("skyrl_env.py", "--n", "2", "--action-format", "hermes")
    assert _oracle_rewards_are_1(out, 2), out


def test_the_verifiers_example_scores_the_oracle_1():
    """verifiers plays the env's oracle behind the OpenAI API, through its own rollout and rubric."""
    out = run_example("verifiers_env.py", "--n", "2")
    assert _oracle_rewards_are_1(out, 2), out


def test_the_openenv_example_plays_an_episode_to_reward_one(capsys):
    """Our server for an env, an episode played with OpenEnv's generic client (in process)."""
    import runpy

    main = runpy.run_path(str(EXAMPLES / "openenv_client.py"), run_name="example")["main"]
    assert main(["--env", "toolgym/Calculator-v0", "--seed", "2"]) == 1.0
    out = capsys.readouterr().out
    assert "[task calculator-" in out and "reward 1.0 (passed: True)" in out
