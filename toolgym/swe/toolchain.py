"""What a machine needs to build SWE-bench's compiled repositories without Docker, and whether it has it.

SWE-bench's images ``apt-get install`` compilers and ``-dev`` packages before each build; here nothing is
installed on the machine and nothing downloads at build time, so a build uses the machine's own toolchain.
A build of a repository whose extensions need a part the machine lacks fails at its ``toolchain`` step,
before any package is resolved, naming the part and the Debian package that provides it (not a compiler
error twenty minutes in); ``toolgym doctor`` lists every part and which repositories need it.

Each part is probed by doing what the build does with it (compiling a few lines), not by looking for a file:
a compiler on ``PATH`` without its C library, or headers without the library, fail the build just the same.
``CC`` and ``CXX`` name the compilers as they do for setuptools.
"""

from __future__ import annotations

import ctypes.util
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

#: the repositories whose builds compile (SWE-bench Verified's, and their neighbours in Lite and full
#: SWE-bench), with the parts each build uses. Any other repository whose install compiles a C extension
#: needs the C compiler and the Python headers too; the build finds that out by building.
COMPILED_REPOSITORIES: dict[str, tuple[str, ...]] = {
    "astropy/astropy": ("c", "python_headers"),  # C and Cython (extension-helpers)
    "matplotlib/matplotlib": ("c", "c++", "python_headers"),
    "scikit-learn/scikit-learn": ("c", "c++", "openmp", "python_headers"),  # Cython, C++ and OpenMP
}
#: system libraries and programs a build or its tests take from the machine where it has them: matplotlib
#: 3.3 and later download FreeType's and Qhull's sources at build time, and take the system's where that
#: download fails (``build_settings``; older versions use the system's FreeType and their own copy of
#: Qhull), and its PDF and EPS image comparisons need Ghostscript (skipped without it, where SWE-bench's
#: images had it); xarray's recipes bring cartopy, whose sdist builds against PROJ and GEOS, and cfgrib,
#: whose eccodes before 2.37 (an environment resolved as of mid-2024) loads the system's ecCodes; sphinx's
#: graphviz tests run Graphviz's dot.
#: The build records which are missing; it does not refuse.
SYSTEM_LIBRARIES: dict[str, tuple[str, ...]] = {
    "matplotlib/matplotlib": ("pkg-config", "freetype", "qhull", "ghostscript"),
    "pydata/xarray": ("pkg-config", "proj", "geos", "eccodes"),
    "sphinx-doc/sphinx": ("graphviz",),  # sphinx.ext.graphviz's tests skip without dot
}


#: the file matplotlib's build reads its choice of libraries from (3.3 and later; earlier versions ignore it).
#: matplotlib ignores it in git, so the install leaves it as a generated file: the overlay carries it into
#: every workspace, and the judge's rebuild of an agent's C++ change reads it too.
MPL_SETUP_CFG = "mplsetup.cfg"
#: what matplotlib's build says when it cannot download FreeType's or Qhull's source (setupext.py): only
#: then does a build ask for the system's. Where the download works, the build takes the FreeType its tests
#: were drawn with (2.6.1), as SWE-bench's images did
SOURCE_DOWNLOAD_FAILED = "Failed to download any of the following"


def _mpl_setup_cfg(present: Sequence[str]) -> dict[str, str]:
    """matplotlib 3.3 and later download FreeType's and Qhull's sources during the build unless
    ``mplsetup.cfg`` asks for the system's (``system_freetype``, ``system_qhull``): where that download
    fails (no network beyond the package index), the build asks for those the machine has. Text-rendering
    image tests compare against baselines drawn with FreeType 2.6.1, the version matplotlib's own build
    downloads, so on another FreeType they fail: the manifest records the choice."""
    lines = [f"system_{key} = true" for key in ("freetype", "qhull") if key in present]
    return {MPL_SETUP_CFG: "[libs]\n" + "\n".join(lines) + "\n"} if lines else {}


