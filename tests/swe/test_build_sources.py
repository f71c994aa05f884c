"""Sources a build downloads, supplied from a directory (``toolgym swe envs build --sources DIR``).

matplotlib 3.3+ downloads FreeType 2.6.1 during its build (its image tests' baselines were drawn with it);
with no network the build takes the system's FreeType and those tests fail with the gold patch. The
repositories here are written by the tests: a ``setupext.py`` in matplotlib's forms, and a ``setup.py``
that, as matplotlib's does, builds the source found at ``build/freetype-<version>`` (running its
``configure``) and fails with matplotlib's words where it is not there and no ``mplsetup.cfg`` opts out.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from tests.swe.test_old_builds import AREA, PYTEST_PIN, _play_oracle_and_wrong, _row, download_failing_row
from toolgym.swe import build_sources, toolchain
from toolgym.swe.environments import BuildFailed, EnvironmentStore, build_all, plan
from toolgym.testing.swe_layouts import build_with_this_python, open_to_sandbox

SETUPEXT_35 = "LOCAL_FREETYPE_VERSION = '2.6.1'\n# options: system_freetype\n_freetype_hashes = {{\n    '2.6.1':\n        '{sha}',\n}}\n"  # noqa: E501
SETUPEXT_37 = (
    "TESTING_VERSION_OF_FREETYPE = '2.6.1'\n"
    "if sys.platform.startswith('win') and platform.machine() == 'ARM64':\n"
    "    LOCAL_FREETYPE_VERSION = '2.11.1'\n"
    "else:\n"
    "    LOCAL_FREETYPE_VERSION = TESTING_VERSION_OF_FREETYPE\n"
    "LOCAL_QHULL_VERSION = '2020.2'\n"
    "# options: system_freetype, system_qhull\n"
)
SETUPEXT_31 = "LOCAL_FREETYPE_VERSION = '2.6.1'\n# options: local_freetype (the system's by default)\n"

#: matplotlib's setup.py in miniature: FreeType is the system's where mplsetup.cfg says so, else the one at
#: build/freetype-2.6.1 (its configure run, as matplotlib runs it), else its download fails; so is Qhull
#: (where setupext.py names a version), whose source is at build/qhull-<version>
SETUP = """import os, subprocess
from setuptools import setup

cfg = open('mplsetup.cfg').read() if os.path.exists('mplsetup.cfg') else ''
ft = os.path.join('build', 'freetype-2.6.1')
if 'system_freetype = true' in cfg:
    build_type = 'system'
elif os.path.isdir(ft):
    subprocess.check_call(['sh', './builds/unix/configure'], cwd=ft)
    with open(os.path.join(ft, 'include', 'ft2build.h')) as fh:
        build_type = 'local ' + fh.read().split()[-1]
else:
    raise IOError("Failed to download any of the following: ['https://download.savannah.gnu.org/"
                  "releases/freetype/freetype-2.6.1.tar.gz']")
wants_qhull = 'LOCAL_QHULL_VERSION' in open('setupext.py').read()
if wants_qhull and 'system_qhull = true' not in cfg and not os.path.isdir('build/qhull-2020.2'):
    raise IOError("Failed to download any of the following: ['http://www.qhull.org/download/"
                  "qhull-2020-src-8.0.2.tgz']")
with open(os.path.join('oldpkg', '_freetype.py'), 'w') as fh:
    fh.write(f'BUILD_TYPE = "{build_type}"\\n')
setup(name='oldpkg', version='1.0', packages=['oldpkg'])
"""
#: FreeType's tree in miniature: configure makes the static library the extensions link
CONFIGURE = "mkdir -p objs/.libs && echo 'static library' > objs/.libs/libfreetype.a\n"
#: a tree from git: autogen.sh makes configure
AUTOGEN = f"mkdir -p builds/unix && printf '%s' \"{CONFIGURE}\" > builds/unix/configure\n"
TREE = {"include/ft2build.h": "/* FreeType */ 2.6.1\n", "src/base/ftinit.c": "/* the sources */\n"}


def _tree(parent: Path, *, from_git: bool) -> Path:
    """``freetype-2.6.1/`` under ``parent``: a release's (with configure) or git's (autogen.sh)."""
    root = parent / "freetype-2.6.1"
    files = {**TREE, **({"autogen.sh": AUTOGEN} if from_git else {"builds/unix/configure": CONFIGURE})}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _tarball(folder: Path, top: str = "freetype-2.6.1") -> Path:
    """``freetype-2.6.1.tar.gz`` as matplotlib's build would download it (top-level directory ``top``)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "freetype-2.6.1.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for rel, text in {**TREE, "builds/unix/configure": CONFIGURE}.items():
            info = tarfile.TarInfo(f"{top}/{rel}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path


def _mpl_row(root: Path, name: str, setupext: str) -> dict:
    """A row of a repository built as matplotlib is (``setupext`` and ``SETUP``), whose FreeType and Qhull
    the machine has (so that without the source its build would take the system's)."""
    return _row(
        root / "repos",
        name,
        {"setup.py": SETUP, "setupext.py": setupext, "oldpkg/__init__.py": "", "oldpkg/area.py": AREA},
        {"pip_packages": [PYTEST_PIN], "install": "python -m pip install -e ."},
    )


@pytest.fixture
def as_matplotlib(monkeypatch):
    """Give the test's repositories (``acme/...``) matplotlib's build sources and settings, with a
    machine that has FreeType and Qhull."""

    def apply(repo: str) -> None:
        monkeypatch.setitem(build_sources.SOURCES, repo, build_sources.SOURCES["matplotlib/matplotlib"])
        monkeypatch.setitem(toolchain.SYSTEM_LIBRARIES, repo, ("freetype", "qhull"))
        monkeypatch.setitem(toolchain.BUILD_SETTINGS, repo, toolchain.BUILD_SETTINGS["matplotlib/matplotlib"])
        for key in ("freetype", "qhull"):
            monkeypatch.setitem(
                toolchain.PARTS, key, toolchain.Part(key, key, f"lib{key}-dev", lambda _: None)
            )

    return apply


def _overlay_names(envs: Path, key: str) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(EnvironmentStore(envs).overlay(key))) as tar:
        return set(tar.getnames())


