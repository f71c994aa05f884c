"""A SWE-bench-style repository and row made on the spot, for SWE-v0's tests, benchmarks and docs.

``sample_row(store)`` writes a git clone ``acme__calc`` under ``store`` whose history has a buggy base
commit and, after it, the fix with its test (the "future" a leak would show: ``git log --all`` must not),
plus an unrelated branch, a tag and a stash, and returns the SWE-bench row for the bug. Nothing is
downloaded. ``scale`` pads the repository with that many more modules (a realistic tree for timings).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

BUGGY = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = "from calc.ops import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
TESTS_AFTER = TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n"
TESTS_AFTER = TESTS_AFTER.replace("import mul", "import add, mul")
#: the same tests as a unittest.TestCase (``sample_row(style="unittest")``), as Django and older suites do
UNITTEST_TESTS = (
    "import unittest\n\nfrom calc.ops import mul\n\n\nclass OpsTest(unittest.TestCase):\n"
    "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n"
)
UNITTEST_TESTS_AFTER = (
    UNITTEST_TESTS.replace("import mul", "import add, mul")
    + "\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
)


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "dev",
        "GIT_AUTHOR_EMAIL": "dev@example.com",
        "GIT_COMMITTER_NAME": "dev",
        "GIT_COMMITTER_EMAIL": "dev@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    proc = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True, env=env)
    return proc.stdout.strip()


def sample_row(
    store: str | Path, scale: int = 0, requires: str | None = None, style: str = "pytest"
) -> dict[str, Any]:
    """Write the ``acme/calc`` clone under ``store`` (see the module docstring) and return its row.
    ``requires``: a module the package imports (a dependency the interpreter must have); ``style``:
    ``"pytest"`` (test functions) or ``"unittest"`` (a ``unittest.TestCase``, run by pytest)."""
    if style not in ("pytest", "unittest"):
        raise ValueError(f"style must be 'pytest' or 'unittest', not {style!r}")
    tests, tests_after = (TESTS, TESTS_AFTER) if style == "pytest" else (UNITTEST_TESTS, UNITTEST_TESTS_AFTER)
    repo = Path(store) / "acme__calc"
    (repo / "calc").mkdir(parents=True, exist_ok=True)
    (repo / "tests").mkdir(exist_ok=True)
    _git(repo, "init", "-q")
    _git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    (repo / "calc" / "__init__.py").write_text(
        '"""A tiny calculator."""\n' + (f"import {requires}\n" if requires else "")
    )
    (repo / "calc" / "ops.py").write_text(BUGGY)
    (repo / "tests" / "test_ops.py").write_text(tests)
    (repo / "pyproject.toml").write_text('[project]\nname = "calc"\nversion = "0.1"\n')
    for i in range(scale):
        sub = repo / "calc" / f"part{i // 100}"
        sub.mkdir(exist_ok=True)
        (sub / "__init__.py").write_text("")
        (sub / f"mod{i}.py").write_text(f'"""Module {i}."""\n\n\ndef value_{i}():\n    return {i}\n')
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "calc: first version")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "calc" / "ops.py").write_text(FIXED)
    (repo / "tests" / "test_ops.py").write_text(tests_after)
    patch = _git(repo, "diff", "--", "calc") + "\n"
    test_patch = _git(repo, "diff", "--", "tests") + "\n"
    _git(repo, "commit", "-qam", "fix add (the answer: must not leak)")
    _git(repo, "tag", "v0.2")
    _git(repo, "checkout", "-qb", "feature")
    (repo / "NOTES.md").write_text("future work\n")
    _git(repo, "add", "NOTES.md")
    _git(repo, "commit", "-qm", "a later branch")
    (repo / "NOTES.md").write_text("stashed\n")
    _git(repo, "stash", "-q")
    _git(repo, "checkout", "-q", "main")
    prefix = "" if style == "pytest" else "OpsTest::"
    return {
        "instance_id": "acme__calc-1",
        "repo": "acme/calc",
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "`calc.ops.add(2, 3)` returns -1; I expected 5.",
        "FAIL_TO_PASS": json.dumps([f"tests/test_ops.py::{prefix}test_add"]),
        "PASS_TO_PASS": json.dumps([f"tests/test_ops.py::{prefix}test_mul"]),
        "version": "0.1",
        "environment_setup_commit": base,
    }


def future_commits(store: str | Path) -> list[str]:
    """Every commit of the sample clone after its base (what no workspace may hold)."""
    repo = Path(store) / "acme__calc"
    return _git(repo, "rev-list", "--all", "--not", _git(repo, "rev-list", "--max-parents=0", "HEAD")).split()
