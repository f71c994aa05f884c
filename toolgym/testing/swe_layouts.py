"""Repositories whose package only imports once it is installed, made on the spot, with their SWE rows: what
``toolgym swe envs build`` must handle (SWE-bench's repositories are like this), for its tests, the bench and
the docs. Nothing is downloaded but the packages a recipe names.

Each ``layout_row(store, layout)`` writes a clone ``acme__<layout>`` under ``store``: a setup commit, a buggy
base commit after it, the fix (the row's ``patch``) and a test that catches the bug (``test_patch``), and
returns the row, its recipe in ``install_config`` (SWE-rebench's schema). Layouts:

- ``src``: ``src/shapes/`` (setuptools ``package-dir``), a pyproject build;
- ``namespace``: ``lib/acmens/tools/`` with no ``acmens/__init__.py`` (an implicit namespace package under
  ``package_dir``), a setup.cfg build;
- ``cext``: ``fastmath/_speed.c``, a C extension built by ``setup.py``; the bug and its fix are in the C file
  (the judge must rebuild it);
- ``requirements``: a package that imports ``iniconfig``, which the ``requirements.txt`` of the setup commit
  names (``packages: requirements.txt``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from toolgym.testing.swe import _git

LAYOUTS = ("src", "namespace", "cext", "requirements")
AREA = "def rectangle(w, h):\n    return w * h\n\n\ndef square(s):\n    return s * s\n"
PYPROJECT_SETUPTOOLS = (
    '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
)


def _files(layout: str) -> tuple[dict[str, str], dict[str, str], str, str]:
    """(setup files, buggy changes, fixed changes, test file path, import line) of ``layout``."""
    if layout == "src":
        base = {
            "pyproject.toml": PYPROJECT_SETUPTOOLS
            + '\n[project]\nname = "shapes"\nversion = "1.0"\n'
            + '\n[tool.setuptools.packages.find]\nwhere = ["src"]\n',
            "src/shapes/__init__.py": '"""Plane shapes."""\n',
            "src/shapes/area.py": AREA,
        }
        bug = {"src/shapes/area.py": AREA.replace("w * h", "w + h")}
        return base, bug, "tests/test_area.py", "from shapes.area import rectangle, square"
    if layout == "namespace":
        base = {
            "pyproject.toml": PYPROJECT_SETUPTOOLS,
            "setup.cfg": "[metadata]\nname = acmens-tools\nversion = 1.0\n\n[options]\n"
            "package_dir =\n    = lib\npackages = find_namespace:\n\n[options.packages.find]\nwhere = lib\n",
            "lib/acmens/tools/__init__.py": "",
            "lib/acmens/tools/core.py": AREA,
        }
        bug = {"lib/acmens/tools/core.py": AREA.replace("w * h", "w - h")}
        return base, bug, "tests/test_core.py", "from acmens.tools.core import rectangle, square"
    if layout == "cext":
        c_src = (
            "#define PY_SSIZE_T_CLEAN\n#include <Python.h>\n\n"
            "static PyObject *rectangle(PyObject *self, PyObject *args) {\n"
            '    long w, h;\n    if (!PyArg_ParseTuple(args, "ll", &w, &h)) return NULL;\n'
            "    return PyLong_FromLong(w * h);\n}\n\n"
            'static PyMethodDef methods[] = {{"rectangle", rectangle, METH_VARARGS, "w*h"},\n'
            "    {NULL, NULL, 0, NULL}};\n"
            'static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speed", NULL, -1, methods};\n'
            "PyMODINIT_FUNC PyInit__speed(void) { return PyModule_Create(&module); }\n"
        )
        base = {
            "pyproject.toml": PYPROJECT_SETUPTOOLS,
            "setup.py": "from setuptools import Extension, setup\n\nsetup(name='fastmath', version='1.0', "
            "packages=['fastmath'], ext_modules=[Extension('fastmath._speed', ['fastmath/_speed.c'])])\n",
            ".gitignore": "*.so\nbuild/\n*.egg-info/\n",
            "fastmath/__init__.py": "from fastmath._speed import rectangle\n\n\n" + AREA.split("\n\n\n")[1],
            "fastmath/_speed.c": c_src,
        }
        bug = {"fastmath/_speed.c": c_src.replace("w * h", "w + h")}
        return base, bug, "tests/test_speed.py", "from fastmath import rectangle, square"
    if layout == "requirements":
        base = {
            "requirements.txt": "# what the tests need\niniconfig>=1.0\n-e .\n",
            "pyproject.toml": PYPROJECT_SETUPTOOLS + '\n[project]\nname = "inishapes"\nversion = "1.0"\n',
            "inishapes/__init__.py": "import iniconfig  # noqa: F401 - what requirements.txt names\n",
            "inishapes/area.py": AREA,
        }
        bug = {"inishapes/area.py": AREA.replace("w * h", "w * 2")}
        return base, bug, "tests/test_area.py", "from inishapes.area import rectangle, square"
    raise ValueError(f"layout must be one of {LAYOUTS}, not {layout!r}")


def open_to_sandbox(path: str | Path) -> Path:
    """Let every uid traverse ``path`` and the directories above it (pytest makes its temporary directories
    0700): where the sandbox has no read-only view, its children run an environment's interpreter as their
    own uid, so the environments' directory must be reachable (docs/envs/swe-datasets.md)."""
    path = Path(path).absolute()
    for folder in [path, *path.parents]:
        if folder == Path(folder.anchor):
            break
        mode = folder.stat().st_mode
        if not mode & 0o001:
            folder.chmod(mode | 0o011)
    return path