def test_the_version_is_read_where_the_build_downloads_by_default(tmp_path):
    """3.5's and 3.7's ``setupext.py`` (3.7 names the tests' version apart from Windows on ARM's) download
    2.6.1; 3.1's takes the system's unless asked, so it wants nothing."""
    for text, names in (
        (SETUPEXT_35.format(sha="0" * 64), ["freetype-2.6.1"]),
        (SETUPEXT_37, ["freetype-2.6.1", "qhull-2020.2"]),
        (SETUPEXT_31, []),
    ):
        (tmp_path / "setupext.py").write_text(text)
        assert [d for _, d in build_sources.wanted("matplotlib/matplotlib", tmp_path)] == names
    assert build_sources.wanted("pydata/xarray", tmp_path) == []


def test_a_supplied_release_tarball_is_built_not_the_system_library(tmp_path, as_matplotlib):
    """With the tarball in ``--sources``, the build compiles it (no ``mplsetup.cfg`` asks for the
    system's), the manifest says what was taken and that it is the tarball matplotlib's build checks for,
    and the files a later build of the extensions reads travel in the overlay (the tree's ``build/`` does
    not). The row then plays as any other."""
    sources = tmp_path / "sources"
    tarball = _tarball(sources)
    sha = hashlib.sha256(tarball.read_bytes()).hexdigest()
    (tmp_path / "root").mkdir()
    root = open_to_sandbox(tmp_path / "root")
    row = _mpl_row(root, "mplft", SETUPEXT_35.format(sha=sha))
    as_matplotlib(row["repo"])
    envs = root / "envs"
    manifest = build_with_this_python([row], root / "repos", envs, sources=sources)[row["repo"]]
    taken = manifest["build_sources"]["freetype-2.6.1"]
    assert taken == {
        "key": "freetype", "from": str(tarball), "at": "build/freetype-2.6.1", "form": "tarball",
        "sha256": sha, "release_tarball": True,
    }  # fmt: skip
    assert manifest["build_settings"] == {}  # the system's FreeType was not asked for
    names = _overlay_names(envs, manifest["key"])
    assert {
        "build/freetype-2.6.1/objs/.libs/libfreetype.a",
        "build/freetype-2.6.1/include/ft2build.h",
    } <= names
    assert "build/freetype-2.6.1/src/base/ftinit.c" not in names  # what no later build reads stays out
    with tarfile.open(fileobj=io.BytesIO(EnvironmentStore(envs).overlay(manifest["key"]))) as tar:
        member = tar.extractfile("oldpkg/_freetype.py")
        assert member is not None and member.read() == b'BUILD_TYPE = "local 2.6.1"\n'
    import json

    (root / "rows.jsonl").write_text(json.dumps(row) + "\n")
    _play_oracle_and_wrong({"root": root}, row["instance_id"])


