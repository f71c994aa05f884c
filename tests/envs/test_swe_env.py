"""toolgym/SWE-v0 on SWE-bench-schema rows: a local clone played and judged (gold 1, nothing 0), rows from
every format, refusals at draw time with the reason, no leak from the future or the answer key, judges that
cannot run are errors, and the procedural world's seeded tasks pass their oracle and the check kit."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.envs.swe import swe_oracle
from toolgym.envs.swe_tasks import TaskRefused
from toolgym.testing.swe import future_commits, sample_row


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("swe-store")
    row = sample_row(root)
    (root / "rows.jsonl").write_text(json.dumps(row) + "\n")
    return root, row


def bash(command: str) -> ToolCall:
    return ToolCall(name="bash", arguments={"command": command})


def play(env, steps, **reset):
    """Play scripted steps (calls, then the answer); (reward, verdict, observations)."""
    env.reset(**(reset or {"seed": 0}))
    parser, observations = env.unwrapped.parser, []
    for step in steps:
        text = parser.format_answer(step) if isinstance(step, str) else parser.format_call(step)
        obs, reward, terminated, truncated, info = env.step(text)
        observations.append(obs)
        if terminated or truncated:
            return reward, info["verdict"], observations
    raise AssertionError("the script did not end the episode")


@pytest.fixture(scope="module")
def env(store):
    root, _ = store
    e = gym.make("toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root))
    yield e
    e.close()


def at_testbed(env) -> bool:
    """Whether this machine's sandbox shows the repository at /testbed (else: the session's own directory)."""
    paths = env.unwrapped.tools["bash"].workspace_paths()
    return not isinstance(paths, str) and paths[1] == "/testbed"


def test_a_rows_gold_patch_scores_one_and_doing_nothing_zero_without_an_error(env):
    obs, info = env.reset(seed=0)
    assert "returns -1; I expected 5" in obs
    if at_testbed(env):
        assert "<uploaded_files>\n/testbed\n</uploaded_files>" in obs
    else:
        assert "/testbed" not in obs and "in your working directory" in obs
    assert [t["function"]["name"] for t in info["tools"]] == ["bash", "str_replace_editor"]
    reward, verdict, _ = play(env, swe_oracle(env.unwrapped.task))
    assert (reward, verdict.error, verdict.details["tests_passed"]) == (1.0, None, "2/2")
    reward, verdict, _ = play(env, ["done"])
    assert (reward, verdict.error) == (0.0, None)
    assert verdict.details["fail_to_pass"] == {"tests/test_ops.py::test_add": "failed"}


def test_the_workspace_is_a_git_tree_at_the_base_commit_and_nothing_later(env, store):
    root, row = store
    script = (
        "pwd; git rev-parse HEAD; git log --all --oneline | wc -l; git for-each-ref | wc -l; "
        "git stash list | wc -l; git reflog 2>/dev/null | wc -l; "
        "git cat-file --batch-all-objects --batch-check | wc -l; git ls-tree -r HEAD | wc -l; "
        "grep -c test_add tests/test_ops.py; git status --short | wc -l"
    )
    env.reset(seed=0)
    out = env.step(env.unwrapped.parser.format_call(bash(script)))[0]
    lines = out.split("\n")[1:-2]
    pwd, head, commits, refs, stashes, reflog, objects, blobs, hidden_test, dirty = lines
    assert head == row["base_commit"]
    assert pwd == "/testbed" if at_testbed(env) else pwd.endswith("/testbed")  # (the session's own dir)
    assert (commits, refs, stashes, reflog, hidden_test, dirty) == ("1", "1", "0", "0", "0", "0")
    # every object in the repository is the base commit, its trees and its blobs: nothing else to dig out
    assert int(objects) == 1 + int(blobs) + 3  # the commit, its files, and the trees /, calc/, tests/
    futures = future_commits(root)
    assert len(futures) >= 3  # the fix, the branch, the stash: they exist in the store, not in the workspace
    check = "; ".join(f"git cat-file -e {sha} 2>/dev/null && echo LEAK {sha}" for sha in futures)
    out = env.step(env.unwrapped.parser.format_call(bash(check + f"; ls {root} 2>&1 | head -1")))[0]
    assert "LEAK" not in out, out
    assert "No such file or directory" in out or "Permission denied" in out, out  # the store is not visible


def test_rows_come_from_jsonl_parquet_a_list_and_a_dataset_with_lists_or_json_strings(store, tmp_path):
    import pyarrow as pa  # (a dependency of toolgym's own)
    import pyarrow.parquet as pq

    root, row = store
    listed = dict(
        row, FAIL_TO_PASS=json.loads(row["FAIL_TO_PASS"]), PASS_TO_PASS=json.loads(row["PASS_TO_PASS"])
    )
    pq.write_table(pa.Table.from_pylist([row]), tmp_path / "rows.parquet")
    for tasks in ([listed], str(tmp_path / "rows.parquet")):
        e = gym.make("toolgym/SWE-v0", tasks=tasks, repos=str(root), validate=False)
        e.reset(seed=0)
        task = e.unwrapped.task
        assert task.id == "acme__calc-1" and task.data["fail_to_pass"] == ["tests/test_ops.py::test_add"]
        assert task.data["version"] == "0.1" and task.data["kind"] == "swebench"
        e.close()


def test_the_datasets_library_s_rows_load_too(store):
    datasets = pytest.importorskip("datasets")
    root, row = store
    e = gym.make("toolgym/SWE-v0", tasks=datasets.Dataset.from_list([row]), repos=str(root), validate=False)
    e.reset(seed=0)
    assert e.unwrapped.task.data["pass_to_pass"] == ["tests/test_ops.py::test_mul"]
    e.close()


def test_rows_that_cannot_play_here_are_refused_at_draw_time_with_the_reason(store, caplog):
    root, row = store
    rows = [
        dict(row, instance_id="no-repo", repo="acme/absent"),
        dict(row, instance_id="no-commit", base_commit="0" * 40),
        dict(row, instance_id="django-style", FAIL_TO_PASS='["test_add (calc.tests.OpsTest)"]'),
        dict(row, instance_id="bad-gold", patch=row["patch"].replace("a + b", "a * b")),
        dict(row, instance_id="no-f2p", FAIL_TO_PASS="[]"),
        row,
    ]
    e = gym.make("toolgym/SWE-v0", tasks=rows, repos=str(root))
    source = e.unwrapped.tasks
    for task_id, why in [
        ("no-repo", "no git clone at"),
        ("no-commit", "is not in"),
        ("django-style", "not pytest node ids"),
        ("bad-gold", "gold patch does not pass here"),
        ("no-f2p", "no FAIL_TO_PASS"),
    ]:
        with pytest.raises(TaskRefused, match=why):
            source.get(task_id)
    for seed in range(4):  # a draw skips the refused rows
        e.reset(seed=seed)
        assert e.unwrapped.task.id == "acme__calc-1"
    assert set(source.refused) == {"no-repo", "no-commit", "django-style", "bad-gold", "no-f2p"}
    e.close()
    with pytest.raises(TaskRefused, match="every task"):
        gym.make("toolgym/SWE-v0", tasks=rows[:2], repos=str(root)).reset(seed=0)


def test_ids_that_name_no_test_of_the_repository_are_left_out_and_said(store):
    # SWE-bench's log parser kept pytest's progress marker "[100%]" as a PASS_TO_PASS id in two Verified rows
    # (pytest-5262, -7521), and an inner session's test in a file the repository does not have (pytest-7521's
    # test_capsysbinary.py::test_hello, written by its test in a temporary directory)
    root, row = store
    listed = ["tests/test_ops.py::test_mul", "[100%]", "test_capsysbinary.py::test_hello"]
    marked = dict(row, instance_id="marked", PASS_TO_PASS=json.dumps(listed))
    e = gym.make("toolgym/SWE-v0", tasks=[marked], repos=str(root))
    e.reset(seed=0)
    data = e.unwrapped.task.data
    assert data["pass_to_pass"] == ["tests/test_ops.py::test_mul"]
    assert data["not_test_ids"] == {"pass_to_pass": ["[100%]", "test_capsysbinary.py::test_hello"]}
    reward, verdict, _ = play(e, swe_oracle(e.unwrapped.task))
    assert (reward, verdict.error) == (1.0, None), verdict
    e.close()


def test_partial_credit_with_reward_fraction(store):
    root, _ = store
    e = gym.make("toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root), reward="fraction")
    reward, verdict, _ = play(e, ["done"])
    assert (reward, verdict.passed) == (0.5, False)
    e.close()


def test_a_judge_that_cannot_run_is_an_error_never_a_zero(store, bare_venv):
    root, _ = store
    # an interpreter without pytest: the judge cannot run its tests
    rows = str(root / "rows.jsonl")
    e = gym.make("toolgym/SWE-v0", tasks=rows, repos=str(root), validate=False, python=bare_venv)
    reward, verdict, _ = play(e, ["done"])
    assert reward == 0.0 and verdict.error and "pytest could not start" in verdict.error
    e.close()
    slow = gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root), validate=False, judge_timeout=1
    )
    reward, verdict, _ = play(slow, [bash("printf 'import time\\ntime.sleep(30)\\n' >> calc/ops.py"), "done"])
    assert verdict.error and "longer than 1 s" in verdict.error
    slow.close()


def test_a_hung_test_fails_with_its_time_limit_and_is_not_an_error(store):
    root, _ = store
    e = gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root), validate=False, test_timeout=2
    )
    hang = "def add(a, b):\n    while True:\n        pass\n"
    reward, verdict, _ = play(e, [bash(f"printf '{hang}' > calc/ops.py"), "done"])
    assert (reward, verdict.error) == (0.0, None)
    assert verdict.details["fail_to_pass"]["tests/test_ops.py::test_add"] in ("timed out", "not collected")
    e.close()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_the_procedural_worlds_oracle_scores_one_and_nothing_zero(level):
    e = gym.make("toolgym/SWE-v0", level=level)
    for seed in (0, 1):
        e.reset(seed=seed)
        task = e.unwrapped.task
        assert task.id.startswith(f"swe-L{level}/") and task.data["fail_to_pass"]
        reward, verdict, _ = play(e, swe_oracle(task), seed=seed)
        assert (reward, verdict.error) == (1.0, None), verdict
        reward, verdict, _ = play(e, ["done"], seed=seed)
        assert (reward, verdict.error) == (0.0, None), verdict
    e.close()


@pytest.mark.core_suite_only
def test_the_check_kit_passes_swe_v0():
    """The core suites' check of SWE-v0 with the kit (they do not run tests/testing); the main suite's is
    tests/testing/test_builtin_envs_pass_the_kit.py, every check with the tiny model's template."""
    from toolgym.testing import check_toolenv

    report = check_toolenv("toolgym/SWE-v0", episodes=2, tokenizer=None)
    assert report.ok, report.summary()


