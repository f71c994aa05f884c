"""``toolgym swe mine``: a small repository written here becomes SWE-v0 tasks that play (gold 1, nothing 0),
whose buggy states live in the store's clone and not in the repository, and a suite that fails clean is
refused, naming the failing tests."""

from __future__ import annotations

import json
import subprocess
import textwrap

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.cli import main
from toolgym.envs.swe import swe_oracle

SOURCE = '''\
"""Shapes and their areas."""


def rect(w, h):
    """The area of a w x h rectangle."""
    if w < 0 or h < 0:
        raise ValueError("negative side")
    return w * h


def triangle(base, height):
    return base * height / 2


def total(shapes):
    """The summed area of (kind, a, b) shapes."""
    out = 0
    for kind, a, b in shapes:
        out += rect(a, b) if kind == "rect" else triangle(a, b)
    return out
'''
TESTS = """\
import pytest

from shapes.area import rect, total, triangle


def test_rect():
    assert rect(2, 3) == 6


def test_rect_negative():
    with pytest.raises(ValueError):
        rect(-1, 2)


def test_triangle():
    assert triangle(4, 3) == 6


def test_total():
    assert total([("rect", 2, 2), ("tri", 2, 2)]) == 6
"""


def write_repo(root, tests=TESTS, git=True):
    (root / "shapes").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "shapes" / "__init__.py").write_text("")
    (root / "shapes" / "area.py").write_text(SOURCE)
    (root / "tests" / "test_area.py").write_text(tests)
    (root / "tests" / "test_other.py").write_text(
        "def test_unrelated():\n    assert sorted([2, 1]) == [1, 2]\n"
    )
    if git:
        env = {
            "GIT_AUTHOR_NAME": "a",
            "GIT_AUTHOR_EMAIL": "a@b",
            "GIT_COMMITTER_NAME": "a",
            "GIT_COMMITTER_EMAIL": "a@b",
        }
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "shapes"]):
            subprocess.run(
                ["git", *args],
                cwd=root,
                check=True,
                capture_output=True,
                env={"PATH": "/usr/bin:/bin", **env},
            )
        subprocess.run(
            ["git", "remote", "add", "origin", "https://github.com/geo/shapes.git"], cwd=root, check=True
        )


def test_a_mined_repository_s_tasks_play_and_its_bugs_live_in_the_store(tmp_path, capsys):
    repo = tmp_path / "shapes-src"
    write_repo(repo)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    out = tmp_path / "mined" / "rows.jsonl"
    assert main(["swe", "mine", str(repo), "--out", str(out), "--max-tasks", "2", "--seed", "1"]) == 0
    printed = capsys.readouterr()
    assert (
        "2 tasks written" in printed.out
        and "5 passing tests" in printed.out
        and "refs/toolgym/mined" in printed.out
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["repo"] == "geo/shapes" for r in rows)
    clone = tmp_path / "mined" / "repos" / "geo__shapes"
    refs = subprocess.run(
        ["git", "for-each-ref", "refs/toolgym"], cwd=clone, capture_output=True, text=True
    ).stdout
    assert len(refs.splitlines()) == 2
    # the user's repository is untouched: no new commit, ref or file
    after = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout
    status = subprocess.run(["git", "status", "--short"], cwd=repo, capture_output=True, text=True).stdout
    assert (after, status) == (head, "")
    for row in rows:
        f2p, p2p = json.loads(row["FAIL_TO_PASS"]), json.loads(row["PASS_TO_PASS"])
        assert f2p and set(f2p).isdisjoint(p2p)
        # PASS_TO_PASS is the whole suite's passing rest, a test file that never calls the function included
        assert "tests/test_other.py::test_unrelated" in p2p and len(f2p) + len(p2p) == 5
        assert row["mutation"].split(" in ")[0] not in row["problem_statement"]  # the fix is not named
    env = gym.make("toolgym/SWE-v0", tasks=str(out), repos=str(clone.parent))
    for seed in range(2):
        env.reset(seed=seed)
        task = env.unwrapped.task
        steps, parser = list(swe_oracle(task)), env.unwrapped.parser
        for options in (steps, ["done"]):
            env.reset(options={"task": task})
            for step in options:
                text = parser.format_answer(step) if isinstance(step, str) else parser.format_call(step)
                _, reward, terminated, _, info = env.step(text)
            assert terminated and info["verdict"].error is None
            assert reward == (1.0 if options is steps else 0.0), info["verdict"]
    env.close()


def test_a_directory_without_git_is_mined_into_a_repository_of_its_own(tmp_path):
    src = tmp_path / "plain"
    write_repo(src, git=False)
    out = tmp_path / "rows.jsonl"
    assert (
        main(["swe", "mine", str(src), "--out", str(out), "--max-tasks", "1", "--repos", str(tmp_path / "s")])
        == 0
    )
    row = json.loads(out.read_text())
    assert row["repo"] == "local/plain" and (tmp_path / "s" / "local__plain" / ".git").is_dir()


def test_a_suite_that_does_not_pass_clean_is_refused_naming_the_failing_tests(tmp_path, capsys):
    repo = tmp_path / "broken"
    write_repo(repo, tests=TESTS.replace("== 6\n\n\ndef test_total", "== 7\n\n\ndef test_total"))
    code = main(["swe", "mine", str(repo), "--out", str(tmp_path / "rows.jsonl")])
    err = capsys.readouterr().err
    assert code == 1 and "does not pass clean" in err and "tests/test_area.py::test_triangle" in err
    assert not (tmp_path / "rows.jsonl").exists()


@pytest.mark.parametrize("missing", ["dir", "tests"])
def test_nothing_to_mine_is_a_clear_error(tmp_path, capsys, missing):
    target = tmp_path / "nothing"
    if missing == "tests":
        (target / "pkg").mkdir(parents=True)
        (target / "pkg" / "m.py").write_text(textwrap.dedent("def f():\n    return 1\n"))
    code = main(["swe", "mine", str(target), "--out", str(tmp_path / "rows.jsonl")])
    err = capsys.readouterr().err
    assert code != 0 and ("no such directory" in err if missing == "dir" else "no test files" in err)
