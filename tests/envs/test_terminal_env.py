"""toolgym/Terminal-v0: seeded procedural shell tasks whose oracle scores 1.0 at every level and kind, a
verifier that judges the final workspace (never the model's claims), and Harbor-layout tasks from disk run
with their own test script, which the agent's commands cannot write the reward of."""

from __future__ import annotations

import hashlib
import json
import textwrap
from pathlib import Path

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.envs.terminal_harbor import HarborTaskRefused, harbor_source, load_harbor_task
from toolgym.envs.terminal_tasks import KINDS, LEVELS, generate_terminal_task
from toolgym.testing.scripted import play_script


def _play(env, steps, seed=0, task=None):
    env.reset(seed=seed, options={"task": task} if task else None)
    parser = env.unwrapped.parser
    observations = []
    info: dict = {}
    for step in steps:
        text = parser.format_call(step) if isinstance(step, ToolCall) else parser.format_answer(step)
        obs, reward, _, _, info = env.step(text)
        observations.append(obs)
    return reward, info["verdict"], observations


def bash(command: str) -> ToolCall:
    return ToolCall(name="bash", arguments={"command": command})


def test_same_seed_same_workspace_and_instruction_on_any_machine():
    task = generate_terminal_task(0, level=2)
    again = generate_terminal_task(0, level=2)
    assert task == again
    blob = json.dumps([task.prompt, task.data], sort_keys=True).encode()
    # pinned: a change here is a change of the task set (no set order, hash() or global RNG in it)
    assert hashlib.sha256(blob).hexdigest()[:16] == PINNED_L2_SEED0
    assert len({generate_terminal_task(s, level=1).prompt for s in range(20)}) == 20


PINNED_L2_SEED0 = "18f47f46cfc29399"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_oracle_scores_one_and_doing_nothing_scores_zero(kind, level):
    env = gym.make("toolgym/Terminal-v0", level=level, kinds=kind)
    try:
        for seed in range(2):
            env.reset(seed=seed)
            task = env.unwrapped.task
            assert task.data["kind"] == kind
            good = play_script(
                env, [*map(bash, task.data["solution"]), str(task.answer)], options={"task": task}
            )
            assert good.reward == 1.0 and good.verdict.passed and good.tool_errors == 0, good.verdict
            idle = _play(env, [bash("ls -R"), str(task.answer)], task=task)
            if any(c["kind"] != "answer" for c in task.data["checks"]):  # the work is judged, not the claim
                assert idle[0] == 0.0 and idle[1].error is None and idle[1].details["failed"]
    finally:
        env.close()


def test_half_done_work_fails_with_the_reason():
    env = gym.make("toolgym/Terminal-v0", level=2, kinds="permissions")
    env.reset(seed=1)
    secret = next(c["path"] for c in env.unwrapped.task.data["checks"] if c.get("expected") == 0o600)
    reward, verdict, _ = _play(env, [bash("chmod +x bin/*.sh"), "done"], task=env.unwrapped.task)
    assert reward == 0.0 and verdict.details["failed"] == [f"{secret} has mode 644"]
    env.close()


def test_files_persist_within_an_episode_and_start_fresh_in_the_next():
    env = gym.make("toolgym/Terminal-v0", kinds="csv_total")
    _, _, obs = _play(env, [bash("rm data/*.csv; echo mine > extra"), bash("ls data; cat extra")])
    assert obs[1] == "<output>\nNOTES.txt\nmine\n[exit code 0]\n</output>"
    _, _, obs = _play(env, [bash("ls data/*.csv | wc -l; ls extra")])
    assert obs[0].startswith("<output>\nError: 1\nls: cannot access 'extra': No such file")
    env.close()


def test_a_lost_workspace_is_a_verifier_error_not_a_zero():
    env = gym.make("toolgym/Terminal-v0", kinds="todo_files")
    env.reset(seed=0)
    task = env.unwrapped.task
    for command in task.data["solution"]:
        env.step(env.unwrapped.parser.format_call(bash(command)))
    env.unwrapped.tools["bash"]._session.evict("test: the fork server died", infra=True)
    _, reward, terminated, _, info = env.step(env.unwrapped.parser.format_answer(str(task.answer)))
    assert terminated and reward == 0.0 and "lost" in info["verdict"].error
    assert not env.unwrapped.trajectory.trainable
    env.close()


def test_a_workspace_too_large_to_judge_is_the_models_failure_not_an_error():
    env = gym.make("toolgym/Terminal-v0", kinds="log_count")
    env.reset(seed=0)
    task = env.unwrapped.task
    reward, verdict, _ = _play(env, [bash("head -c 20M /dev/zero > big"), str(task.answer)], task=task)
    assert reward == 0.0 and verdict.error is None and "more than" in verdict.details["failed"][0]
    assert env.unwrapped.trajectory.trainable
    env.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="level"):
        gym.make("toolgym/Terminal-v0", level=4)
    with pytest.raises(ValueError, match="unknown task kinds"):
        gym.make("toolgym/Terminal-v0", kinds="nope")


# ------------------------------------------------------------------------------------------- Harbor


