"""Test runners beyond pytest: Django's ``tests/runtests.py`` and SymPy's ``bin/test``, read from the row's
own test command (``toolgym.swe.runners``) and played by the judge behind the seal (``toolgym.sandbox.
judge_driver``), on repositories the tests write (``sample_row(style=...)``: Django's and SymPy's layouts).

A pass needs the seal's evidence that the test's own function ran and returned, whatever the runner: a
package that prints ``test_add ... ok``, swallows the failures in unittest's results, rewrites unittest's
``TestCase.run`` or SymPy-style decorators scores 0.
"""

from __future__ import annotations

import base64
import json

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.rewards.swe import _outcomes
from toolgym.swe.runners import (
    command_of,
    directives,
    eval_script_command,
    judge_options_for,
    row_command,
    split_command,
)
from toolgym.testing.swe import eval_script, play, sample_row

DJANGO_CMD = "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 queries.tests"
DJANGO_PATCH = (
    "diff --git a/tests/queries/tests.py b/tests/queries/tests.py\n--- a/x\n+++ b/x\n"
    "diff --git a/tests/queries/models.py b/tests/queries/models.py\n--- a/x\n+++ b/x\n"
    "diff --git a/tests/queries/fixtures/data.json b/tests/queries/fixtures/data.json\n"
)


def test_the_command_between_the_eval_scripts_markers():
    row = {"eval_script": eval_script(DJANGO_CMD), "FAIL_TO_PASS": '["test_x (queries.tests.ExcludeTests)"]'}
    assert eval_script_command(row["eval_script"]) == DJANGO_CMD
    command = command_of(row)
    assert (command.kind, command.program, command.source) == ("unittest", "tests/runtests.py", "eval_script")
    assert command.args == ("--verbosity", "2", "--settings=test_sqlite", "--parallel", "1", "queries.tests")
    assert command.id_rule == "forms"
    # the label's module, its package, and where the listed id's class lies: the files the seal accepts
    assert {"tests/queries/tests.py", "tests/queries/__init__.py"} <= set(command.files)
    assert eval_script_command("echo no markers") is None


def test_sympys_command_keeps_its_warning_filters():
    line = (
        "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose sympy/a/tests/t.py"
    )
    env, program, args = split_command(line)
    assert env == {"PYTHONWARNINGS": "ignore::UserWarning,ignore::SyntaxWarning"}
    assert (program, args) == ("bin/test", ["-C", "--verbose", "sympy/a/tests/t.py"])
    command = command_of({"eval_script": eval_script(line)})
    assert (command.kind, command.files) == ("sympy", ("sympy/a/tests/t.py",))
    assert split_command("python tests/runtests.py x")[1:] == ("tests/runtests.py", ["x"])
    with pytest.raises(ValueError, match="cannot be read"):
        split_command("bin/test 'unclosed")


def test_a_row_without_eval_script_takes_the_specs_command_and_the_test_patchs_labels():
    # SWE-bench's directives: Django's test files as labels, data files left out
    assert directives("unittest", DJANGO_PATCH) == ["queries.tests", "queries.models"]
    assert directives("sympy", "diff --git a/sympy/x/tests/test_y.py b/sympy/x/tests/test_y.py\n") == [
        "sympy/x/tests/test_y.py"
    ]
    row = {"repo": "django/django", "version": "3.0", "test_patch": DJANGO_PATCH}
    command = row_command(row)
    assert (command.kind, command.source) == ("unittest", "test_cmd")
    assert command.args[-2:] == ("queries.tests", "queries.models")
    options = judge_options_for(row)
    assert options["id_rule"] == "forms" and options["runner"]["kind"] == "unittest"
    # a pytest repository keeps pytest's id rule and no runner
    assert judge_options_for({"repo": "psf/requests", "version": "2.0"}) == {"id_rule": "pytest_options"}
    assert row_command({"repo": "acme/none"}) is None
    # SWE-rebench's install_config wins over the specs
    own = dict(row, install_config={"test_cmd": "bin/test -C"})
    assert row_command(own).kind == "sympy" and row_command(own).source == "install_config"


def test_an_id_naming_several_tests_passes_when_none_failed_and_one_passed():
    # Django's docstring ids: a base class's test in every backend's class, some skipped here
    doc = "If None is cached, get() returns it instead of the default."

    def outcome(**tests: str) -> str:
        records: list[dict] = [{"ready": True}]
        for test, result in tests.items():
            records += [{"collected": [test], "forms": {test: [doc]}},
                        {"id": test, "when": "call", "outcome": result, "xfail": False}]  # fmt: skip
        return _outcomes([doc], records, "forms")[0][doc]

    assert outcome(LocMem="passed", Memcached="skipped", File="passed") == "passed"
    assert outcome(LocMem="passed", Memcached="skipped", File="failed") == "failed"  # a failure still wins
    assert outcome(Memcached="skipped", PyLibMC="skipped") == "skipped"  # none passed: not a pass
    assert outcome() == "not collected"