#: per repository: the files its checkout gets when its build's download of a library's source failed,
#: given the system libraries present
BUILD_SETTINGS: dict[str, Callable[[Sequence[str]], dict[str, str]]] = {
    "matplotlib/matplotlib": _mpl_setup_cfg,
}


def build_settings(repo: str, present: Sequence[str]) -> dict[str, str]:
    """The files (name: text) to write into ``repo``'s checkout so that its build takes the system libraries
    ``present`` (``SYSTEM_LIBRARIES``' keys) where downloading their sources failed
    (``SOURCE_DOWNLOAD_FAILED``)."""
    settings = BUILD_SETTINGS.get(repo)
    return settings(present) if settings is not None else {}


@dataclass(frozen=True)
class Part:
    """One thing a compiled build needs: ``probe`` returns None where the machine has it, else why not."""

    key: str
    name: str
    debian: str
    probe: Callable[[str], str | None]  # given the environment's interpreter


def _compiler(variable: str, default: str) -> list[str]:
    return shlex.split(os.environ.get(variable) or default)


def _compiles(compiler: Sequence[str], source: str, suffix: str, flags: Sequence[str] = ()) -> str | None:
    """None when ``compiler`` compiles and links ``source``; else the first line of what it said."""
    if not compiler:
        return "no compiler named"
    if shutil.which(compiler[0]) is None:
        return f"{compiler[0]} is not an executable" if os.sep in compiler[0] else f"no {compiler[0]} on PATH"
    with tempfile.TemporaryDirectory(prefix="toolgym-toolchain-") as tmp:
        path = Path(tmp) / f"probe{suffix}"
        path.write_text(source)
        try:
            proc = subprocess.run(
                [*compiler, str(path), *flags, "-o", str(Path(tmp) / "probe")],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except subprocess.TimeoutExpired:
            return f"{compiler[0]} did not finish compiling a probe in 60 s"
        except OSError as exc:
            return f"{compiler[0]} cannot run: {exc}"
    if proc.returncode == 0:
        return None
    said = [line.replace(str(path), path.name) for line in (proc.stderr or proc.stdout).splitlines()]
    said = [line.strip() for line in said if line.strip()]
    return said[0] if said else f"{compiler[0]} exited {proc.returncode}"


def _pkg_config(module: str) -> str | None:
    if shutil.which("pkg-config") is None:
        return "no pkg-config on PATH"
    proc = subprocess.run(["pkg-config", "--exists", module], capture_output=True, text=True)
    return None if proc.returncode == 0 else f"pkg-config knows no {module}"


def _python_headers(python: str) -> str | None:
    code = "import os, sysconfig; print(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))"
    try:
        proc = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{python} cannot run: {exc}"
    header = proc.stdout.strip()
    if proc.returncode != 0 or not header:
        return f"{python} did not say where its headers are"
    return None if os.path.isfile(header) else f"{header} is missing"


PARTS: dict[str, Part] = {
    part.key: part
    for part in (
        Part(
            "c",
            "a C compiler (CC, else cc)",
            "gcc",
            lambda _: _compiles(_compiler("CC", "cc"), "int main(void) { return 0; }\n", ".c"),
        ),
        Part(
            "c++",
            "a C++ compiler (CXX, else c++)",
            "g++",
            lambda _: _compiles(
                _compiler("CXX", "c++"),
                "#include <vector>\nint main() { return std::vector<int>(1)[0]; }\n",
                ".cc",
            ),
        ),
        Part(
            "openmp",
            "OpenMP for the C compiler (-fopenmp)",
            "libgomp1",
            lambda _: _compiles(
                _compiler("CC", "cc"),
                "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n",
                ".c",
                ["-fopenmp"],
            ),
        ),
        # (uv's managed interpreters ship their headers: `uv python install 3.9` is the other way)
        Part(
            "python_headers",
            "the Python headers (Python.h) of the environment's interpreter",
            "python3-dev",
            _python_headers,
        ),
        Part(
            "pkg-config",
            "pkg-config",
            "pkg-config",
            lambda _: None if shutil.which("pkg-config") else "no pkg-config on PATH",
        ),
        Part(
            "freetype",
            "FreeType's headers and library (pkg-config freetype2)",
            "libfreetype-dev",
            lambda _: _pkg_config("freetype2"),
        ),
        Part(
            "qhull",
            "Qhull's reentrant headers and library (libqhull_r)",
            "libqhull-dev",
            lambda _: _compiles(
                _compiler("CC", "cc"),
                "#include <libqhull_r/libqhull_r.h>\nint main(void) { return qh_version == 0; }\n",
                ".c",
                ["-lqhull_r"],
            ),
        ),
        Part(
            "ghostscript",
            "Ghostscript (gs), for PDF and EPS image comparisons",
            "ghostscript",
            lambda _: None if shutil.which("gs") else "no gs on PATH",
        ),
        Part(
            "graphviz",
            "Graphviz (dot)",
            "graphviz",
            lambda _: None if shutil.which("dot") else "no dot on PATH",
        ),
        Part(
            "proj",
            "PROJ's headers and library (pkg-config proj)",
            "libproj-dev",
            lambda _: _pkg_config("proj"),
        ),
        Part(
            "geos",
            "GEOS's headers and library (geos-config)",
            "libgeos-dev",
            lambda _: None if shutil.which("geos-config") else "no geos-config on PATH",
        ),
        Part(
            "eccodes",
            "ecCodes' library (libeccodes), which cfgrib's eccodes loads",
            "libeccodes0",
            lambda _: None if ctypes.util.find_library("eccodes") else "no libeccodes found by the loader",
        ),
    )
}


def parts_for(repo: str) -> tuple[str, ...]:
    """The parts ``repo``'s build needs (none for a repository that compiles nothing we know of)."""
    return COMPILED_REPOSITORIES.get(repo, ())


def missing_for(repo: str, python: str, keys: Sequence[str] | None = None) -> list[tuple[Part, str]]:
    """The parts ``repo``'s build needs (or ``keys``) that this machine lacks, each with why."""
    found = []
    for key in parts_for(repo) if keys is None else keys:
        why = PARTS[key].probe(python)
        if why is not None:
            found.append((PARTS[key], why))
    return found


def refusal(repo: str, missing: Sequence[tuple[Part, str]]) -> str:
    """What a user reads when ``repo`` cannot be built here: the parts, why, and the packages to install."""
    listed = "; ".join(f"{part.name}: {why}" for part, why in missing)
    packages = " ".join(dict.fromkeys(part.debian for part, _ in missing))
    return (
        f"{repo}'s build compiles its extensions, and this machine lacks {listed}. Install them (Debian: "
        f"apt-get install {packages}) or build on a machine that has them; `toolgym doctor` lists what each "
        "compiled repository needs"
    )


def report(python: str) -> list[list[str]]:
    """``toolgym doctor``'s rows: each part, whether this machine has it, its Debian package, who needs it."""
    rows = []
    for part in PARTS.values():
        why = part.probe(python)
        needed_by = [repo.split("/")[1] for repo, keys in COMPILED_REPOSITORIES.items() if part.key in keys]
        needed_by += [f"{repo.split('/')[1]} (if present)" for repo, keys in SYSTEM_LIBRARIES.items()
                      if part.key in keys]  # fmt: skip
        rows.append([part.name, "yes" if why is None else f"NO: {why}", part.debian, ", ".join(needed_by)])
    return rows


__all__ = [
    "BUILD_SETTINGS",
    "COMPILED_REPOSITORIES",
    "MPL_SETUP_CFG",
    "PARTS",
    "SOURCE_DOWNLOAD_FAILED",
    "SYSTEM_LIBRARIES",
    "Part",
    "build_settings",
    "missing_for",
    "parts_for",
    "refusal",
    "report",
]