def make_venv() -> Path:
    """An empty venv outside /tmp (each sandbox child has a /tmp of its own), readable by sandbox uids."""
    venv = Path(tempfile.mkdtemp(prefix="toolgym-swe-venv-", dir="/var/tmp"))
    venv.chmod(0o755)  # (mkdtemp's 0700 would keep the sandbox's uids out, as a closed /root does)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    return venv


@pytest.fixture
def bare_venv():
    venv = make_venv()
    yield str(venv)
    shutil.rmtree(venv, ignore_errors=True)


@pytest.fixture
def venv_with_a_dependency():
    """A venv outside /tmp (each sandbox child has a /tmp of its own) that sees this interpreter's packages
    (pytest among them) plus ``calcdeps``, a module only it has."""
    venv = make_venv()
    try:
        where = "import sysconfig; print(sysconfig.get_path('purelib'))"
        site = subprocess.run(
            [venv / "bin" / "python", "-c", where], check=True, capture_output=True, text=True
        )
        site_dir = Path(site.stdout.strip())
        ours = [p for p in sys.path if p.endswith("site-packages")]
        (site_dir / "toolgym-test.pth").write_text("\n".join(ours) + "\n")
        (site_dir / "calcdeps.py").write_text("VERSION = 1\n")
        yield venv
    finally:
        shutil.rmtree(venv, ignore_errors=True)