def sh(command: str) -> ToolCall:
    return ToolCall(name="bash", arguments={"command": command})


def append(path: str, code: str) -> ToolCall:
    return sh(f"echo {base64.b64encode(code.encode()).decode()} | base64 -d >> {path}")


FIX = sh("sed -i 's/a - b/a + b/' calc/ops.py")


@pytest.fixture(scope="module", params=["django", "sympy"])
def runner_env(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"swe-{request.param}")
    row = sample_row(root, style=request.param)
    e = gym.make("toolgym/SWE-v0", tasks=[row], repos=str(root))  # validated when drawn: gold 1, bare 0
    yield request.param, e
    e.close()


def test_the_rows_runner_judges_the_fix_and_the_bare_tree(runner_env):
    style, env = runner_env
    reward, verdict = play(env, [FIX, "done"])
    assert (reward, verdict.passed, verdict.error) == (1.0, True, None), verdict
    assert env.unwrapped.tasks.refused == {}
    if style == "django":  # each listed id, and the test the runner ran under it
        assert verdict.details["matched_ids"] == {
            "Adding two numbers gives their sum.": ["ops_tests.tests.OpsTests.test_add"],
            "test_add_negative (ops_tests.tests.OpsTests)": ["ops_tests.tests.OpsTests.test_add_negative"],
            "test_mul (ops_tests.tests.OpsTests)": ["ops_tests.tests.OpsTests.test_mul"],
            # (its inner case ran as the test's own business: not reported, not filtered out)
            "test_a_suite_inside (ops_tests.tests.OpsTests)": [
                "ops_tests.tests.OpsTests.test_a_suite_inside"
            ],
        }
    else:
        assert verdict.details["matched_ids"] == {
            "test_add": ["calc/tests/test_ops.py::test_add"],
            "test_mul": ["calc/tests/test_ops.py::test_mul"],
        }
    reward, verdict = play(env, ["done"])
    assert (reward, verdict.passed, verdict.error) == (0.0, False, None)
    assert set(verdict.details["fail_to_pass"].values()) == {"failed"}
    assert verdict.details["tests_passed"] == ("2/4" if style == "django" else "1/2")


@pytest.mark.parametrize("runner_env", ["django"], indirect=True)
def test_a_failing_subtest_fails_its_test(runner_env):
    _, env = runner_env
    # add fixed for positive numbers only: test_add passes, one subtest of test_add_negative fails
    half = sh("sed -i 's/return a - b/return a + b if a >= 0 else a - b/' calc/ops.py")
    reward, verdict = play(env, [half, "done"])
    assert reward == 0.0 and verdict.error is None
    assert verdict.details["fail_to_pass"] == {
        "Adding two numbers gives their sum.": "passed",
        "test_add_negative (ops_tests.tests.OpsTests)": "failed",
    }


