"""The kit's ways in: ``toolgym check`` (a table per env, exit 1 on a failure), the one-line pytest entry
``env_check_tests`` run as an env author runs it, and the example plugin package installed in the venv."""

import json
import os
import re
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points

import gymnasium as gym
import pytest

import toolgym
from toolgym.cli import main
from toolgym.core.registry import LOADED_PLUGINS
from toolgym.testing import CHECKS, env_check_tests

BROKEN = "kittest/PaysAnyway-v0"


class PaysAnyway(gym.Wrapper):
    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, 1.0 if terminated else reward, terminated, truncated, info


def make_paying_calculator(**kwargs):
    from toolgym.envs.calculator import make_calculator_env

    return PaysAnyway(make_calculator_env(**kwargs))


@pytest.fixture
def broken_env_id():
    """Registered with gymnasium only (not toolgym's catalogue, which other tests enumerate)."""
    gym.register(id=BROKEN, entry_point=make_paying_calculator)
    yield BROKEN
    gym.registry.pop(BROKEN)


def test_check_all_passes_for_every_registered_env(capsys, scripted_judge_env):
    """The acceptance line a user runs, ``toolgym check --all`` (through the command's own ``main``, in this
    process: the interpreter's start-up is not what it checks): built-in envs and installed plugins, every
    format, the tiny model's chat template; a judged env (toolgym/Report-v0) against a scripted judge
    (``TOOLGYM_JUDGE_URL``). Two episodes per check, not the default eight: every check of every env with the
    default eight episodes runs in tests/testing/test_builtin_envs_pass_the_kit.py, and this one is about the
    command (its discovery, plugins, tables and exit code). (87 s at eight here, 77 s at two: SWE-v0's 55
    judge runs, about 45 s, do not shrink with the episodes.)"""
    code = main(["check", "--all", "--episodes", "2"])
    out = capsys.readouterr()
    failing = [part for part in out.out.split("\n== ") if ": passed (" not in part.split("\n", 1)[0]]
    assert code == 0, "\n== ".join(failing)[-6000:] + out.err[-3000:]
    for env_id in toolgym.ENVS:
        assert f"== {env_id}: passed (xml, hermes, json, markdown, react;" in out.out, env_id
    assert f"{len(toolgym.ENVS)} of {len(toolgym.ENVS)} env(s) passed every check" in out.out
    assert "failed" not in out.out and "FAILED" not in out.out


def test_check_prints_a_passing_table_per_env(capsys):
    assert main(["check", "toolgym/Calculator-v0", "--format", "xml", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^== toolgym/Calculator-v0: passed \(xml; [\d.]+ s\)$", out, re.M), out
    for name in CHECKS:
        assert re.search(rf"^{name}\s+passed\s+\S", out, re.M), name
    assert out.rstrip().endswith("1 of 1 env(s) passed every check")


def test_check_exits_1_and_shows_the_failure_with_its_example(capsys, broken_env_id):
    argv = ["check", broken_env_id, "toolgym/Calculator-v0", "--format", "xml", "--episodes", "2"]
    assert main([*argv, "--tokenizer", "none"]) == 1
    out = capsys.readouterr().out
    assert f"== {broken_env_id}: FAILED" in out and "1 of 2 env(s) passed every check" in out
    assert re.search(
        r"^rewards\s+failed\s+\[xml\] a wrong answer .* got reward 1\.0; the minimum is 0\.0", out, re.M
    )
    assert re.search(r"^tokens\s+n/a\s+no tokenizer given", out, re.M)
    assert "  example: <answer>" in out


def test_check_json_and_usage_errors(capsys):
    assert main(["check", "toolgym/Search-v0", "--format", "json", "--episodes", "1", "--json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["ok"] is True and report["formats"] == ["json"] and report["timing"]["all"]["n"] > 0
    assert [c["name"] for c in report["checks"]] == list(CHECKS)
    assert main(["check"]) == 2
    assert "give env ids to check, or --all" in capsys.readouterr().err
    assert main(["check", "toolgym/Nope-v0"]) == 2


def test_the_pytest_entry_is_one_line_and_a_failing_check_fails_its_own_test(tmp_path):
    test_file = tmp_path / "test_my_envs.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            from toolgym.envs.calculator import make_calculator_env
            from toolgym.testing import env_check_tests

            class PaysAnyway(gym.Wrapper):
                def step(self, action):
                    obs, reward, terminated, truncated, info = self.env.step(action)
                    return obs, 1.0 if terminated else reward, terminated, truncated, info

            def paying_calculator(action_format="xml"):
                return PaysAnyway(make_calculator_env(action_format=action_format))

            test_sound = env_check_tests("toolgym/Calc*", formats=["xml"], episodes=2)
            test_broken = env_check_tests(paying_calculator, formats=["xml"], episodes=2)
            """
        )
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path)]
    out = subprocess.run(
        [*command, test_file.name], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"1 failed, {2 * len(CHECKS) - 1} passed" in out.stdout, out.stdout
    assert "FAILED test_my_envs.py::test_broken[paying_calculator-rewards]" in out.stdout
    assert "got reward 1.0; the minimum is 0.0" in out.stdout


def test_a_pattern_that_matches_nothing_is_an_error_at_collection():
    with pytest.raises(ValueError, match="no registered env matches 'nosuchpkg/\\*'"):
        env_check_tests("nosuchpkg/*")


def test_the_example_plugin_package_is_installed_and_read_by_import_toolgym():
    """``make install`` installs examples/plugin-package; pytest runs its kit test (testpaths). Its catalogue
    table is read by ``import toolgym`` (the entry point), its env module imported when the env is made."""
    assert "letters" in {ep.name for ep in entry_points(group="toolgym.catalogue")}, (
        "examples/plugin-package is not installed in this environment (or installed from an older "
        "pyproject.toml, under the toolgym.envs group): run `make install`"
    )
    assert "toolgym.catalogue:letters" in LOADED_PLUGINS
    assert "letters/CountLetters-v0" in toolgym.ENVS and "count_letter" in toolgym.TOOLS
    assert toolgym.ENVS["letters/CountLetters-v0"].oracle is not None
    code = (
        "import sys, gymnasium as gym, toolgym\n"
        "print('toolgym_letters.envs' in sys.modules)\n"
        "gym.make('letters/CountLetters-v0')\n"
        "print('toolgym_letters.envs' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_a_judged_env_is_checked_against_the_scripted_judge_when_no_endpoint_is_set(capsys, monkeypatch):
    """On a fresh install (no judge endpoint), ``toolgym check`` passes toolgym/Report-v0 against toolgym's
    scripted judge and says so, instead of failing its rewards check on error verdicts."""
    monkeypatch.delenv("TOOLGYM_JUDGE_URL", raising=False)
    monkeypatch.delenv("TOOLGYM_JUDGE_MODEL", raising=False)
    assert main(["check", "toolgym/Report-v0", "--format", "xml", "--episodes", "2"]) == 0
    out = capsys.readouterr().out
    assert "== toolgym/Report-v0: passed (xml;" in out, out[-3000:]
    assert "no judge endpoint is set (TOOLGYM_JUDGE_URL): judged by toolgym's scripted judge" in out
    assert "TOOLGYM_JUDGE_URL" not in os.environ  # put back as it was
