"""One Python environment per repository version, built from the rows' recipes with uv, without Docker.

``toolgym swe envs build ROWS --repos DIR --out ENVS`` plans one environment per distinct (repository,
setup commit, recipe) (``plan``), and builds each once (``EnvironmentStore.build``) into a content-addressed
directory ``ENVS/<key>/`` that several processes share:

- **a lock and an atomic publish**: a build holds ``ENVS/.locks/<key>.lock`` (``flock``), works in
  ``ENVS/.tmp/``, and publishes by renaming the finished directory into place, manifest included; a process
  that waited on the lock finds it built and builds nothing;
- **the steps**, each named in the log and in a failure: ``checkout`` (the clone at the row's
  ``environment_setup_commit``, else its base commit), ``python`` (the recipe's version where an interpreter
  of it is on the machine, else the nearest newer minor: recorded), ``toolchain`` (a repository whose
  build compiles, astropy's, matplotlib's, scikit-learn's: the compilers and headers it needs, probed,
  else a refusal naming them and their Debian packages: :mod:`toolgym.swe.toolchain`), ``venv`` (``uv venv
  --relocatable --seed``: the agent's ``pip`` is the environment's), ``packages`` (requirements files and
  ``environment.yml`` read **from the clone at that commit**, never fetched; SWE-bench's package replacements;
  conda packages that are Python packages go to pip, the others are listed as not installed),
  ``pip_packages``, ``requirements`` (a row's pins), ``install`` (the repository itself: ``pip install``
  commands run as ``uv pip install``), ``testbed`` (the install pointed at the workspace, below),
  ``overlay`` (compiled parts), ``pytest`` (the judge runs pytest in the environment), ``freeze`` (``uv pip
  freeze``). ``pre_install`` system steps are never run: the manifest lists them. ``exclude_newer``
  resolves as of the newest row's ``created_at``.
- **the repository resolves to the workspace the agent edits**: the editable install's path entries
  (``*.pth``) and setuptools' editable finders are rewritten to ask ``_toolgym_testbed.root()`` (the
  ``TOOLGYM_TESTBED`` variable the bash tool and the judge set, else ``/testbed``), so src layouts,
  ``package_dir`` maps and namespace packages import from the episode's tree, wherever the sandbox puts it.
- **compiled parts** (C extensions, Cython output, files an install step writes into the tree: what ``git
  status`` shows as untracked or ignored after the install, build directories aside) are packed once per
  environment (``overlay.tar``), rebuilt at each row's base commit whose compiled sources differ, and laid
  into each episode's workspace and the judge's tree over the base commit (:mod:`toolgym.swe.row_envs`);
  when the agent changes a compiled source the judge rebuilds first, in a sandbox child of its own.
- **failures are loud**: a failed step leaves ``ENVS/.failed/<key>.json`` (the step, the error, the log's
  path), and SWE-v0 refuses that environment's rows with it, never a 0.

Each environment's ``manifest.json``: the recipe and where it came from, the Python asked for and used, the
resolved pins, what was not installed and not run, the build time, the size, the log.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.rewards.swe import COMPILED_SOURCES
from toolgym.swe import build_sources, toolchain
from toolgym.swe.interpreters import NoInterpreter, choose_python, machine_pythons
from toolgym.swe.pre_install import (
    StepFailed,
    apt_packages,
    missing_packages,
    repository_step,
    run_repository_step,
)
from toolgym.swe.recipes import DEFAULT_INSTALL, Recipe, UserRecipes, recipe_for
from toolgym.swe.repos import RepoStore, RepoUnavailable, git, shared_repo_store
from toolgym.swe.requirements import (
    PROJECT_NAME,
    RequirementsMissing,
    build_requires,
    clean_lines,
    declared_extras,
    failed_source_builds,
    package_name,
    read_environment_yml,
    read_requirements,
    registry_misses,
    replace_packages,
    split_conda,
)
from toolgym.swe.runners import runner_kind, split_command

MANIFEST = "manifest.json"
#: the module the rewritten install asks where the workspace is (written into site-packages)
HOOK_MODULE = "_toolgym_testbed"
TESTBED_VARIABLE = "TOOLGYM_TESTBED"
#: generated files past this size are a build that writes too much into its tree (the overlay is refused)
OVERLAY_LIMIT = 512 << 20
#: how a compiled part is rebuilt in a tree (``python``: the environment's): SWE-bench's eval script re-runs
#: the install, which for a setup.py build is this, without touching the environment
REBUILD = ("python", "setup.py", "build_ext", "--inplace")
_PIP_FLAGS_UV_LACKS = frozenset({"-v", "-vv", "-vvv", "--verbose", "--no-use-pep517", "-q", "--quiet"})
#: the setuptools an environment gets where its recipe does not name one. SWE-bench's conda environments
#: (2023-24) shipped a setuptools with ``pkg_resources`` (sphinx 3.x imports it) and the legacy modules
#: (``setuptools.dep_util``: astropy's extension-helpers). Checked on PyPI's wheels: 69.5.1 is the newest
#: with both (70.0.0 removed ``dep_util``; ``pkg_resources`` stayed to 81), and it has PEP 660's
#: ``build_editable`` and runs on Python 3.8 to 3.13.
SETUPTOOLS_BOUND = "setuptools<70"
SETUPTOOLS_WHY = (
    "the recipe names no setuptools: the newest that still ships pkg_resources and setuptools.dep_util "
    "(69.5.1; 70.0 removed dep_util), as SWE-bench's conda environments had"
)
#: why --exclude-newer does not bound that setuptools: one of a 2020 row's date (before 66) builds sphinx
#: 3.x's version from its setup.cfg's tag_date as ``3.0.2.dev-20261202``, which uv rejects (not PEP 440)
SETUPTOOLS_DATE_WHY = (
    "the build tool, bounded by setuptools<70 instead: one of the row's date (before 66) writes versions "
    "that are not PEP 440 (sphinx 3.0's 3.0.2.dev-20261202), which uv refuses"
)
#: uv's words for a source distribution whose build failed (its backend's error follows)
_SOURCE_BUILD_FAILED = re.compile(r"build backend returned an error|Failed to build")
#: the build constraints file in a build's directory: the setuptools its source builds are held to
BUILD_CONSTRAINTS = "build-constraints.txt"
#: the constraints file the packages step resolves under: the recipe's pip_packages pins (``_later_pins``)
LATER_PINS = "later-pins.txt"
#: uv's words where a resolution has no solution (under the later pins: resolved again without them)
_NO_SOLUTION = "No solution found"
#: the oldest setuptools with the backend uv builds a ``setup.py`` project with (PEP 517's
#: ``setuptools.build_meta:__legacy__``, 40.8.0): an environment with an older one has its builds held to it
LEGACY_BACKEND_SINCE = (40, 8)
#: an exact pin of a release (``numpy==1.19.2``): its series (``1.19``) has the wheels a conda build stood for
_PIN = re.compile(rf"{PROJECT_NAME}==[0-9][0-9A-Za-z.+!]*")  # one version, no markers
_EXACT_PIN = re.compile(rf"(?P<name>{PROJECT_NAME})==(?P<minor>\d+\.\d+)(?:\.\d+)+")
#: a recipe's exact setuptools pin (``setuptools==68.0.0``), installed before the other packages
_SETUPTOOLS_PIN = re.compile(r"setuptools==[0-9][0-9A-Za-z.]*")
#: how many remedies (``_hold_builds``, ``_build_here``) one install may try after its builds failed
MAX_BUILD_REMEDIES = 4
#: uv's words for the distribution whose source build failed, and the module that build could not import
_FAILED_BUILD_OF = re.compile(r"Failed to build `([A-Za-z0-9._-]+?)(?:==| @ |`)")
_NO_MODULE = re.compile(r"No module named '([A-Za-z0-9_]+)")
#: how many packages a build under ``--exclude-newer`` may exempt from the date before it gives up
MAX_DATE_EXEMPTIONS = 40
#: the files where a project declares what it depends on: a row's base commit that changed one of them
#: against the setup commit may need a distribution the environment lacks (SWE-bench's harness installs the
#: repository at each row's base commit; pylint-4661's base needs appdirs, pytest 4.6/5.0's bases an
#: unconditional importlib-metadata)
DEPENDENCY_FILES = ("setup.py", "setup.cfg", "pyproject.toml")
#: a line of ``uv pip install --dry-run``'s plan: `` + name==version`` (or `` - ``), maybe `` (from ...)``
_PLANNED = re.compile(r"^\s*([+-])\s+([A-Za-z0-9._-]+)==(\S+)(\s+\(from .*\))?\s*$")


class EnvironmentMissing(RepoUnavailable):
    """A row's environment is not built here, or failed to build (the message says which, and why)."""