def test_a_tree_from_git_gets_its_configure_made(tmp_path, as_matplotlib, monkeypatch):
    """FreeType's git tree has ``autogen.sh`` and no ``configure``: the build runs it first (the
    manifest says so, and that a tree is not the release tarball); a tarball that is not the release's
    is taken and recorded as not the release's."""
    monkeypatch.setattr(build_sources, "AUTOTOOLS", ("sh",))  # the test's autogen.sh needs only sh
    sources = tmp_path / "sources"
    tree = _tree(sources, from_git=True)
    (tmp_path / "root").mkdir()
    root = open_to_sandbox(tmp_path / "root")
    row = _mpl_row(root, "mplgit", SETUPEXT_37)
    as_matplotlib(row["repo"])
    manifest = build_with_this_python([row], root / "repos", root / "envs", sources=sources)[row["repo"]]
    taken = manifest["build_sources"]
    assert list(taken) == ["freetype-2.6.1"]  # qhull-2020.2 is not in the directory: left to the build,
    # whose download fails: the system's Qhull is asked for, and not the system's FreeType
    assert manifest["build_settings"] == {"mplsetup.cfg": "[libs]\nsystem_qhull = true\n"}
    assert taken["freetype-2.6.1"]["form"] == "directory" and taken["freetype-2.6.1"]["prepared"] == (
        "sh ./autogen.sh"
    )
    assert not (tree / "builds").exists()  # the directory supplied is read, never written
    assert "release_tarball" not in taken["freetype-2.6.1"]
    log = (root / "envs" / manifest["key"] / "build.log").read_text()
    assert "qhull-2020.2: not in" in log
    with tarfile.open(fileobj=io.BytesIO(EnvironmentStore(root / "envs").overlay(manifest["key"]))) as tar:
        member = tar.extractfile("oldpkg/_freetype.py")
        assert member is not None and member.read() == b'BUILD_TYPE = "local 2.6.1"\n'

    other = tmp_path / "other"
    _tarball(other)
    row2 = _mpl_row(root, "mplother", SETUPEXT_35.format(sha="0" * 64))
    as_matplotlib(row2["repo"])
    manifest2 = build_with_this_python([row2], root / "repos", root / "envs", sources=other)[row2["repo"]]
    assert manifest2["build_sources"]["freetype-2.6.1"]["release_tarball"] is False


def _fails(rows: list[dict], root: Path, envs: Path, sources: Path) -> BuildFailed:
    import os
    import sys

    os.environ["TOOLGYM_SWE_PYTHONS"] = sys.executable
    try:
        (result,) = build_all(plan(rows), root / "repos", envs, sources=sources).values()
    finally:
        os.environ.pop("TOOLGYM_SWE_PYTHONS")
    assert isinstance(result, BuildFailed), result
    return result


def test_unusable_sources_fail_the_build_saying_what_to_do(tmp_path, as_matplotlib, monkeypatch):
    """A git tree where the machine lacks autotools names the Debian packages and the tarball instead; a
    tarball that unpacks elsewhere says where; an environment built without the sources is not reused
    for a build that has them."""
    (tmp_path / "root").mkdir()
    root = open_to_sandbox(tmp_path / "root")
    row = _mpl_row(root, "mplbad", SETUPEXT_35.format(sha="0" * 64))
    as_matplotlib(row["repo"])
    git_tree = tmp_path / "git"
    _tree(git_tree, from_git=True)
    monkeypatch.setattr(build_sources, "AUTOTOOLS", ("toolgym-no-such-autoconf",))
    failed = _fails([row], root, root / "envs-git", git_tree)
    assert failed.step == "sources"
    assert "apt-get install autoconf automake libtool" in failed.message
    assert "freetype-2.6.1.tar.gz" in failed.message

    wrong = tmp_path / "wrong"
    _tarball(wrong, top="freetype-2.6.1-final")
    failed = _fails([row], root, root / "envs-wrong", wrong)
    assert failed.step == "sources" and "not to one directory freetype-2.6.1/" in failed.message

    without = build_with_this_python([row], root / "repos", root / "envs")[row["repo"]]
    assert (
        without["build_sources"] == {}
        and "system_freetype = true" in without["build_settings"]["mplsetup.cfg"]
    )
    good = tmp_path / "good"
    _tarball(good)
    failed = _fails([row], root, root / "envs", good)
    assert failed.step == "reuse" and "built without the sources" in failed.message


def test_the_cli_refuses_a_sources_path_that_is_not_a_directory(tmp_path, capsys):
    from toolgym.cli import main

    rows = tmp_path / "rows.jsonl"
    rows.write_text("")
    with pytest.raises(SystemExit) as exc:
        main(["swe", "envs", "build", str(rows), "--repos", str(tmp_path), "--out", str(tmp_path / "e"),
              "--sources", str(tmp_path / "missing")])  # fmt: skip
    assert exc.value.code == 2
    assert "missing is not a directory" in capsys.readouterr().err


def test_a_download_failure_after_a_remedy_is_acted_on_with_the_remedy_kept(tmp_path, as_matplotlib):
    """matplotlib 3.5.0 at its date: its isolated build fails with the newest setuptools, so the builds
    are held to the environment's; the held build gets as far as FreeType's download, which fails. That
    failure is the one acted on (``mplsetup.cfg``), and the hold stays: undoing it would bring back the
    first failure, and the download's fallback would never be tried."""
    dep_util = "from setuptools import dep_util  # setuptools 70 dropped it: the isolated build fails\n"
    root, row = download_failing_row(tmp_path, "mplheld", dep_util)
    as_matplotlib(row["repo"])
    manifest = build_with_this_python([row], root / "repos", root / "envs")[row["repo"]]
    assert manifest["builds_held"]["reason"].startswith("step install: a source build failed")
    assert manifest["build_settings"] == {
        "mplsetup.cfg": "[libs]\nsystem_freetype = true\nsystem_qhull = true\n"
    }