def layout_row(
    store: str | Path, layout: str, python: str | None = None, pytest_pin: str = "pytest"
) -> dict[str, Any]:
    """Write ``acme__<layout>`` under ``store`` (module docstring) and return its SWE-bench row, its
    recipe in ``install_config`` (``python``: the version it asks for)."""
    base, bug, test_path, imports = _files(layout)
    repo = Path(store) / f"acme__{layout}"
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q")
    _git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    old_tests = f"{imports}\n\n\ndef test_square():\n    assert square(3) == 9\n"
    new_tests = old_tests + "\n\ndef test_rectangle():\n    assert rectangle(2, 5) == 10\n"

    def write(files: dict[str, str]) -> None:
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)

    write({**base, test_path: old_tests})
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", f"{layout}: first version")
    setup = _git(repo, "rev-parse", "HEAD")
    write(bug)
    _git(repo, "commit", "-qam", f"{layout}: a refactor")
    buggy = _git(repo, "rev-parse", "HEAD")
    fixed_file = next(iter(bug))
    write({fixed_file: base[fixed_file]})
    patch = _git(repo, "diff", buggy)
    write({test_path: new_tests})
    test_patch = _git(repo, "diff", "--", test_path)
    _git(repo, "commit", "-qam", f"{layout}: fix rectangle")
    _git(repo, "checkout", "-q", buggy)
    _git(repo, "checkout", "-q", "main")
    config: dict[str, Any] = {"pip_packages": [pytest_pin], "install": "python -m pip install -e ."}
    if python:
        config["python"] = python
    if layout == "requirements":
        config["packages"] = "requirements.txt"
    return {
        "instance_id": f"acme__{layout}-1",
        "repo": f"acme/{layout}",
        "base_commit": buggy,
        "environment_setup_commit": setup,
        "version": "1.0",
        "patch": patch + "\n",
        "test_patch": test_patch + "\n",
        "problem_statement": "rectangle(2, 5) should be 10: the area of a 2 by 5 rectangle.",
        "FAIL_TO_PASS": [f"{test_path}::test_rectangle"],
        "PASS_TO_PASS": [f"{test_path}::test_square"],
        "install_config": config,
        "created_at": "2025-06-01T00:00:00Z",
    }


#: the history repository's package at its first commit: three bugs no test sees yet
TALLY = (
    "def mean(xs):\n    return sum(xs) / len(xs)\n\n\n"
    "def median(xs):\n    s = sorted(xs)\n    return s[len(s) // 2]\n\n\n"
    "def clamp(x, lo, hi):\n    return max(lo, min(x, hi + 1))\n"
)
#: (fixed source, the test the fix adds, message) per fix commit, in order
TALLY_FIXES = (
    ("return sum(xs) / len(xs)", "return sum(xs) / len(xs) if xs else 0.0",
     "def test_mean_of_nothing():\n    assert mean([]) == 0.0\n",
     "mean: an empty list has mean 0.0\n\nmean([]) raised ZeroDivisionError."),
    ("    return s[len(s) // 2]",
     "    n = len(s)\n    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2",
     "def test_median_of_an_even_count():\n    assert median([1, 2, 3, 4]) == 2.5\n",
     "median: average the middle pair of an even count"),
    ("min(x, hi + 1)", "min(x, hi)",
     "def test_clamp_above():\n    assert clamp(12, 0, 10) == 10\n",
     "clamp: the upper bound is inclusive, not one past it"),
)  # fmt: skip


