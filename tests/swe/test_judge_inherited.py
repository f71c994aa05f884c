"""A listed test whose function its class inherits from another test file: astropy's
``table/tests/test_table.py::TestMetaTable`` takes every test from ``utils/tests/test_metadata.py``'s
``MetaBaseTest``. The judge reads the files the listed file's classes inherit from before the repository
runs, so their functions are the listed tests' own (evidence comes); a base the change rewrote is the
change's, not the test's (no evidence), and a base function rewritten at run time is tampering."""

from __future__ import annotations

import sys

from toolgym.rewards.swe import FileChanges, run_tests
from toolgym.sandbox.shared import shared_test_sandbox
from toolgym.testing.swe import files_tar

BASE = b"""class AreaChecks:
    def test_area(self):
        assert self.area(2, 5) == 10
"""
TESTS = b"""from checks.shapes import AreaChecks
from shapes import rectangle


class TestRectangle(AreaChecks):
    area = staticmethod(rectangle)
"""
FIXED = b"def rectangle(w, h):\n    return w * h\n"
BUGGY = b"def rectangle(w, h):\n    return w + h\n"
TID = "tests/test_area.py::TestRectangle::test_area"


def _archive(shapes: bytes) -> bytes:
    files = {
        "checks/__init__.py": b"",
        "checks/shapes.py": BASE,
        "tests/__init__.py": b"",
        "tests/test_area.py": TESTS,
        "shapes.py": shapes,
    }
    return files_tar(files)


def _run(shapes: bytes, changes: FileChanges):
    run = run_tests(
        shared_test_sandbox(),
        _archive(shapes),
        changes,
        [TID],
        test_files={"tests/test_area.py": TESTS},
        python=sys.executable,
    )
    assert run.error is None, run.output[-2000:]
    return run


def test_a_test_inherited_from_another_files_class_passes_and_fails_on_its_own_merits():
    assert _run(FIXED, FileChanges()).outcomes == {TID: "passed"}
    assert _run(BUGGY, FileChanges()).outcomes == {TID: "failed"}


def test_a_base_class_the_change_rewrote_gives_no_evidence():
    """The change writes a base test that passes whatever the code does: the test is the change's now."""
    hollow = b"class AreaChecks:\n    def test_area(self):\n        pass\n"
    run = _run(BUGGY, FileChanges(files={"checks/shapes.py": hollow}))
    assert run.outcomes == {TID: "unverified"}, run.output[-2000:]


def test_the_inherited_function_rewritten_at_run_time_is_tampering():
    swap = BUGGY + (
        b"import checks.shapes\nchecks.shapes.AreaChecks.test_area.__code__ = (lambda self: None).__code__\n"
    )
    run = _run(BUGGY, FileChanges(files={"shapes.py": swap}))
    assert run.outcomes[TID] != "passed" and run.tampering, (run.outcomes, run.tampering)