@dataclass
class EnvPlan:
    """One environment to build: a repository at its setup commit with one recipe, and the rows it serves."""

    key: str
    repo: str
    commit: str
    recipe: Recipe
    rows: list[str] = field(default_factory=list)
    bases: set[str] = field(default_factory=set)  # the rows' base commits (compiled parts per base)
    created_at: str | None = None  # the newest row's, for exclude_newer


class BuildFailed(RuntimeError):
    def __init__(self, step: str, message: str, log: Path | None = None):
        super().__init__(f"step {step}: {message}" + (f" (log: {log})" if log else ""))
        self.step, self.message, self.log = step, message, log


def setup_commit(row: Mapping[str, Any]) -> str:
    return str(row.get("environment_setup_commit") or row.get("base_commit") or "")


def plan(rows: Iterable[Mapping[str, Any]], recipes: UserRecipes | None = None) -> dict[str, EnvPlan]:
    """One ``EnvPlan`` per distinct (repository, setup commit, recipe), each listing its rows."""
    plans: dict[str, EnvPlan] = {}
    for row in rows:
        recipe = recipe_for(row, recipes)
        repo, commit = str(row.get("repo", "")), setup_commit(row)
        key = recipe.key(repo, commit)
        entry = plans.setdefault(key, EnvPlan(key, repo, commit, recipe))
        entry.rows.append(str(row.get("instance_id", "")))
        if row.get("base_commit"):
            entry.bases.add(str(row["base_commit"]))
        created = row.get("created_at")
        if created and (entry.created_at is None or str(created) > entry.created_at):
            entry.created_at = str(created)
    return plans


# ------------------------------------------------------------------------------------- the build