def history_repo(path: str | Path) -> Path:
    """A repository whose history holds three real fixes (each changes ``tally/stats.py`` and adds the test
    that catches its bug), a commit that touches only the README, and one that changes source and tests
    without fixing anything (its tests pass at its parent): ``toolgym swe mine --history`` finds 3 rows."""
    repo = Path(path)
    (repo / "tally").mkdir(parents=True, exist_ok=True)
    (repo / "tests").mkdir(exist_ok=True)
    _git(repo, "init", "-q")
    _git(repo, "symbolic-ref", "HEAD", "refs/heads/main")
    pyproject = PYPROJECT_SETUPTOOLS + (
        '\n[project]\nname = "tally"\nversion = "0.1"\n\n[project.optional-dependencies]\ntest = ["pytest"]\n'
    )
    tests = (
        "from tally.stats import clamp, mean, median\n\n\ndef test_mean():\n    assert mean([1, 2, 3]) == 2\n"
    )
    files = {"pyproject.toml": pyproject, "README.md": "# tally\n", "tally/__init__.py": "",
             "tally/stats.py": TALLY, "tests/test_stats.py": tests}  # fmt: skip
    for rel, text in files.items():
        (repo / rel).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "tally: first version")
    (repo / "README.md").write_text("# tally\n\nSmall statistics.\n")
    _git(repo, "commit", "-qam", "README: say what it is")
    source = TALLY
    for old, new, test, message in TALLY_FIXES:
        source = source.replace(old, new)
        tests += "\n\n" + test
        (repo / "tally/stats.py").write_text(source)
        (repo / "tests/test_stats.py").write_text(tests)
        _git(repo, "commit", "-qam", message)
    (repo / "tally/stats.py").write_text(source.replace("def clamp", "# bounds are inclusive\ndef clamp"))
    (repo / "tests/test_stats.py").write_text(
        tests + "\n\ndef test_clamp_inside():\n    assert clamp(5, 0, 10) == 5\n"
    )
    _git(repo, "commit", "-qam", "clamp: a comment and one more test")
    return repo


def long_history_row(store: str | Path, commits: int = 3000, files: int = 600) -> dict[str, Any]:
    """A real-size repository, ``acme__history``: ``commits`` commits over a package of ``files`` modules
    (each rewriting one module, written with ``git fast-import``), then a buggy commit, then its fix; its row
    is the bug, on the base commit right after those ``commits``. For the benchmark of a reset on a long
    history."""
    repo = Path(store) / "acme__history"
    repo.mkdir(parents=True, exist_ok=True)
    _git(repo, "init", "-q")
    stream = []
    for c in range(commits):
        message = f"change {c}\n"
        stream.append(
            f"commit refs/heads/main\ncommitter dev <dev@example.com> {1600000000 + c * 3600} +0000\n"
        )
        stream.append(f"data {len(message.encode())}\n{message}")
        changed = range(files) if c == 0 else [(c * 7) % files]
        for f in changed:
            body = f'"""Module {f}, revision {c}."""\n\n\ndef value_{f}():\n    return {f}\n'
            stream.append(f"M 100644 inline pkg/mod{f}.py\ndata {len(body.encode())}\n{body}")
        if c == 0:
            stream.append("M 100644 inline pkg/__init__.py\ndata 0\n")
        stream.append("\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=repo, input="".join(stream).encode(), check=True)
    _git(repo, "checkout", "-q", "main")
    write = lambda rel, text: (repo / rel).write_text(text)  # noqa: E731
    (repo / "tests").mkdir(exist_ok=True)
    write("pyproject.toml", PYPROJECT_SETUPTOOLS + '\n[project]\nname = "pkg"\nversion = "1.0"\n')
    write("pkg/area.py", AREA.replace("w * h", "w + h"))
    old_tests = "from pkg.area import rectangle, square\n\n\ndef test_square():\n    assert square(3) == 9\n"
    write("tests/test_area.py", old_tests)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "area: rectangles and squares")
    buggy = _git(repo, "rev-parse", "HEAD")
    write("pkg/area.py", AREA)
    patch = _git(repo, "diff")
    write("tests/test_area.py", old_tests + "\n\ndef test_rectangle():\n    assert rectangle(2, 5) == 10\n")
    test_patch = _git(repo, "diff", "--", "tests/test_area.py")
    _git(repo, "commit", "-qam", "area: fix rectangle")
    return {
        "instance_id": "acme__history-1",
        "repo": "acme/history",
        "base_commit": buggy,
        "patch": patch + "\n",
        "test_patch": test_patch + "\n",
        "problem_statement": "rectangle(2, 5) should be 10.",
        "FAIL_TO_PASS": ["tests/test_area.py::test_rectangle"],
        "PASS_TO_PASS": ["tests/test_area.py::test_square"],
        "install_config": {"pip_packages": ["pytest"], "install": "python -m pip install -e ."},
    }


def build_with_this_python(
    rows: list[dict[str, Any]], repos: Path, envs: Path, **kwargs: Any
) -> dict[str, Any]:
    """Build the rows' environments with this interpreter as the only one the build may choose
    (``TOOLGYM_SWE_PYTHONS``, restored after), two at a time; every build must succeed. Returns the
    manifests by repository. (``kwargs`` go to ``build_all``: ``exclude_newer``, ...)"""
    from toolgym.swe.environments import BuildFailed, build_all, plan

    old = os.environ.get("TOOLGYM_SWE_PYTHONS")
    os.environ["TOOLGYM_SWE_PYTHONS"] = sys.executable
    try:
        results = build_all(plan(rows), repos, envs, jobs=2, **kwargs)
    finally:
        if old is None:
            os.environ.pop("TOOLGYM_SWE_PYTHONS")
        else:
            os.environ["TOOLGYM_SWE_PYTHONS"] = old
    failed = {k: str(v) for k, v in results.items() if isinstance(v, BuildFailed)}
    assert not failed, failed
    return {m["repo"]: m for m in results.values() if isinstance(m, dict)}
