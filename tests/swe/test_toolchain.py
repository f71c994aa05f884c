"""What a compiled repository's build needs (``toolgym.swe.toolchain``): each part probed by doing what the
build does with it, a build that lacks one refused at its ``toolchain`` step naming the part and its Debian
package (before anything resolves), and ``toolgym doctor``'s table of them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from toolgym.swe import toolchain
from toolgym.swe.environments import BuildFailed, build_all, plan
from toolgym.testing.swe_layouts import layout_row

PYTEST_PIN = f"pytest=={pytest.__version__}"


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(0o755)
    return str(path)


def test_a_c_compiler_that_is_absent_or_cannot_link_is_missing_with_why(tmp_path, monkeypatch):
    assert toolchain.PARTS["c"].probe(sys.executable) is None  # this machine builds C extensions (cext)
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    assert toolchain.PARTS["c"].probe(sys.executable) == f"{tmp_path}/no-such-cc is not an executable"
    monkeypatch.setenv("CC", "no-such-cc -O2")  # a command line, as setuptools reads CC
    assert toolchain.PARTS["c"].probe(sys.executable) == "no no-such-cc on PATH"
    monkeypatch.setenv("CC", _script(tmp_path / "broken-cc", "echo 'cannot find crt1.o' >&2; exit 1"))
    assert toolchain.PARTS["c"].probe(sys.executable) == "cannot find crt1.o"
    # OpenMP is probed with the same compiler: a C compiler without it is no OpenMP
    assert toolchain.PARTS["openmp"].probe(sys.executable) == "cannot find crt1.o"


def test_an_interpreter_without_its_headers_is_missing_them(tmp_path):
    assert toolchain.PARTS["python_headers"].probe(sys.executable) is None  # as the cext layout needs
    fake = _script(tmp_path / "python", f"echo {tmp_path}/include/Python.h")
    assert toolchain.PARTS["python_headers"].probe(fake) == f"{tmp_path}/include/Python.h is missing"


def test_a_compiled_repository_this_machine_cannot_build_is_refused_at_once_naming_the_packages(
    tmp_path, monkeypatch
):
    row = layout_row(tmp_path / "repos", "cext", pytest_pin=PYTEST_PIN)
    monkeypatch.setitem(toolchain.COMPILED_REPOSITORIES, row["repo"], ("c", "python_headers"))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    (refused,) = build_all(plan([row]), tmp_path / "repos", tmp_path / "envs").values()
    assert isinstance(refused, BuildFailed) and refused.step == "toolchain", refused
    assert f"a C compiler (CC, else cc): {tmp_path}/no-such-cc is not an executable" in refused.message
    assert "apt-get install gcc)" in refused.message and "toolgym doctor" in refused.message
    log = refused.log.read_text()
    assert "=== toolchain ===" in log and "=== venv ===" not in log  # nothing was resolved or installed


def test_matplotlibs_system_libraries_are_recorded_where_missing_not_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no pkg-config: FreeType is not found through it
    missing = toolchain.missing_for(
        "matplotlib/matplotlib", sys.executable, toolchain.SYSTEM_LIBRARIES["matplotlib/matplotlib"]
    )
    assert {part.key for part, _ in missing} >= {"pkg-config", "freetype", "ghostscript"}
    assert "pkg-config" not in toolchain.COMPILED_REPOSITORIES["matplotlib/matplotlib"]
    # xarray's cartopy builds from its sdist against PROJ and GEOS, and its cfgrib loads ecCodes (found by
    # the loader, not on PATH): recorded, and not a compiled repository
    missing = toolchain.missing_for(
        "pydata/xarray", sys.executable, toolchain.SYSTEM_LIBRARIES["pydata/xarray"]
    )
    assert [part.key for part, _ in missing][:3] == ["pkg-config", "proj", "geos"]
    monkeypatch.setattr(toolchain.ctypes.util, "find_library", lambda name: None)
    missing = toolchain.missing_for("pydata/xarray", sys.executable, ["eccodes"])
    assert [(part.key, part.debian) for part, _ in missing] == [("eccodes", "libeccodes0")]
    assert toolchain.parts_for("pydata/xarray") == ()


def test_doctor_lists_each_part_whether_it_is_here_and_who_needs_it():
    doctor = [sys.executable, "-m", "toolgym.cli", "doctor", "--quick"]
    out = subprocess.run(doctor, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    section = out.stdout.split("SWE builds of compiled repositories")[1]
    for part in toolchain.PARTS.values():
        (line,) = [ln for ln in section.splitlines() if ln.startswith(part.name)]
        assert part.debian in line
    (c_line,) = [ln for ln in section.splitlines() if ln.startswith("a C compiler")]
    assert "astropy, matplotlib, scikit-learn" in c_line and " yes " in c_line


def test_matplotlibs_setup_asks_for_the_system_libraries_the_machine_has():
    settings = toolchain.BUILD_SETTINGS["matplotlib/matplotlib"]
    assert settings(["pkg-config", "freetype", "qhull"]) == {
        "mplsetup.cfg": "[libs]\nsystem_freetype = true\nsystem_qhull = true\n"
    }
    assert settings(["qhull"]) == {"mplsetup.cfg": "[libs]\nsystem_qhull = true\n"}
    assert settings(["pkg-config"]) == {}  # nothing to ask for: its build downloads (and fails) as before
    assert toolchain.build_settings("acme/cext", ["freetype"]) == {}


def test_every_part_a_repository_names_is_one_the_toolchain_probes():
    """A build looks each named part up in ``PARTS``: one named and not defined would stop every build of
    that repository with a KeyError (sphinx's Graphviz once did)."""
    named = {key for keys in toolchain.COMPILED_REPOSITORIES.values() for key in keys}
    named |= {key for keys in toolchain.SYSTEM_LIBRARIES.values() for key in keys}
    assert named <= set(toolchain.PARTS), named - set(toolchain.PARTS)
    for repo, keys in toolchain.SYSTEM_LIBRARIES.items():
        assert len(toolchain.missing_for(repo, sys.executable, keys)) <= len(keys)
