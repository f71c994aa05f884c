"""The judge's pytest with and without the plugins installed beside it: rows and mined repositories get
them (their suites may need pytest-django, pytest-mock), the procedural world's repositories, plain suites
judged with toolgym's own interpreter, run without them."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.rewards.swe import FileChanges, run_tests
from toolgym.sandbox.shared import shared_test_sandbox
from toolgym.testing.swe import files_tar

TESTS = b"""import os

def test_without_plugins():
    assert os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD") == "1"

def test_with_plugins():
    assert "PYTEST_DISABLE_PLUGIN_AUTOLOAD" not in os.environ
"""
IDS = ["test_plugins.py::test_without_plugins", "test_plugins.py::test_with_plugins"]


def _archive() -> bytes:
    return files_tar({"test_plugins.py": TESTS})


@pytest.mark.parametrize(("autoload", "passing"), [(True, IDS[1]), (False, IDS[0])])
def test_the_judge_runs_pytest_with_the_installed_plugins_unless_told_not_to(autoload, passing):
    run = run_tests(
        shared_test_sandbox(),
        _archive(),
        FileChanges(),
        IDS,
        test_files={"test_plugins.py": TESTS},
        python=sys.executable,
        plugin_autoload=autoload,
    )
    assert run.error is None, run.output[-2000:]
    assert run.outcomes == {i: "passed" if i == passing else "failed" for i in IDS}, run.output[-2000:]


def test_the_procedural_worlds_judge_is_told_to_run_without_plugins():
    env = gym.make("toolgym/SWE-v0")
    env.reset(seed=0)
    assert env.unwrapped.verifier.options(env.unwrapped.task) == {"plugin_autoload": False}
    env.close()
