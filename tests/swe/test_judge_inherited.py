"""A listed test whose function its class inherits from another test file: astropy's
``table/tests/test_table.py::TestMetaTable`` takes every test from ``utils/tests/test_metadata.py``'s
``MetaBaseTest``. The judge reads the files the listed file's classes inherit from before the repository
runs, so their functions are the listed tests' own (evidence comes); a base the change rewrote is the
change's, not the test's (no evidence), and a base function rewritten at run time is tampering."""

from __future__ import annotations

import sys

from toolgym.rewards.swe import FileChanges, run_tests
from toolgym.sandbox.judge_driver import RUNNER
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


def test_only_a_base_class_with_tests_of_its_own_is_read_with_the_test_files(tmp_path):
    """The package's own classes a test file subclasses (sympy's ``Basic``, Django's ``models.Model``) and a
    package ``__init__`` that re-exports a name hold no test: they are not sealed with the test files (each
    judge run would compile them, and their code would count as a test's)."""
    files = {
        "pkg/__init__.py": "from pkg.core import Basic\n",
        "pkg/core.py": "class Basic:\n    def test_like(self):\n        return 1\n",
        "pkg/models.py": "class Model:\n    def save(self):\n        pass\n",
        "pkg/tests/__init__.py": "",
        "pkg/tests/helpers.py": "class Checks:\n    def test_area(self):\n        assert True\n",
        "pkg/tests/test_x.py": (
            "from pkg import Basic\nfrom pkg import models\nfrom pkg.tests.helpers import Checks\n"
            "from .helpers import Checks as Again\n\n\n"
            "class Thing(Basic):\n    pass\n\n\nclass Row(models.Model):\n    pass\n\n\n"
            "class TestX(Checks):\n    pass\n\n\nclass TestY(Again):\n    pass\n"
        ),
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    space: dict = {}
    exec(RUNNER, space)  # the runner's functions only: nothing runs at its top level
    bases = space["_tg_bases"]
    found = bases(str(tmp_path), ["pkg/tests/test_x.py"], ())
    assert found == {"pkg/tests/test_x.py": ("pkg/tests/test_x.py", "pkg/tests/helpers.py")}
    # a base the change rewrote is not read as the test's
    changed = bases(str(tmp_path), ["pkg/tests/test_x.py"], ["pkg/tests/helpers.py"])
    assert changed == {"pkg/tests/test_x.py": ("pkg/tests/test_x.py",)}
