"""The files a row's patches touch, as the judge puts them back into its tree: a file whose diff has no hunk
(an empty file added, as sphinx-10673's test_patch adds ``tests/roots/test-toctree-index/conf.py``, which
sphinx needs to find the test root) is one of them, beside renames and files with spaces in their names."""

from __future__ import annotations

import shutil

from toolgym.swe.repos import RepoStore, patch_paths
from toolgym.testing.swe import _git


def test_an_empty_file_the_test_patch_adds_is_among_the_test_files(tmp_path):
    repo = tmp_path / "acme__roots"
    repo.mkdir()
    (repo / "pkg.py").write_text("x = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "first version")
    base = _git(repo, "rev-parse", "HEAD")
    root = repo / "tests" / "roots" / "test-index"
    root.mkdir(parents=True)
    (root / "conf.py").write_text("")
    (root / "index.rst").write_text("index\n")
    _git(repo, "add", "-N", "tests")
    test_patch = _git(repo, "diff") + "\n"
    _git(repo, "rm", "-rq", "--cached", "tests")
    shutil.rmtree(repo / "tests")
    # the empty file's diff is its header alone: no ---/+++ lines name it
    assert "+++ b/tests/roots/test-index/conf.py" not in test_patch
    snapshot = RepoStore(tmp_path).snapshot("acme/roots", base, "", test_patch)
    assert snapshot.test_files == {
        "tests/roots/test-index/conf.py": b"",
        "tests/roots/test-index/index.rst": b"index\n",
    }


def test_the_paths_of_a_diff_are_its_files_both_sides_of_a_rename_and_its_empty_files():
    patch = (
        "diff --git a/docs/empty.txt b/docs/empty.txt\n"
        "deleted file mode 100644\n"
        "index e69de29..0000000\n"
        "diff --git a/old name.py b/new.py\n"
        "similarity index 90%\n"
        "rename from old name.py\n"
        "rename to new.py\n"
        "--- a/old name.py\n"
        "+++ b/new.py\n"
        "@@ -1 +1 @@\n"
        "-a = 1\n"
        "+a = 2\n"
        "diff --git a/added.py b/added.py\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/added.py\n"
        "@@ -0,0 +1 @@\n"
        "+b = 1\n"
    )
    assert patch_paths(patch) == ["docs/empty.txt", "old name.py", "new.py", "added.py"]
