"""The judge's wrapper around a test's function keeps the test module's globals: pytest evaluates a
``skipif`` or ``xfail`` mark's string condition in ``item.obj.__globals__``, and when the condition is
false it evaluates it again after the call, with the judge's wrapper as ``item.obj``. astropy 3.1's
``@pytest.mark.xfail('MATPLOTLIB_LT_15')`` was a NameError there, and its row's test failed."""

from __future__ import annotations

import sys

from toolgym.rewards.swe import FileChanges, run_tests
from toolgym.sandbox.shared import shared_test_sandbox
from toolgym.testing.swe import files_tar

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
    run = run_tests(
        shared_test_sandbox(),
        files_tar({"test_marks.py": TESTS}),
        FileChanges(),
        IDS,
        test_files={"test_marks.py": TESTS},
        python=sys.executable,
    )
    assert run.error is None, run.output[-2000:]
    assert run.outcomes == {IDS[0]: "passed", IDS[1]: "skipped"}, run.output[-2000:]


IMAGE_TESTS = b"""import functools
import inspect
from pathlib import Path


def image_comparison(func):
    # as matplotlib's: the baseline images lie beside the file of the function it decorates
    @functools.wraps(func)
    def wrapper():
        baseline = Path(inspect.getfile(func)).parent / "baseline_images" / Path(inspect.getfile(func)).stem
        assert baseline.is_dir(), baseline
        return func()
    return wrapper


@image_comparison
def test_drawn_as_the_baseline():
    assert True
"""


def test_a_decorator_finds_the_test_functions_file_through_the_judges_wrapper(tmp_path):
    """matplotlib's ``image_comparison`` finds a test's baseline images by ``inspect.getfile`` of the
    function it decorates, which the judge wraps for its evidence: through the wrapper the file was
    ``<string>``, and every image test of matplotlib's rows failed."""
    files = {"test_images.py": IMAGE_TESTS, "baseline_images/test_images/drawn.png": b"an image"}
    tid = "test_images.py::test_drawn_as_the_baseline"
    run = run_tests(
        shared_test_sandbox(),
        files_tar(files),
        FileChanges(),
        [tid],
        test_files={"test_images.py": IMAGE_TESTS},
        python=sys.executable,
    )
    assert run.error is None, run.output[-2000:]
    assert run.outcomes == {tid: "passed"}, run.output[-2000:]