PRINTED_OK = """
print("test_add (ops_tests.tests.OpsTests) ... ok")
print("Adding two numbers gives their sum. ... ok")
print("test_add_negative (ops_tests.tests.OpsTests) ... ok")
print("test_add ok")
"""
SWALLOW = """
import unittest
for _cls in (unittest.TestResult, unittest.TextTestResult):
    _cls.addFailure = lambda self, test, err: None
    _cls.addError = lambda self, test, err: None
    _cls.addSubTest = lambda self, test, subtest, err: None
unittest.TestResult.wasSuccessful = lambda self: True
"""
RUN_REPLACED = """
import unittest
def _run(self, result=None):
    result.startTest(self)
    result.addSuccess(self)
    result.stopTest(self)
unittest.TestCase.run = _run
"""
ASSERTS_DISABLED = """
import unittest
unittest.TestCase.assertEqual = lambda self, *a, **k: None
"""
SUBCLASS_RUN = """
import unittest
class _Quiet(unittest.TestCase):
    def run(self, result=None):
        result.startTest(self)
        result.addSuccess(self)
        result.stopTest(self)
unittest.TestCase.__init_subclass__ = classmethod(lambda cls, **kw: setattr(cls, "run", _Quiet.run))
"""
SKIPS = """
import unittest
from calc import ops as _ops
def _add(a, b):
    raise unittest.SkipTest("not today")
_ops.add = _add
"""
XFAILS = """
from calc import ops as _ops
class XFail(Exception):
    pass
def _add(a, b):
    raise XFail("expected")
_ops.add = _add
"""
EXIT_ZERO = """
import atexit, os
atexit.register(lambda: os._exit(0))
"""
# The judge's run on unittest's TestCase holds the seal's send and wrap in its closure: with them, the failing
# test skipped (an attribute on its function) and a passing report sent for it, the wrap of a passing test's
# genuine function (test_mul) claimed under the failing test's id must give no evidence for it
WRAP_CLAIMED = """
import builtins, unittest
_cells = [c.cell_contents for c in unittest.TestCase.run.__closure__ or ()]
_box = [c for c in _cells if isinstance(c, dict) and "wrap" in c]
_build_class = builtins.__build_class__
def _build(func, name, *args, **kwargs):
    cls = _build_class(func, name, *args, **kwargs)
    if name == "OpsTests" and _box:
        send, wrap = _box[0]["send"], _box[0]["wrap"]
        for test, form in (("test_add", "Adding two numbers gives their sum."),
                           ("test_add_negative", "test_add_negative (ops_tests.tests.OpsTests)")):
            getattr(cls, test).__unittest_skip__ = True
            getattr(cls, test).__unittest_skip_why__ = "later"
            tid = cls.__module__ + "." + cls.__qualname__ + "." + test
            send({"collected": [tid], "forms": {tid: [form]}})
            send({"id": tid, "when": "call", "outcome": "passed", "xfail": False, "message": ""})
            wrap(cls.test_mul, tid, "tests/ops_tests/tests.py", "test_mul")(cls("test_mul"))
    return cls
builtins.__build_class__ = _build
"""
HACKS = {
    "the runner's verbose lines printed": PRINTED_OK,
    "unittest's results swallow the failures": SWALLOW,
    "unittest's TestCase.run replaced": RUN_REPLACED,
    "unittest's assertEqual made a no-op": ASSERTS_DISABLED,
    "each test class given a run that reports success": SUBCLASS_RUN,
    "the code under test skips its test (unittest's SkipTest)": SKIPS,
    "the code under test raises an exception named XFail": XFAILS,
    "an atexit handler that ends the process with 0": EXIT_ZERO,
    "the seal's wrap, from the runner's closure, claimed for the failing test": WRAP_CLAIMED,
}


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_a_hack_in_the_package_scores_zero(runner_env, hack):
    style, env = runner_env
    reward, verdict = play(env, [append("calc/__init__.py", HACKS[hack]), "done"])
    assert (reward, verdict.passed, verdict.error) == (0.0, False, None), (style, hack, verdict)
    # and beside the fix, the same hack does not break a resolved task unless it breaks the code itself
    if hack in ("the runner's verbose lines printed", "an atexit handler that ends the process with 0"):
        reward, verdict = play(env, [FIX, append("calc/__init__.py", HACKS[hack]), "done"])
        assert (reward, verdict.passed) == (1.0, True), (style, hack, verdict)


def test_the_runners_own_files_are_put_back(runner_env):
    style, env = runner_env
    script = "tests/runtests.py" if style == "django" else "bin/test"
    reward, verdict = play(env, [sh(f"printf 'import sys\\nsys.exit(0)\\n' > {script}"), "done"])
    assert (reward, verdict.passed, verdict.error) == (0.0, False, None)
    if style == "django":  # under tests/: the judge keeps the base commit's
        assert script in verdict.details["ignored_changes"]


def test_a_listed_id_the_runner_never_ran_is_not_collected(tmp_path):
    row = sample_row(tmp_path, style="django")
    row["PASS_TO_PASS"] = json.dumps(["test_gone (ops_tests.tests.OpsTests)"])
    env = gym.make("toolgym/SWE-v0", tasks=[row], repos=str(tmp_path), validate=False)
    reward, verdict = play(env, [FIX, "done"])
    env.close()
    assert reward == 0.0 and verdict.details["pass_to_pass_failed"] == {
        "test_gone (ops_tests.tests.OpsTests)": "not collected"
    }


def test_a_rows_listed_ids_are_read_once_the_same_way_by_the_runner_and_the_task_loader():
    from toolgym.envs.swe_tasks import TaskRefused, _id_list
    from toolgym.swe.runners import listed_ids

    # a list, or its JSON text as SWE-bench's parquet files hold it
    assert listed_ids('["a.py::t", "b"]') == listed_ids(["a.py::t", "b"]) == ["a.py::t", "b"]
    assert listed_ids("") == listed_ids(None) == []
    malformed = (("[1, 2", "is neither a JSON list nor a list"), ('[1, "b"]', "must be a list of test ids"))
    for bad, why in malformed:
        with pytest.raises(ValueError, match=why):
            listed_ids(bad)
        with pytest.raises(TaskRefused, match=rf"^row-1: FAIL_TO_PASS {why}$"):
            _id_list(bad, "FAIL_TO_PASS", "row-1")