def harbor_task(
    root: Path, name: str = "count-words", dockerfile: str | None = None, test: str | None = None
):
    task = root / name
    (task / "environment" / "data").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "solution").mkdir()
    (task / "instruction.md").write_text("Count the words of /app/data/words.txt into /app/count.txt.\n")
    (task / "task.toml").write_text(
        'version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 600.0\n'
    )
    (task / "environment" / "Dockerfile").write_text(
        dockerfile
        or "FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y bash grep \\\n"
        " && rm -rf /var/lib/apt\n"
        "WORKDIR /app\nCOPY data /app/data\nCOPY run.sh ./\n"
    )
    (task / "environment" / "data" / "words.txt").write_text("one two three\nfour five\n")
    (task / "environment" / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (task / "tests" / "test.sh").write_text(
        test
        or textwrap.dedent(
            """\
            #!/bin/bash
            mkdir -p /logs/verifier
            if [ "$(cat /app/count.txt)" = "5" ] && [ -x /app/run.sh ] && [ "$(pwd)" = /app ]; then
              echo 1 > /logs/verifier/reward.txt
            else
              echo 0 > /logs/verifier/reward.txt
            fi
            """
        )
    )
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nwc -w < /app/data/words.txt > /app/count.txt\n")
    return task


def test_a_harbor_task_runs_with_its_own_test_script(tmp_path):
    root = harbor_task(tmp_path)
    task = load_harbor_task(root)
    assert task.prompt.startswith("Count the words") and sorted(task.data["files"]) == [
        "data/words.txt",
        "run.sh",
    ]
    assert task.data["harbor"]["verifier_timeout"] == 60.0
    env = gym.make("toolgym/Terminal-v0", tasks=str(root))
    try:
        reward, verdict, obs = _play(
            env, [bash("chmod +x run.sh; pwd; ls"), bash(task.data["solution"][0]), "done"]
        )
        assert obs[0].startswith("<output>\n/app\ndata\nrun.sh\n") and reward == 1.0 and verdict.error is None
        # writing the reward file from the agent's shell changes nothing: the test runs in a fresh child
        reward, verdict, _ = _play(
            env,
            [
                bash("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt; echo 9 > count.txt"),
                "done",
            ],
        )
        assert reward == 0.0 and verdict.error is None
        # the workspace's modes reach the test: run.sh not made executable fails it
        reward, _, _ = _play(env, [bash(task.data["solution"][0]), "done"])
        assert reward == 0.0
    finally:
        env.close()


def test_harbors_hello_world_scores_a_do_nothing_episode_zero_without_an_error(tmp_path):
    """Harbor's own hello-world example: no environment/ folder, and a test that writes 0 unless
    /app/hello.txt holds "Hello, world!". An episode that runs no command is the task's 0 (the workspace
    exists from the start), not a verifier error that would keep a do-nothing policy out of training."""
    root = tmp_path / "hello-world"
    (root / "tests").mkdir(parents=True)
    (root / "solution").mkdir()
    (root / "instruction.md").write_text(
        'Create a file called hello.txt with "Hello, world!" as the content.\n'
    )
    (root / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        'if [ "$(cat /app/hello.txt 2>/dev/null)" = "Hello, world!" ]; '
        "then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
    )
    (root / "solution" / "solve.sh").write_text("#!/bin/bash\necho 'Hello, world!' > hello.txt\n")
    env = gym.make("toolgym/Terminal-v0", tasks=str(root))
    try:
        reward, verdict, _ = _play(env, ["done"])
        assert (reward, verdict.error) == (0.0, None)
        reward, verdict, _ = _play(env, [bash("echo 'Hello, world!' > hello.txt"), "done"])
        assert (reward, verdict.error) == (1.0, None)
    finally:
        env.close()


def test_a_test_script_that_writes_no_reward_is_a_verifier_error(tmp_path):
    root = harbor_task(tmp_path, test="#!/bin/bash\ntrue\n")
    env = gym.make("toolgym/Terminal-v0", tasks=str(root))
    reward, verdict, _ = _play(env, ["done"])
    assert reward == 0.0 and "wrote no" in verdict.error
    env.close()


@pytest.mark.parametrize(
    ("dockerfile", "test", "why"),
    [
        (
            "FROM x\nRUN apt-get install -y toolgym-no-such-tool\nWORKDIR /app\n",
            None,
            "which this system lacks",
        ),
        ("FROM x\nRUN pip install toolgym-no-such-package==1.0\nWORKDIR /app\n", None, "Python packages"),
        ("FROM x\nRUN make all\nWORKDIR /app\n", None, "not replayed"),
        ("FROM x\nWORKDIR /srv\n", None, "only /app"),
        ("FROM x\nWORKDIR /app\nCOPY ../secret /app/\n", None, "not a file of environment"),
        (
            "FROM x\nWORKDIR /app\n",
            "#!/bin/bash\ncurl -LsSf https://astral.sh/uv/install.sh | sh\n",
            "no network",
        ),
    ],
)
def test_a_task_the_system_cannot_run_is_refused_at_load_with_the_reason(tmp_path, dockerfile, test, why):
    root = harbor_task(tmp_path, dockerfile=dockerfile, test=test)
    with pytest.raises(HarborTaskRefused, match=why):
        load_harbor_task(root)


def test_a_folder_of_tasks_leaves_the_refused_out(tmp_path):
    harbor_task(tmp_path, "good")
    harbor_task(tmp_path, "bad", dockerfile="FROM x\nRUN apt-get install -y toolgym-no-such-tool\n")
    source = harbor_source(tmp_path)
    assert [t.id for t in source.tasks] == ["harbor/good"] and "toolgym-no-such-tool" in source.refused["bad"]
    with pytest.raises(HarborTaskRefused, match="no usable Harbor task"):
        harbor_source(harbor_task(tmp_path / "only", "bad", dockerfile="FROM x\nRUN make\n").parent)