def test_a_repository_runs_with_its_own_interpreter_and_is_refused_without_it(
    tmp_path, venv_with_a_dependency
):
    root = tmp_path / "store"
    row = sample_row(root, requires="calcdeps")
    plain = gym.make("toolgym/SWE-v0", tasks=[row], repos=str(root))
    with pytest.raises(TaskRefused, match=r"gold patch does not pass here.*may lack"):
        plain.reset(seed=0)
    plain.close()
    venv = venv_with_a_dependency
    e = gym.make(
        "toolgym/SWE-v0", tasks=[row], repos=str(root), python={"acme/calc": str(venv), "*": sys.executable}
    )
    try:
        reward, verdict, obs = play(e, [bash("python -c 'import calcdeps; print(calcdeps.VERSION)'"), "done"])
        assert obs[0].startswith("<output>\n1\n") and (reward, verdict.error) == (0.0, None)
        reward, verdict, _ = play(e, swe_oracle(e.unwrapped.task))
        assert (reward, verdict.error) == (1.0, None), verdict
    finally:
        e.close()
    with pytest.raises(FileNotFoundError, match="no interpreter there"):
        gym.make("toolgym/SWE-v0", python=str(tmp_path / "nothing"))
    with pytest.raises(FileNotFoundError, match="it did not run"):
        gym.make("toolgym/SWE-v0", python="/usr/bin/false")
