"""The judge's compiled copies of the listed test files (``_tg_pristine``, ``toolgym.sandbox.judge_driver``):
the code a test file's import must run, or the run stops as tampered with.

pytest 3.8 to 5.x's assertion rewriter writes the module's path into the code of every ``assert`` (its
warning for ``assert None``), so a file imported as ``/tmp/testbed/tests/test_x.py`` runs other code than
the same bytes compiled as ``/testbed/tests/test_x.py``. Each path the file may be imported under (the root
as given, its real path, the working directory) gets copies compiled under that path. Here a stand-in
rewriter writes the path in as those versions do, on a root reached through a link.
"""

from __future__ import annotations

import ast
import os
import sys
import types

from toolgym.sandbox.judge_driver import RUNNER

SOURCE = "def test_x():\n    assert 1 + 1 == 2\n"


def _rewrite_asserts(tree, source, module_path=None, config=None):
    """pytest 5.x's habit: the module's path, a constant in the rewritten module's code."""
    tree.body.insert(0, ast.parse(f"__rewritten_as__ = {str(module_path)!r}").body[0])


def test_a_test_file_has_its_compiled_copies_under_each_path_it_may_be_imported_under(tmp_path, monkeypatch):
    real = tmp_path / "real"
    (real / "tests").mkdir(parents=True)
    (real / "tests" / "test_x.py").write_text(SOURCE)
    link = tmp_path / "testbed"
    link.symlink_to(real)
    rewriter = types.ModuleType("_pytest.assertion.rewrite")
    rewriter.rewrite_asserts = _rewrite_asserts
    monkeypatch.setitem(sys.modules, "_pytest.assertion.rewrite", rewriter)
    monkeypatch.chdir(tmp_path)
    space: dict = {}
    exec(RUNNER, space)  # the runner's functions only: nothing runs at its top level

    pristine = space["_tg_pristine"](str(link), ["tests/test_x.py"])

    paths = {str(link / "tests" / "test_x.py"), str(real / "tests" / "test_x.py")}
    assert paths <= set(pristine)
    for path in paths:
        # as the import makes it: the bytes compiled, and rewritten under that very path
        tree = ast.parse(SOURCE, filename=path)
        _rewrite_asserts(tree, SOURCE, path)
        imported = compile(tree, path, "exec", dont_inherit=True)
        assert any(imported == variant for variant in pristine[path]), path
        other = (paths - {path}).pop()
        tree = ast.parse(SOURCE, filename=other)
        _rewrite_asserts(tree, SOURCE, other)
        assert not any(compile(tree, other, "exec", dont_inherit=True) == v for v in pristine[path])
    assert os.path.realpath(link) == str(real)
