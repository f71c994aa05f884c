"""The judge's wrapper around a test's function keeps the test module's globals: pytest evaluates a
``skipif`` or ``xfail`` mark's string condition in ``item.obj.__globals__``, and when the condition is
false it evaluates it again after the call, with the judge's wrapper as ``item.obj``. astropy 3.1's
``@pytest.mark.xfail('MATPLOTLIB_LT_15')`` was a NameError there, and its row's test failed."""

from __future__ import annotations

import io
import sys
import tarfile

from toolgym.rewards.swe import FileChanges, run_tests
from toolgym.sandbox.shared import shared_test_sandbox

TESTS = b"""import pytest

OLD_LIBRARY = False


@pytest.mark.xfail("OLD_LIBRARY", reason="a condition the module's globals decide")
def test_under_a_false_string_condition():
    assert True


@pytest.mark.skipif("not OLD_LIBRARY", reason="skipped: the condition holds")
def test_skipped_by_a_true_string_condition():
    assert False
"""
IDS = [
    "test_marks.py::test_under_a_false_string_condition",
    "test_marks.py::test_skipped_by_a_true_string_condition",
]


def test_a_string_condition_is_evaluated_in_the_test_modules_globals():
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo("test_marks.py")
        info.size, info.mode = len(TESTS), 0o644
        tar.addfile(info, io.BytesIO(TESTS))
    run = run_tests(
        shared_test_sandbox(),
        buffer.getvalue(),
        FileChanges(),
        IDS,
        test_files={"test_marks.py": TESTS},
        python=sys.executable,
    )
    assert run.error is None, run.output[-2000:]
    assert run.outcomes == {IDS[0]: "passed", IDS[1]: "skipped"}, run.output[-2000:]