class _Log:
    """The build log: each step's header, commands and output, in ``build.log``."""

    def __init__(self, path: Path):
        self.path = path
        self.fh = open(path, "w")  # noqa: SIM115 - open across the steps; close() closes it
        self.last_output = ""  # the last command's whole output (a failure's tail is in its message)
        self.current = "python"  # the step in progress (what a failure that is not a BuildFailed names)

    def step(self, name: str) -> None:
        self.current = name
        self.fh.write(f"\n=== {name} ===\n")
        self.fh.flush()

    def run(
        self, step: str, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float
    ) -> str:
        self.fh.write(f"$ {' '.join(argv)}\n")
        self.fh.flush()
        try:
            proc = subprocess.run(
                list(argv), cwd=cwd, env=dict(env), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise BuildFailed(step, f"{argv[0]} ran past {timeout:.0f} s", self.path) from None
        except OSError as exc:
            raise BuildFailed(step, f"{argv[0]} did not start: {exc}", self.path) from None
        self.last_output = proc.stdout + proc.stderr
        self.fh.write(self.last_output)
        self.fh.flush()
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise BuildFailed(step, f"exit {proc.returncode}: {' | '.join(tail)}", self.path)
        return proc.stdout

    def close(self) -> None:
        self.fh.close()


def uv_binary() -> str:
    """uv: the one beside this interpreter (toolgym's install has it), else the uv package's, else on PATH."""
    here = Path(sys.executable).parent / "uv"
    if here.is_file():
        return str(here)
    try:  # the uv package knows where its binary went (a venv made from another, a --user install)
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("uv")
    if found is None:
        raise BuildFailed("venv", "uv is not installed (pip install uv)")
    return found


def translate_install(command: str, uv: str, python: str, extra: Sequence[str]) -> list[str] | None:
    """A ``pip install`` command as ``uv pip install`` (flags uv lacks dropped), else None (run as a shell
    command). ``extra``: uv's own options (``--exclude-newer``)."""
    import shlex

    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if words[:4] == ["python", "-m", "pip", "install"]:
        args = words[4:]
    elif words[:2] in (["pip", "install"], ["pip3", "install"]):
        args = words[2:]
    else:
        return None
    args = [a for a in args if a not in _PIP_FLAGS_UV_LACKS]
    return [uv, "pip", "install", "--python", python, *extra, *args]


def _later_pins(pip_packages: Iterable[str]) -> list[str]:
    """The exact pins (``numpy==1.25.2``) among a recipe's ``pip_packages``, which are installed after its
    packages step and win over what that step resolved, as SWE-bench's pip did after conda."""
    return [p.strip() for p in pip_packages if _PIN.fullmatch(p.strip())]


def _names(lines: Iterable[str]) -> set[str]:
    return {package_name(line) for line in lines if line and not line.startswith("-")}


def _filtered_by_date(output: str) -> set[str]:
    """The packages uv's failed resolution says ``--exclude-newer`` filtered out (its hint names them)."""
    return {package_name(n) for n in re.findall(r"`([^`]+)` was filtered by `exclude-newer`", output)}


def _editable_target(args: Sequence[str]) -> tuple[str, list[str], list[str]] | None:
    """(the path, its extras, the other arguments) of an ``install -e PATH[extras]``; None without ``-e``."""
    for i, word in enumerate(args):
        if word in ("-e", "--editable") and i + 1 < len(args):
            target, rest = args[i + 1], [*args[:i], *args[i + 2 :]]
        elif word.startswith("--editable="):
            target, rest = word.split("=", 1)[1], [*args[:i], *args[i + 1 :]]
        else:
            continue
        path, _, extras = target.partition("[")
        return path or ".", [e.strip() for e in extras.rstrip("]").split(",") if e.strip()], rest
    return None


def _hook_source() -> str:
    return (
        f'"""Where the repository this environment installs lies: ${TESTBED_VARIABLE}, else /testbed."""\n'
        "import os, sys\n\n"
        "def root():\n"
        f"    return os.environ.get({TESTBED_VARIABLE!r}) or '/testbed'\n\n"
        "def add(*rels):\n"
        "    base = root()\n"
        "    for rel in rels:\n"
        "        path = os.path.normpath(os.path.join(base, rel))\n"
        "        if path not in sys.path:\n"
        "            sys.path.append(path)\n"
    )


def _at_root(code: str, prefix: str) -> str:
    """``code`` with each string literal of a path under ``prefix`` asking the hook for the root instead."""
    for quote in ("'", '"'):
        code = code.replace(f"{quote}{prefix}/", f"__import__({HOOK_MODULE!r}).root() + {quote}/")
        code = code.replace(f"{quote}{prefix}{quote}", f"__import__({HOOK_MODULE!r}).root()")
    return code


def _finder_parent(text: str, prefix: str) -> str | None:
    """The directory, relative to ``prefix``, that holds every package a setuptools editable finder maps
    (its ``MAPPING``), None where they lie in several or outside it."""
    found = re.search(r"^MAPPING[^=]*=\s*(\{.*\})\s*$", text, flags=re.M)
    try:
        mapping = ast.literal_eval(found.group(1)) if found else None
    except (ValueError, SyntaxError):
        return None
    if not isinstance(mapping, dict) or not mapping:
        return None
    parents = {os.path.dirname(str(path)) for path in mapping.values()}
    if len(parents) != 1:
        return None
    (parent,) = parents
    real = os.path.realpath(parent)
    if real != prefix and not real.startswith(prefix + os.sep):
        return None
    return os.path.relpath(real, prefix)


def point_at_testbed(site: Path, src: Path) -> list[str]:
    """Rewrite the editable install's paths under ``src`` to the workspace root (module docstring); returns
    the import roots, relative to the repository."""
    site.joinpath(f"{HOOK_MODULE}.py").write_text(_hook_source())
    prefix = str(src.resolve())
    roots: list[str] = []
    for pth in sorted(site.glob("*.pth")):
        lines, changed = [], False
        for line in pth.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith("import") and prefix in stripped:  # setuptools' -nspkg.pth: a namespace
                lines.append(_at_root(line, prefix))  # package (mpl_toolkits) made from the tree's path
                roots.append(f"(namespace package line of {pth.name})")
                changed = True
                continue
            if stripped and not stripped.startswith(("import ", "import\t", "#")):
                real = os.path.realpath(stripped)
                if real == prefix or real.startswith(prefix + os.sep):
                    rel = os.path.relpath(real, prefix)
                    roots.append(rel)
                    lines.append(f"import {HOOK_MODULE}; {HOOK_MODULE}.add({rel!r})")
                    changed = True
                    continue
            lines.append(line)
        if changed:
            pth.write_text("\n".join(lines) + "\n")
    for finder in sorted(site.glob("__editable__*finder.py")):
        text = finder.read_text()
        if prefix not in text:
            continue
        finder.write_text(_at_root(text, prefix))
        roots.append("(setuptools editable finder)")
        # A setup.py project (no pyproject.toml): pip installed it with `setup.py develop` (until pip 25.3),
        # which put the packages' directory on sys.path, where uv's PEP 660 install maps each package in a
        # finder and leaves sys.path as it was. Code that maps a file to its module through sys.path needs
        # the entry (pylint's plugin loader, through astroid, in a `python -m pylint` run from elsewhere)
        parent = _finder_parent(text, prefix) if not (src / "pyproject.toml").is_file() else None
        if parent is not None:
            site.joinpath(f"{HOOK_MODULE}_develop.pth").write_text(
                f"import {HOOK_MODULE}; {HOOK_MODULE}.add({parent!r})\n"
            )
            roots.append(parent)
    for link in sorted(site.glob("*.egg-link")):
        link.write_text(link.read_text().replace(prefix, "/testbed"))
    return roots


#: what an agent's ``pip install`` answers: the environment is shared, read-only in the sandbox, and there
#: is no network there (``python -m pip`` fails fast too: the venv's pip.conf allows no retries)
PIP_REFUSAL = (
    "toolgym: pip {verb} is not available in this episode: the environment is shared by every episode of "
    "this repository version, read-only here, and the judge runs the tests in it as it was built (the "
    "sandbox has no network either). Work with the packages installed (pip list)."
)


def guard_pip(venv: Path) -> None:
    """The venv's ``pip`` scripts refuse to change it, saying why (``PIP_REFUSAL``); other pip commands
    (list, show, freeze) run as usual."""
    (venv / "pip.conf").write_text("[global]\nretries = 0\ntimeout = 2\nno-input = true\n")
    message = PIP_REFUSAL.replace("'", "")
    for name in ("pip", "pip3", *(p.name for p in (venv / "bin").glob("pip3.*"))):
        script = venv / "bin" / name
        if not script.exists() and name != "pip":
            continue
        script.write_text(
            "#!/bin/sh\n"
            'case "$1" in install|uninstall|download|wheel)\n'
            f"  echo '{message}' | sed \"s/{{verb}}/$1/\" >&2; exit 1;;\n"
            "esac\n"
            'exec "$(dirname -- "$(realpath -- "$0")")/python" -m pip "$@"\n'
        )
        script.chmod(0o755)


def _generated_files(src: Path, kept: Sequence[str] = ()) -> list[str]:
    """What the install wrote into the tree (untracked and ignored files), less build directories and
    caches, plus ``kept``: files under ``build/`` that a later build of the extensions reads
    (``build_sources``)."""
    out = git(["status", "--porcelain", "--ignored", "--untracked-files=all", "-z"], src)
    files = list(kept)
    for entry in out.split("\0"):
        if len(entry) < 4 or entry[:2] not in ("??", "!!"):
            continue
        rel = entry[3:]
        parts = rel.split("/")
        if parts[0] in ("build", ".eggs", ".tox", ".git") or "__pycache__" in parts or rel.endswith(".pyc"):
            continue
        files.append(rel)
    return sorted(set(files))


#: what an extension module built against another numpy than the one it runs with raises
_NUMPY_ABI = re.compile(
    r"numpy\.core\.multiarray failed to import|module compiled against (?:API|ABI) version|"
    r"numpy\.dtype size changed|compiled using NumPy 1\.x cannot be run in|_ARRAY_API not found"
)
#: loads the extension module files given (paths relative to the cwd) by their own names, as an import
#: would, and prints {path: the error's last line} for those that do not load
_LOAD_EXTENSIONS = """
import importlib.util, json, os, sys, traceback
failed = {}
for rel in sys.argv[1:]:
    name = os.path.basename(rel).split(".")[0]
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.abspath(rel))
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
    except BaseException as exc:
        failed[rel] = (traceback.format_exception_only(type(exc), exc) or [repr(exc)])[-1].strip()
print(json.dumps(failed))
"""


def _unloadable(python: str, src: Path, modules: Sequence[str], env: Mapping[str, str]) -> dict[str, str]:
    """The extension modules among ``modules`` that do not load in ``python``, each with its error; each
    loaded in a process of its own (one that crashes is named by its exit)."""
    failed: dict[str, str] = {}
    for rel in modules:
        run = subprocess.run(
            [python, "-c", _LOAD_EXTENSIONS, rel], cwd=src, env={**env, TESTBED_VARIABLE: str(src)},
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        try:
            failed.update(json.loads(run.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            failed[rel] = f"its loading process ended with exit {run.returncode}: {run.stderr.strip()[-300:]}"
    return failed


def pack_overlay(src: Path, files: Sequence[str]) -> bytes:
    buf = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel in files:
            path = src / rel
            if path.is_symlink() or not path.is_file():
                continue
            total += path.stat().st_size
            if total > OVERLAY_LIMIT:
                raise BuildFailed(
                    "overlay", f"the install wrote over {OVERLAY_LIMIT >> 20} MiB into the tree"
                )
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as fh:
                tar.addfile(info, fh)
    return buf.getvalue()


def _dir_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3.*/site-packages"))
    if not found:
        raise BuildFailed("venv", f"no site-packages under {venv}")
    return found[0]


def egg_requirements(requires_txt: str, extras: Sequence[str]) -> list[str]:
    """The requirements an ``*.egg-info/requires.txt`` lists for ``extras``: its unconditional lines, and
    those of each ``[extra]`` or ``[extra:marker]`` (or ``[:marker]``) section that applies, the section's
    marker joined to each (``numpy>=1.10; python_version < "3"``)."""
    out: list[str] = []
    wanted, marker = True, ""
    for line in requires_txt.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            extra, _, marker = line[1:-1].partition(":")
            wanted = extra == "" or extra in extras
            continue
        if wanted:
            out.append(f"{line}; {marker}" if marker else line)
    return out


#: ``git submodule`` allowed to clone from a local path (git 2.38 refuses the file protocol by default)
_LOCAL_SUBMODULES = ("-c", "protocol.file.allow=always", "submodule")
#: a submodule's URL on a code host: ``owner/name`` is the clone the store holds for it
_HOSTED_URL = re.compile(r"(?:https?://|git@|git://)[^/:]+[/:]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$")


def submodules_from_store(src: Path, store: RepoStore, log: _Log) -> dict[str, str]:
    """Check the checkout's git submodules out from the repository store, never the network: each
    submodule whose URL names ``owner/name`` on a code host is cloned from the store's ``owner__name`` at
    the commit the tree pins. astropy before 4.0 builds with ``astropy_helpers``, a submodule that its
    ``ah_bootstrap`` clones from GitHub during the build (SWE-bench's images had a network); without it
    the build fails. Returns ``{path: what was done}`` ("owner/name at <commit>", or why it was not)."""
    if not (src / ".gitmodules").is_file():
        return {}
    listed = git(["config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.url$"], src, check=False)
    done: dict[str, str] = {}
    for line in listed.splitlines():
        key, _, url = line.partition(" ")
        name = key[len("submodule.") : -len(".url")]
        path = (
            git(["config", "-f", ".gitmodules", f"submodule.{name}.path"], src, check=False).strip() or name
        )
        hosted = _HOSTED_URL.match(url.strip())
        if hosted is None:
            done[path] = f"not checked out: {url} names no repository the store could hold"
            continue
        repo = f"{hosted[1]}/{hosted[2]}"
        try:
            clone = store.clone_dir(repo)
        except RepoUnavailable:
            done[path] = f"not checked out: the store has no clone of {repo} ({repo.replace('/', '__')})"
            continue
        git(["config", f"submodule.{name}.url", str(clone.resolve())], src)
        try:
            git([*_LOCAL_SUBMODULES, "update", "--init", "--quiet", "--", path], src)
        except RepoUnavailable as exc:
            done[path] = f"not checked out from {repo}: {exc}"
            continue
        pinned = git(["rev-parse", f"HEAD:{path}"], src, check=False).strip()
        done[path] = f"{repo} at {pinned}"
    log.fh.write(f"submodules: {json.dumps(done)}\n")
    return done


def _update_submodules(src: Path) -> None:
    """After a checkout, the submodules at the commits the new tree pins (from the store, as configured)."""
    if (src / ".gitmodules").is_file():
        git([*_LOCAL_SUBMODULES, "update", "--init", "--quiet"], src, check=False)


def _checkout_base(entry: EnvPlan, src: Path, base: str, log: _Log, unreadable: dict[str, str]) -> bool:
    """Check ``base`` out in the build's checkout; False (recorded in ``unreadable``, the checkout back at the
    setup commit) where the clone cannot give its tree: astropy's 5.2 bases need a blob that a clone
    fetched without its largest files lacks. One base's rows are refused where they play, with the clone's
    own diagnosis (``RepoStore.missing_objects``): the environment and its other rows are still built."""
    try:
        git(["checkout", "--quiet", "--force", "--detach", base], src)
        _update_submodules(src)
        return True
    except RepoUnavailable as exc:
        unreadable[base] = str(exc)
        log.fh.write(f"base commit {base}: its tree cannot be read from the clone ({exc}); skipped here\n")
        git(["checkout", "--quiet", "--force", "--detach", entry.commit], src)
        return False


def _bases_changing(entry: EnvPlan, src: Path, log: _Log, step: str, pathspecs: Sequence[str]) -> list[str]:
    """The plan's base commits (other than its setup commit), in order, where a file ``pathspecs`` names
    differs from the setup commit's."""
    out = []
    for base in sorted(entry.bases - {entry.commit}):
        try:
            changed = git(["diff", "--name-only", entry.commit, base, "--", *pathspecs], src)
        except RepoUnavailable as exc:
            raise BuildFailed(step, f"base commit {base}: {exc}", log.path) from None
        if changed.strip():
            out.append(base)
    return out


class EnvironmentStore:
    """The built environments under ``root`` (module docstring): look-ups for SWE-v0, builds for the CLI."""

    def __init__(self, root: str | Path):
        self.root = Path(root).absolute()

    # -- reading

    def path(self, key: str) -> Path:
        return self.root / key

    def manifest(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / key / MANIFEST).read_text())
        except (OSError, ValueError):
            return None

    def failure(self, key: str) -> dict[str, Any] | None:
        try:
            return json.loads((self.root / ".failed" / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None

    def manifests(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted(self.root.glob(f"*/{MANIFEST}")):
            with contextlib.suppress(OSError, ValueError):
                out.append(json.loads(path.read_text()))
        return out

    def python(self, key: str, base: str | None = None, manifest: Mapping[str, Any] | None = None) -> str:
        """The interpreter of environment ``key``, or of its own environment for rows at ``base`` where that
        base commit needs other versions (``manifest["base_environments"]``; read from disk unless given)."""
        if base:
            manifest = manifest if manifest is not None else self.manifest(key) or {}
            if base in (manifest.get("base_environments") or {}):
                return str(self.root / key / "bases" / base / "venv" / "bin" / "python")
        return str(self.root / key / "venv" / "bin" / "python")

    def pythons(self, key: str, manifest: Mapping[str, Any] | None = None) -> list[str]:
        """Every interpreter of environment ``key``: its own and its base commits' (the sandbox shows all)."""
        manifest = manifest if manifest is not None else self.manifest(key) or {}
        variants = manifest.get("base_environments") or {}
        return [self.python(key), *(self.python(key, base, manifest) for base in variants)]

    def overlay(self, key: str) -> bytes:
        path = self.root / key / "overlay.tar"
        return path.read_bytes() if path.is_file() else b""

    def key_for(self, row: Mapping[str, Any], recipes: UserRecipes | None = None) -> str:
        return recipe_for(row, recipes).key(str(row.get("repo", "")), setup_commit(row))

    def find(self, row: Mapping[str, Any], recipes: UserRecipes | None = None) -> dict[str, Any]:
        """The manifest of the row's environment; ``EnvironmentMissing`` saying why there is none."""
        key = self.key_for(row, recipes)
        manifest = self.manifest(key)
        if manifest is not None:
            return manifest
        failed = self.failure(key)
        if failed is not None:
            raise EnvironmentMissing(
                f"its environment {key} failed to build at step {failed['step']}: {failed['error']} "
                f"(log: {failed['log']})"
            )
        raise EnvironmentMissing(
            f"its environment {key} is not built in {self.root} "
            f"(toolgym swe envs build ROWS --repos DIR --out {self.root})"
        )

    # -- building

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        locks = self.root / ".locks"
        locks.mkdir(parents=True, exist_ok=True)
        with (locks / f"{key}.lock").open("w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def build(
        self,
        entry: EnvPlan,
        repos: str | Path,
        *,
        exclude_newer: bool | str = False,
        pythons: Mapping[tuple[int, int], str] | None = None,
        timeout: float = 1800.0,
        download_python: bool = False,
        sources: str | Path | None = None,
    ) -> dict[str, Any]:
        """Build ``entry`` unless it is built (waiting for a build another process holds); returns its
        manifest, or raises ``BuildFailed`` after recording the failure. ``sources``: a directory of the
        sources its build would download (``build_sources``)."""
        with self._locked(entry.key):
            done = self.manifest(entry.key)
            if done is not None:
                asked = exclusion_date(entry, exclude_newer)
                if done.get("exclude_newer") != asked:  # the key is the recipe's: the date is not in it
                    raise BuildFailed(
                        "reuse",
                        f"{self.path(entry.key)} was built with exclude_newer={done.get('exclude_newer')}, "
                        f"and this build asks {asked}: build into another --out, or remove that environment",
                    )
                if (
                    sources is not None
                    and not done.get("build_sources")
                    and build_sources.offers(entry.repo, Path(sources))
                ):  # nor are the sources: an environment built without them is not one built with them
                    raise BuildFailed(
                        "reuse",
                        f"{self.path(entry.key)} was built without the sources in {sources} (it downloaded "
                        "them or took the system's): build into another --out, or remove that environment",
                    )
                return {**done, "reused": True}
            tmp = self.root / ".tmp" / f"{entry.key}-{os.getpid()}"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            log = _Log(tmp / "build.log")
            try:
                found = pythons if pythons is not None else machine_pythons()
                chosen = self._python(entry, found, download_python, log)
                try:
                    manifest = self._build(
                        entry, Path(repos), tmp, log, exclude_newer, chosen, timeout,
                        Path(sources) if sources is not None else None,
                    )  # fmt: skip
                except RepoUnavailable as exc:  # git failed where no step expected it: this build fails alone
                    raise BuildFailed(log.current, str(exc), log.path) from None
            except BuildFailed as exc:
                log.close()
                failed_dir = self.root / ".failed"
                failed_dir.mkdir(exist_ok=True)
                kept_log = failed_dir / f"{entry.key}.log"
                shutil.copyfile(tmp / "build.log", kept_log)
                record = {"key": entry.key, "repo": entry.repo, "commit": entry.commit, "step": exc.step,
                          "error": exc.message, "log": str(kept_log), "rows": entry.rows}  # fmt: skip
                (failed_dir / f"{entry.key}.json").write_text(json.dumps(record, indent=1))
                shutil.rmtree(tmp, ignore_errors=True)
                raise BuildFailed(exc.step, exc.message, kept_log) from None
            log.close()
            final = self.path(entry.key)
            shutil.rmtree(final, ignore_errors=True)
            os.rename(tmp, final)  # the publish: the manifest appears with everything it describes
            with contextlib.suppress(OSError):
                (self.root / ".failed" / f"{entry.key}.json").unlink()
            return manifest

    def _build(
        self,
        entry: EnvPlan,
        repos: Path,
        tmp: Path,
        log: _Log,
        exclude_newer: bool | str,
        chosen: dict[str, Any],
        timeout: float,
        sources: Path | None = None,
    ) -> dict[str, Any]:
        started = time.monotonic()
        recipe = entry.recipe
        uv = uv_binary()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", str(tmp)),
            "LC_ALL": "C.UTF-8",
            **{
                k: v for k, v in os.environ.items() if k.startswith(("UV_", "PIP_INDEX", "PIP_EXTRA", "SSL_"))
            },
            **recipe.env_vars,
        }
        date = exclusion_date(entry, exclude_newer)
        uv_extra = ["--exclude-newer", date] if date else []
        date_exempt: dict[str, str] = {}  # under exclude_newer: package -> why the date does not bound it
        builds_held: dict[str, str] = {}  # the setuptools source builds are held to, and why (_hold_builds)
        built_here: dict[str, str] = {}  # packages built in the environment, not in isolation (_build_here)

        log.step("checkout")
        src = tmp / "src"
        store = shared_repo_store(repos)
        try:
            clone = store.clone_dir(entry.repo)
            store.check(entry.repo, entry.commit)
            missing = store.missing_objects(entry.repo, entry.commit)
            if missing is not None:
                raise missing
            git(["clone", "--quiet", "--shared", "--no-checkout", str(clone.resolve()), str(src)], tmp)
            git(["checkout", "--quiet", "--detach", entry.commit], src)
        except RepoUnavailable as exc:
            raise BuildFailed("checkout", str(exc), log.path) from None
        submodules = submodules_from_store(src, store, log)

        log.step("python")
        log.fh.write(json.dumps(chosen) + "\n")

        log.step("toolchain")  # before anything resolves: a compiled build this machine cannot do says so now
        lacking = toolchain.missing_for(entry.repo, chosen["executable"])
        if lacking:
            raise BuildFailed("toolchain", toolchain.refusal(entry.repo, lacking), log.path)
        libraries = toolchain.SYSTEM_LIBRARIES.get(entry.repo, ())
        libraries_missing = [part.key for part, _ in toolchain.missing_for(entry.repo, chosen["executable"],
                                                                           libraries)]  # fmt: skip
        taken: dict[str, dict[str, Any]] = {}  # the downloaded sources supplied from ``sources``
        if sources is not None:
            log.step("sources")
            try:
                taken = build_sources.supply(entry.repo, src, sources, log.fh.write)
            except build_sources.SourceUnusable as exc:
                raise BuildFailed("sources", str(exc), log.path) from None
        supplied = {record["key"] for record in taken.values()}
        # the files that ask the build for the system libraries the machine has, written where the build's
        # own download of their sources fails (below); the repository's own file, where it has one, wins;
        # a supplied source is built, not replaced by the system's
        present = [k for k in libraries if k not in libraries_missing and k not in supplied]
        offered = toolchain.build_settings(entry.repo, present)
        offered = {name: text for name, text in offered.items() if not (src / name).exists()}
        settings: dict[str, str] = {}

        log.step("venv")
        venv = tmp / "venv"
        log.run("venv", [uv, "venv", "--quiet", "--relocatable", "--seed", "--python", chosen["executable"],
                         str(venv)], cwd=tmp, env=env, timeout=timeout)  # fmt: skip
        python = str(venv / "bin" / "python")
        guard_pip(venv)
        run_env = {**env, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}:{env['PATH']}"}

        def uv_run(step: str, args: Sequence[str]) -> None:
            """``uv pip install ARGS``. Under ``exclude_newer`` the recipe's pins win and the date bounds the
            rest: a pinned name is exempt from the date, and when a resolution fails because the date
            filtered out what a pin needs (uv's hint names it), that package is exempt too and it runs
            again (``tox==4.16.0`` on a 2021 row brings the ``cachetools`` it requires). A source build
            that fails with the newest setuptools is tried again with the environment's own
            (``_hold_builds``), and the builds after it keep that one."""
            for arg in args:
                if "==" in arg and not arg.startswith("-") and package_name(arg) not in date_exempt:
                    date_exempt[package_name(arg)] = "pinned by the recipe"
            first: tuple[BuildFailed, str] | None = None  # the failure a remedy below was tried for
            remedies: list[str] = []  # what this call changed for its builds ("held", or a package's name)
            while True:
                dated = [f"--exclude-newer-package={n}=false" for n in sorted(date_exempt) if uv_extra]
                held = ["--build-constraints", str(tmp / BUILD_CONSTRAINTS)] if builds_held else []
                here = [f"--no-build-isolation-package={name}" for name in sorted(built_here)]
                argv = [uv, "pip", "install", "--python", python, *uv_extra, *dated, *held, *here, *args]
                try:
                    log.run(step, argv, cwd=src, env=run_env, timeout=timeout)
                    return
                except BuildFailed as exc:
                    first = first or (exc, log.last_output)
                    if remedies and toolchain.SOURCE_DOWNLOAD_FAILED in log.last_output:
                        raise  # they helped: the build got as far as its download, which the caller acts on
                    if len(remedies) < MAX_BUILD_REMEDIES:
                        if not builds_held and self._hold_builds(step, python, tmp, log, builds_held):
                            remedies.append("held")
                            continue
                        install = [uv, "pip", "install", "--python", python, *uv_extra]
                        name = self._build_here(step, install, src, run_env, timeout, log, built_here)
                        if name is not None:
                            remedies.append(name)
                            continue
                    if remedies:  # they did not help: the first failure stands, and they are undone
                        for remedy in remedies:
                            if remedy == "held":
                                builds_held.clear()
                            else:
                                built_here.pop(remedy, None)
                        log.last_output = first[1]
                        raise first[0] from None
                    newer = _filtered_by_date(log.last_output) - set(date_exempt)
                    if not uv_extra or not newer or len(date_exempt) >= MAX_DATE_EXEMPTIONS:
                        raise
                    for name in sorted(newer):
                        date_exempt[name] = f"what the pins need (step {step}): newer than the date"

        def uv_install(step: str, args: Sequence[str]) -> None:
            if args:
                log.step(step)
                uv_run(step, args)

        conda_relaxed: dict[str, str] = {}  # a conda pin -> the series whose wheels stand for it
        # the recipe's pip_packages pins are installed after the packages step and win over what it
        # resolved (SWE-bench's pip ran after conda): that step resolves under them, so that what it
        # installs works with them (matplotlib 3.7's environment.yml brings today's pandas, which needs
        # numpy 2, and its pip_packages then pin numpy==1.25.2: pandas would not import). Where the step
        # has no solution under them, it resolves without them, as SWE-bench's conda did
        later = _later_pins(replace_packages(list(recipe.pip_packages)))
        later_pins: dict[str, Any] = {"pins": later, "applied": bool(later)}
        if later:
            (tmp / LATER_PINS).write_text("\n".join(later) + "\n")

        def packages_run(args: Sequence[str]) -> None:
            """The packages step's install, under the later pins where it resolves with them."""
            if not later_pins["applied"]:
                uv_run("packages", args)
                return
            try:
                uv_run("packages", ["--constraint", str(tmp / LATER_PINS), *args])
            except BuildFailed:
                said = log.last_output
                if _NO_SOLUTION not in said or registry_misses(said) or failed_source_builds(said):
                    raise  # not the pins: a conda-only name or a failed build, which the caller handles
                lines = [ln.strip() for ln in said.splitlines()]
                why = next(
                    (ln for ln in lines if "Because" in ln), next(ln for ln in lines if _NO_SOLUTION in ln)
                )
                later_pins.update(applied=False, reason=f"no solution under them: {why[:300]}")
                log.fh.write("the packages step has no solution under the later pins: without them\n")
                uv_run("packages", args)

        def conda_install(conda: list[str], pip_lines: list[str]) -> list[str]:
            """Install a conda package list (as pip requirements) and ``pip_lines``; returns the conda
            packages not installed. conda's channels had builds PyPI lacks: a name pip's index lacks
            (xarray's ``cdms2``) is not installed, and the rest resolves; a pinned one with no wheel for
            this Python whose source build fails gets its release series' wheels (scikit-learn 1.3's
            ``numpy==1.19.2`` on Python 3.9: conda-forge built it, PyPI's wheels start at 1.19.3); an
            unpinned one that fails so (matplotlib's ``pycairo``, which needs the cairo libraries) is not
            installed. A ``pip_lines`` requirement is never changed."""
            log.step("packages")
            dropped: list[str] = []
            while conda or pip_lines:
                (tmp / "requirements.txt").write_text("\n".join(conda + pip_lines) + "\n")
                wheels = [f"--only-binary={name}" for name in sorted(_names(conda_relaxed.values()))]
                try:
                    packages_run([*wheels, "-r", str(tmp / "requirements.txt")])
                    return dropped
                except BuildFailed:
                    missing = registry_misses(log.last_output) & _names(conda)
                    failed = failed_source_builds(log.last_output) & _names(conda)
                    pins = [(c, _EXACT_PIN.fullmatch(c)) for c in conda if package_name(c) in failed]
                    relax = {c: f"{m['name']}=={m['minor']}.*" for c, m in pins if m is not None}
                    if not missing and relax:
                        conda_relaxed.update(relax)
                        conda = [relax.get(c, c) for c in conda]
                        continue
                    gone = missing or failed
                    if not gone:
                        raise
                    why = (
                        "conda only: not in the package index"
                        if missing
                        else "conda only here: no wheel for this Python, and its source build failed"
                    )
                    dropped += [f"{c} ({why})" for c in conda if package_name(c) in gone]
                    conda = [c for c in conda if package_name(c) not in gone]
            return dropped

        named = _names([*recipe.package_words(), *recipe.pip_packages, *recipe.requirements])
        if "setuptools" in named:
            setuptools = {"requirement": None, "reason": "the recipe names setuptools: its own wins"}
            pinned = [
                r for r in [*recipe.pip_packages, *recipe.package_words()] if _SETUPTOOLS_PIN.fullmatch(r)
            ]
            if pinned:  # first, so that what the steps before the one naming it build in it has it too
                setuptools.update(requirement=pinned[0], reason="the recipe's own pin, installed first")
                uv_install("setuptools", pinned[:1])
        else:
            setuptools = {"requirement": SETUPTOOLS_BOUND, "reason": SETUPTOOLS_WHY}
            if uv_extra:  # the bound, not the date, chooses it: in the builds' isolated environments too
                date_exempt["setuptools"] = SETUPTOOLS_DATE_WHY
            uv_install("setuptools", [SETUPTOOLS_BOUND])

        not_installed: list[str] = []
        reqs_file: str | None = None
        packages = recipe.packages
        if packages == "requirements.txt" or (packages.endswith(".txt") and " " not in packages):
            paths = recipe.reqs_path or (
                (packages,) if packages != "requirements.txt" else ("requirements.txt",)
            )
            try:
                reqs_file, lines = read_requirements(src, paths)
            except RequirementsMissing as exc:
                raise BuildFailed("packages", str(exc), log.path) from None
            (tmp / "requirements.txt").write_text("\n".join(lines) + "\n")
            log.step("packages")
            packages_run(["-r", str(tmp / "requirements.txt")])
        elif packages in ("environment.yml", "environment.yaml") or packages.endswith((".yml", ".yaml")):
            paths = recipe.env_yml_path or (packages,)
            try:
                reqs_file, conda, pip_lines, not_installed = read_environment_yml(src, paths)
            except RequirementsMissing as exc:
                raise BuildFailed("packages", str(exc), log.path) from None
            not_installed += conda_install(conda, pip_lines)
        elif packages:
            conda, not_installed = split_conda(recipe.package_words())
            not_installed += conda_install(replace_packages(conda), [])
        uv_install("pip_packages", replace_packages(list(recipe.pip_packages)))
        uv_install("requirements", replace_packages(clean_lines("\n".join(recipe.requirements))))

        pre_run, pre_not_run = self._pre_install(recipe.pre_install, src, log)
        apt = [pkg for step in pre_not_run for pkg in apt_packages(step)]

        log.step("install")
        installs = list(recipe.install)
        if recipe.source.startswith("inferred"):
            extras = sorted(declared_extras(src) & {"test", "tests", "testing", "dev"})
            installs = [DEFAULT_INSTALL + (f"[{extras[0]}]" if extras else "")]
        editable: str | None = None  # how the repository was installed editable, where it was
        for command in installs:
            argv = translate_install(command, uv, python, [])
            if argv is None:
                log.run("install", ["bash", "-c", command], cwd=src, env=run_env, timeout=timeout)
                continue
            target = _editable_target(argv[5:])
            try:
                try:
                    uv_run("install", argv[5:])
                except BuildFailed:
                    if settings or not offered or toolchain.SOURCE_DOWNLOAD_FAILED not in log.last_output:
                        raise
                    for name, text in offered.items():
                        (src / name).write_text(text)
                        log.fh.write(f"its download failed: wrote {name} for the system libraries:\n{text}")
                    settings.update(offered)
                    uv_run("install", argv[5:])
                editable = "PEP 660: the build backend's build_editable" if target else editable
            except BuildFailed:
                if target is None or "build_editable" not in log.last_output:
                    raise
                editable = self._develop(target, uv_run, python, src, log, run_env, timeout)

        compiled_here = self._compile_here(src, python, log, run_env, timeout)

        log.step("testbed")
        site = site_packages(venv)
        roots = point_at_testbed(site, src)
        log.fh.write(f"import roots: {roots}\n")

        log.step("overlay")
        kept = build_sources.overlay_files(entry.repo, src, taken)  # the same for every base's overlay
        generated = _generated_files(src, kept)
        (tmp / "overlay.tar").write_bytes(pack_overlay(src, generated))
        log.fh.write("\n".join(generated) + "\n")
        compiled = any(p.endswith((".so", ".pyd")) for p in generated)
        rebuild = REBUILD if compiled and (src / "setup.py").is_file() else None
        rebuilt: list[str] = []
        rebuild_needs: dict[str, Any] = {"installed": [], "not_installed": {}}
        unreadable: dict[str, str] = {}  # base commit -> why the clone cannot give its tree (_checkout_base)
        if rebuild is not None:
            ok = (
                subprocess.run([python, "-I", "-c", "import setuptools"], capture_output=True).returncode == 0
            )
            if not ok:  # the judge's rebuild needs it (a 3.12+ venv is seeded with pip alone)
                uv_install("rebuild", ["setuptools"])
            rebuild_needs = self._rebuild_requirements(src, tmp, log, uv, python, uv_run, env)
            rebuilt = self._base_overlays(entry, src, tmp, log, python, run_env, timeout, unreadable, kept)

        added, variants = self._base_requirements(
            entry, src, log, uv, venv, uv_extra, run_env, timeout, unreadable
        )

        runner = self._runner(recipe, src, log)
        # asked with the checkout as the workspace: the repository under test may be pytest itself
        probe = subprocess.run(
            [python, "-I", "-c", "import pytest"], capture_output=True, text=True,
            env={"PATH": env["PATH"], TESTBED_VARIABLE: str(src)},
        ) if runner == "pytest" else None  # fmt: skip
        if probe is not None and probe.returncode != 0:
            raise BuildFailed(
                "pytest",
                "pytest does not import in the environment, and the judge runs the tests with it: add "
                "pytest to the recipe's pip_packages",
                log.path,
            )

        log.step("freeze")
        pins = log.run("freeze", [uv, "pip", "freeze", "--python", python], cwd=tmp, env=env, timeout=300)
        shutil.rmtree(src)
        manifest = {
            "key": entry.key,
            "repo": entry.repo,
            "commit": entry.commit,
            "rows": entry.rows,
            "recipe": recipe.model_dump(mode="json"),
            "recipe_source": recipe.source,
            "python": chosen,
            "requirements_file": reqs_file,
            "pins": [line for line in pins.splitlines() if line.strip()],
            "not_installed": not_installed,
            "conda_pins_relaxed": conda_relaxed,
            "packages_under_pins": later_pins,
            "setuptools": setuptools,
            "builds_held": builds_held,
            "built_in_environment": built_here,
            "editable": editable,
            "compiled_in_environment": compiled_here,
            "pre_install_run": pre_run,
            "pre_install_not_run": pre_not_run,
            "system_packages": apt,
            "system_packages_missing": missing_packages(apt),
            "toolchain": list(toolchain.parts_for(entry.repo)),
            "system_libraries_missing": libraries_missing,
            "build_settings": settings,
            "build_sources": taken,
            "exclude_newer": uv_extra[1] if uv_extra else None,
            "exclude_newer_exempt": date_exempt if uv_extra else {},
            "runner": runner,
            "import_roots": roots,
            "overlay_files": generated,
            "compiled": compiled,
            "rebuild": list(rebuild) if rebuild else None,
            "base_overlays": rebuilt,
            "rebuild_requirements": rebuild_needs,
            "base_requirements": added,
            "base_environments": variants,
            "bases_unreadable": unreadable,
            "submodules": submodules,
            "build_s": round(time.monotonic() - started, 1),
            "size_bytes": _dir_size(tmp),
            "log": "build.log",
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        return manifest

    @staticmethod
    def _compile_here(src: Path, python: str, log: _Log, env: Mapping[str, str], timeout: float) -> dict:
        """The compiled parts built again in the environment (``setup.py build_ext --inplace``, as the
        judge rebuilds) where those the install built do not load against its numpy: uv builds a
        ``setup.py`` project in an isolated environment, where ``setup_requires`` or the build's own
        requirements fetched the newest numpy, and SWE-bench's pip built it in the environment (matplotlib
        3.1's ``ft2font``: "numpy.core.multiarray failed to import" under the recipe's numpy 1.16.6). {}
        where they load or nothing was compiled; else the modules that did not, the error and the step."""
        modules = [rel for rel in _generated_files(src) if rel.endswith((".so", ".pyd"))]
        if not modules or not (src / "setup.py").is_file():
            return {}
        failing = _unloadable(python, src, modules, env)
        numpy_abi = {rel: err for rel, err in failing.items() if _NUMPY_ABI.search(err)}
        if not numpy_abi:
            return {}
        log.step("install (compiled parts built again in the environment)")
        for rel, err in sorted(numpy_abi.items()):
            log.fh.write(f"{rel} does not load: {err}\n")
        log.run("install", [python, *REBUILD[1:]], cwd=src, env=env, timeout=timeout)
        still = _unloadable(python, src, sorted(numpy_abi), env)
        if still:
            rel, err = sorted(still.items())[0]
            raise BuildFailed(
                "install",
                f"{rel} does not load against the environment's numpy, built again there too: {err}",
                log.path,
            )
        return {
            "modules": sorted(numpy_abi),
            "error": sorted(numpy_abi.values())[0],
            "how": " ".join(REBUILD) + ": built in isolation, they did not load against the environment's "
            "numpy; SWE-bench's pip built a setup.py project in its environment",
        }

    @staticmethod
    def _hold_builds(step: str, python: str, tmp: Path, log: _Log, held: dict[str, str]) -> bool:
        """After a source build failed, hold the builds to the environment's setuptools (``held`` says
        which and why; True when the call should run again). uv builds each source distribution in an
        isolated environment with the newest setuptools, where SWE-bench's pip, in its conda environment,
        built a project without ``pyproject.toml`` with the environment's own; old ``setup.py`` files
        import what newer setuptools dropped (``setuptools.dep_util``, 70; ``pkg_resources`` in astropy
        3.1's ``ah_bootstrap``; ``setuptools.Feature``, 46). Not done where the failure was no source
        build, nor where the environment has no setuptools. An environment's setuptools older than the
        backend uv builds with (40.8.0: astropy 1.3's recipe pins 38.2.4) holds them to that one, the
        nearest to it that can build (it still has ``setuptools.Feature``, which MarkupSafe 1.0 imports)."""
        if not _SOURCE_BUILD_FAILED.search(log.last_output):
            return False
        ask = "import setuptools; print(setuptools.__version__)"
        probe = subprocess.run([python, "-I", "-c", ask], capture_output=True, text=True)
        version = probe.stdout.strip() if probe.returncode == 0 else ""
        if not version:
            return False
        why = "SWE-bench's pip built such projects with the environment's own"
        if tuple(int(part) for part in re.findall(r"\d+", version)[:2]) < LEGACY_BACKEND_SINCE:
            why = f"the environment has {version}, older than the backend uv builds with"
            version = ".".join(map(str, LEGACY_BACKEND_SINCE)) + ".0"
        (tmp / BUILD_CONSTRAINTS).write_text(f"setuptools=={version}\n")
        held.update(
            setuptools=version,
            reason=f"step {step}: a source build failed with the newest setuptools in its isolated "
            f"environment; {why}",
        )
        log.fh.write(f"source builds held to the environment's setuptools=={version} from here on\n")
        return True

    @staticmethod
    def _build_here(
        step: str,
        install: Sequence[str],
        src: Path,
        env: Mapping[str, str],
        timeout: float,
        log: _Log,
        built_here: dict[str, str],
    ) -> str | None:
        """After a source build failed importing a module it does not declare (scitools-iris's sdist imports
        ``six`` in its ``setup.py``): install that module's distribution into the environment, by the
        module's name, and build the package there instead of in an isolated environment, as pip built a
        ``setup.py`` project before PEP 517 (SWE-bench's conda environments: what the environment had, the
        build had). Returns the package's name (``built_here`` says why), or None where the failure was
        not that, or the package is built here already, or the module does not install by its name.
        ``install``: ``uv pip install`` into the environment, with the build's date bound."""
        output = log.last_output
        package, module = _FAILED_BUILD_OF.search(output), _NO_MODULE.search(output)
        if package is None or module is None or package_name(package[1]) in built_here:
            return None
        name, wanted = package_name(package[1]), module[1].split(".")[0]
        try:
            log.run(step, [*install, wanted], cwd=src, env=env, timeout=timeout)
        except BuildFailed:
            log.fh.write(f"{name}'s build imports {wanted}, which does not install by that name here\n")
            return None
        built_here[name] = (
            f"step {step}: its build imports {wanted}, which it does not declare: built in the environment, "
            f"with {wanted} installed there, as pip built setup.py projects"
        )
        log.fh.write(f"{name} is built in the environment from here on ({wanted} installed)\n")
        return name

    @staticmethod
    def _runner(recipe: Recipe, src: Path, log: _Log) -> str:
        """The runner the judge plays for the recipe's test command (``toolgym.swe.runners``): pytest,
        which must then import in the environment; or the repository's own program (Django's
        ``tests/runtests.py``, SymPy's ``bin/test``), which the checkout must hold."""
        command = recipe.test_cmd[-1] if recipe.test_cmd else ""
        program = split_command(command)[1] if command.strip() else "pytest"
        kind = runner_kind(program)
        log.step("pytest" if kind == "pytest" else "runner")
        if kind != "pytest":
            if not (src / program).is_file():
                raise BuildFailed(
                    "runner", f"the test command runs {program}, which the checkout does not hold", log.path
                )
            log.fh.write(f"the judge plays the {kind} runner for {command!r}\n")
        return kind

    @staticmethod
    def _pre_install(steps: Sequence[str], src: Path, log: _Log) -> tuple[list[str], list[str]]:
        """Run the ``pre_install`` steps that only edit the repository in the checkout (before the install,
        as SWE-bench's repository script does); the others are system steps, never run. Returns (run, not
        run)."""
        ran: list[str] = []
        system: list[str] = []
        if steps:
            log.step("pre_install")
        for step in steps:
            chain = repository_step(step, src)
            if chain is None:
                log.fh.write(f"not run (a system step): {step}\n")
                system.append(step)
                continue
            log.fh.write(f"$ {step}\n")
            try:
                run_repository_step(chain, src, step)
            except StepFailed as exc:
                raise BuildFailed("pre_install", str(exc), log.path) from None
            ran.append(step)
        return ran, system

    @staticmethod
    def _develop(
        target: tuple[str, list[str], list[str]],
        uv_run: Callable[[str, Sequence[str]], None],
        python: str,
        src: Path,
        log: _Log,
        env: Mapping[str, str],
        timeout: float,
    ) -> str:
        """The legacy editable install, as pip falls back to it when the build backend has no
        ``build_editable`` (setuptools before 64, which old recipes and ``pyproject.toml`` files pin: Django
        3.0/3.1, astroid 2.x's ``setuptools~=62.6``): the project's dependencies (and extras) with uv from
        its own metadata, then ``setup.py develop --no-deps`` with the environment's setuptools."""
        path, extras, rest = target
        project = (src / path).resolve()
        meta = next((n for n in ("setup.py", "setup.cfg", "pyproject.toml") if (project / n).is_file()), None)
        if meta is None:
            raise BuildFailed("install", f"no setup.py, setup.cfg or pyproject.toml in {path}", log.path)
        log.step("install (legacy editable: setup.py develop)")
        how = "setup.py develop: the build backend has no build_editable (PEP 660), as pip falls back to"
        listed = ["-r", str(project / meta), *(f"--extra={e}" for e in extras), *rest]
        try:
            uv_run("install", listed)
        except BuildFailed:
            if (project / "pyproject.toml").is_file() or not (project / "setup.py").is_file():
                raise
            # a setup.py project whose setup.py imports what it does not declare (astropy 1.3's imports
            # numpy): its dependencies from `setup.py egg_info` run in the environment, as pip ran a
            # setup.py project's setup.py there (uv's own builds are isolated, or need setuptools 40.8)
            info = Path(tempfile.mkdtemp(prefix="egg-info-", dir=project.parent))
            try:
                log.run("install", [python, "setup.py", "egg_info", "--egg-base", str(info)], cwd=project,
                        env=env, timeout=timeout)  # fmt: skip
                needs = next(info.glob("*.egg-info/requires.txt"), None)
                wanted = egg_requirements(needs.read_text() if needs else "", extras)
            finally:
                shutil.rmtree(info, ignore_errors=True)
            if wanted:
                uv_run("install", [*wanted, *rest])
            how += "; its dependencies read with its setup.py run in the environment (setup.py egg_info)"
        setup = ["setup.py"]
        if not (project / "setup.py").is_file():  # setup.cfg alone: pip's shim
            setup = ["-c", "from setuptools import setup; setup()"]
        log.run("install", [python, *setup, "develop", "--no-deps"], cwd=project, env=env, timeout=timeout)
        return how

    @staticmethod
    def _base_requirements(
        entry: EnvPlan,
        src: Path,
        log: _Log,
        uv: str,
        venv: Path,
        uv_extra: Sequence[str],
        env: Mapping[str, str],
        timeout: float,
        unreadable: dict[str, str],
    ) -> tuple[dict[str, list[str]], dict[str, dict[str, list[str]]]]:
        """What each base commit that declares its dependencies otherwise than the setup commit needs:
        ``uv pip install --dry-run`` of the tree at that commit, against the environment as built (never the
        project itself). Distributions it would only add are installed into the environment (``{base:
        ["name==version"]}``, the first result). Where it would change an installed one (pylint-7080's base
        requires ``astroid<=2.12.0-dev0``, its setup commit brought 2.12.13), as SWE-bench's harness does
        when it reinstalls the repository at the base commit, that base gets an environment of its own:
        the environment copied to ``bases/<commit>/venv`` (relocatable), the changed and added versions
        installed there (``{base: {"changed": [...], "added": [...]}}``, the second result); its rows run
        with that interpreter. A base whose tree does not resolve here is left with the environment."""
        python = str(venv / "bin" / "python")
        added: dict[str, list[str]] = {}
        variants: dict[str, dict[str, list[str]]] = {}
        for base in _bases_changing(entry, src, log, "base requirements", DEPENDENCY_FILES):
            log.step(f"requirements at {base[:12]}")
            if not _checkout_base(entry, src, base, log, unreadable):
                continue
            try:
                argv = [uv, "pip", "install", "--dry-run", "--python", python, *uv_extra, str(src)]
                log.run("base requirements", argv, cwd=src, env=env, timeout=timeout)
            except BuildFailed:
                # the tree at this commit does not resolve here: the rows still play with what is installed
                log.fh.write(f"base commit {base}: its requirements do not resolve here; left as built\n")
                continue
            finally:
                git(["checkout", "--quiet", "--force", "--detach", entry.commit], src)
                _update_submodules(src)
            plan = [m.groups() for m in map(_PLANNED.match, log.last_output.splitlines()) if m]
            removed = {package_name(name) for sign, name, _, _ in plan if sign == "-"}
            planned = [(name, version) for sign, name, version, source in plan if sign == "+" and not source]
            new = sorted(f"{n}=={v}" for n, v in planned if package_name(n) not in removed)
            changed = sorted(f"{n}=={v}" for n, v in planned if package_name(n) in removed)
            if changed:
                variant = venv.parent / "bases" / base / "venv"
                shutil.copytree(venv, variant, symlinks=True)
                argv = [uv, "pip", "install", "--python", str(variant / "bin" / "python"), *uv_extra]
                log.run("base requirements", [*argv, *changed, *new], cwd=src, env=env, timeout=timeout)
                variants[base] = {"changed": changed, "added": new}
            elif new:
                log.run("base requirements", [uv, "pip", "install", "--python", python, *uv_extra, *new],
                        cwd=src, env=env, timeout=timeout)  # fmt: skip
                added[base] = new
        return added, variants

    @staticmethod
    def _rebuild_requirements(
        src: Path,
        tmp: Path,
        log: _Log,
        uv: str,
        python: str,
        uv_run: Callable[[str, Sequence[str]], None],
        env: Mapping[str, str],
    ) -> dict[str, Any]:
        """Install what the project declares its build needs (``[build-system] requires``) and the
        environment lacks, for the rebuild (``REBUILD``), which runs in the environment, not in an isolated
        build environment as the install did: astropy's ``setup.py`` imports ``extension_helpers`` and
        cythonizes with the ``cython`` its ``pyproject.toml`` pins, and its tests need neither. Every
        installed distribution is held where it is (a constraint each): a requirement that would change
        one (``oldest-supported-numpy`` pins an older numpy) is not installed, and the result says why.
        Returns ``{"installed": [...], "not_installed": {requirement: why}}``."""
        result: dict[str, Any] = {"installed": [], "not_installed": {}}
        requires = build_requires(src)
        if not requires:
            return result
        log.step("rebuild requirements")
        pins = log.run("rebuild", [uv, "pip", "freeze", "--python", python], cwd=tmp, env=env, timeout=300)
        held = [line for line in pins.splitlines() if "==" in line and not line.startswith("-")]
        have = _names(line.split("==")[0] for line in held)
        wanted = [r for r in requires if package_name(r) not in have]
        if not wanted:
            return result
        (tmp / "installed.txt").write_text("\n".join(held) + "\n")
        constrained = ["--constraints", str(tmp / "installed.txt")]
        try:
            uv_run("rebuild", [*constrained, *wanted])
            result["installed"] = wanted
            return result
        except BuildFailed:
            pass
        for requirement in wanted:  # together they do not resolve: each that does, alone
            try:
                uv_run("rebuild", [*constrained, requirement])
                result["installed"].append(requirement)
            except BuildFailed as exc:
                result["not_installed"][requirement] = (
                    f"it would change a distribution the environment has, or does not resolve here ({exc})"
                )
        return result

    def _base_overlays(
        self,
        entry: EnvPlan,
        src: Path,
        tmp: Path,
        log: _Log,
        python: str,
        env: Mapping[str, str],
        timeout: float,
        unreadable: dict[str, str],
        kept: Sequence[str],
    ) -> list[str]:
        """Compiled parts per base commit whose compiled sources differ from the setup commit's: rebuilt at
        that commit once, packed as ``overlays/<commit>.tar`` (an episode starts with what it compiles to)."""
        done = []
        for base in _bases_changing(entry, src, log, "overlay", [f"*{e}" for e in COMPILED_SOURCES]):
            log.step(f"overlay at {base[:12]}")
            # --force: the pre_install edits of tracked files (the install's, done) give way to the base's
            if not _checkout_base(entry, src, base, log, unreadable):
                continue
            argv = [python if word == "python" else word for word in REBUILD]
            log.run("overlay", argv, cwd=src, env=env, timeout=timeout)
            (tmp / "overlays").mkdir(exist_ok=True)
            (tmp / "overlays" / f"{base}.tar").write_bytes(pack_overlay(src, _generated_files(src, kept)))
            done.append(base)
        git(["checkout", "--quiet", "--force", "--detach", entry.commit], src)
        _update_submodules(src)
        return done

    @staticmethod
    def _python(
        entry: EnvPlan, found: Mapping[tuple[int, int], str], download: bool, log: _Log
    ) -> dict[str, Any]:
        """The interpreter for the recipe (``choose_python``); with ``download``, one that uv installs (its
        managed Pythons) when the machine has neither the version asked for nor a newer one."""
        try:
            return choose_python(entry.recipe.python, found)
        except NoInterpreter as exc:
            if not download or entry.recipe.python is None:
                raise BuildFailed("python", str(exc), log.path) from None
        log.step("python download")
        env = {**os.environ, "UV_PYTHON_DOWNLOADS": "automatic"}
        log.run("python", [uv_binary(), "python", "install", entry.recipe.python], cwd=log.path.parent,
                env=env, timeout=1800)  # fmt: skip
        try:
            chosen = choose_python(entry.recipe.python, machine_pythons())
        except NoInterpreter as exc:
            raise BuildFailed(
                "python", f"uv installed Python {entry.recipe.python}, and {exc}", log.path
            ) from None
        return {**chosen, "reason": f"{chosen['reason']}; downloaded by uv python install"}

    def overlay_for(self, key: str, base: str) -> bytes:
        """The compiled parts to lay over ``base``: its own when its compiled sources differ, else the
        environment's."""
        path = self.root / key / "overlays" / f"{base}.tar"
        return path.read_bytes() if path.is_file() else self.overlay(key)


def exclusion_date(entry: EnvPlan, exclude_newer: bool | str) -> str | None:
    """The date uv's ``--exclude-newer`` bounds ``entry``'s resolution with: the one given (a ``str``), else
    (``True``) its newest row's ``created_at``; None for no bound."""
    if isinstance(exclude_newer, str):
        return exclude_newer
    return entry.created_at if exclude_newer and entry.created_at else None


def build_all(
    plans: Mapping[str, EnvPlan],
    repos: str | Path,
    out: str | Path,
    *,
    jobs: int = 1,
    exclude_newer: bool | str = False,
    download_python: bool = False,
    sources: str | Path | None = None,
    progress: Callable[[EnvPlan, dict[str, Any] | BuildFailed], None] | None = None,
) -> dict[str, dict[str, Any] | BuildFailed]:
    """Build every plan (``jobs`` at a time); per key its manifest or its ``BuildFailed``."""
    store = EnvironmentStore(out)
    pythons = machine_pythons()
    results: dict[str, dict[str, Any] | BuildFailed] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {
            pool.submit(
                store.build,
                entry,
                repos,
                exclude_newer=exclude_newer,
                pythons=pythons,
                download_python=download_python,
                sources=sources,
            ): entry
            for entry in plans.values()
        }
        for future in as_completed(futures):
            entry = futures[future]
            try:
                result: dict[str, Any] | BuildFailed = future.result()
            except BuildFailed as exc:
                result = exc
            results[entry.key] = result
            if progress is not None:
                progress(entry, result)
    return results


__all__ = [
    "COMPILED_SOURCES",
    "TESTBED_VARIABLE",
    "BuildFailed",
    "EnvPlan",
    "EnvironmentMissing",
    "EnvironmentStore",
    "build_all",
    "plan",
]
