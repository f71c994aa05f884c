"""The interpreters SWE-v0's repositories run with: ``python=`` one for all, or one per repository.

Each repository's tests need its own dependencies, so a store of many repositories comes with a venv per
repository (what SWE-bench's per-repository images hold). ``python=`` takes an interpreter or a venv
directory, or a mapping ``{"owner/name": interpreter, ..., "*": default}``. An interpreter other than
toolgym's own is made visible in the sandbox (its prefix and ``sys.path``, read-only, as the sandbox's view
exposes toolgym's own), its ``bin`` goes first on the agent's ``PATH``, and the judge runs the tests with it
(``python -I``). A path that names no interpreter is an error when the env is made, not a verdict error per
episode.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from toolgym.core.task import Task
from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.shared import TERMINAL_LINKS, TERMINAL_PRELOAD, shared_slots


class NoInterpreter(LookupError):
    """No interpreter of the version a recipe asks for, nor a newer one, is on this machine."""


_PROBE = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]))"


def interpreter(path: str | os.PathLike[str]) -> str:
    """The interpreter at ``path``: a venv or prefix directory (its ``bin/python``) or an executable. The
    path is kept as given (a venv's ``bin/python`` links to its base; resolving it would lose the venv)."""
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "bin" / "python"
    if not (p.is_file() and os.access(p, os.X_OK)):
        raise FileNotFoundError(
            f"python={path!s}: no interpreter there (give a venv directory or an executable)"
        )
    return str(p.absolute())


@lru_cache(maxsize=64)
def interpreter_paths(python: str) -> tuple[str, ...]:
    """The directories an interpreter reads (its prefixes and ``sys.path``), to expose in the sandbox."""
    try:
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
        found = json.loads(proc.stdout)
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        raise FileNotFoundError(f"python={python}: it did not run ({exc})") from None
    return tuple(sorted({p for p in found if p and os.path.isdir(p)} | {os.path.dirname(python)}))


def interpreter_for(python: str | os.PathLike[str] | Mapping[str, str] | None) -> Callable[[Task], str]:
    """``task -> interpreter`` for ``python=`` (module docstring); a repository the mapping leaves out runs
    with its ``"*"`` entry, else toolgym's own interpreter."""
    if python is None:
        return lambda task: sys.executable
    if not isinstance(python, Mapping):
        one = interpreter(python)
        return lambda task: one
    chosen = {repo: interpreter(path) for repo, path in python.items()}
    default = chosen.pop("*", sys.executable)
    return lambda task: chosen.get(task.data.get("repo", ""), default)


def interpreters(python: str | os.PathLike[str] | Mapping[str, str] | None) -> list[str]:
    """Every interpreter ``python=`` names."""
    if python is None:
        return [sys.executable]
    if not isinstance(python, Mapping):
        return [interpreter(python)]
    return sorted({interpreter(p) for p in python.values()})


_sandboxes: dict[tuple[int, tuple[str, ...]], LocalSandbox] = {}
_lock = threading.Lock()


def sandbox_for(pythons: list[str]) -> LocalSandbox | None:
    """A process-wide terminal sandbox that also exposes these interpreters (None when toolgym's own is the
    only one: the shared terminal sandbox serves it)."""
    others = [p for p in pythons if p != sys.executable]
    if not others:
        return None
    paths = tuple(sorted({d for p in others for d in interpreter_paths(p)}))
    key = (os.getpid(), paths)
    with _lock:
        if key not in _sandboxes:
            _sandboxes[key] = LocalSandbox(
                workers=2,
                slots=shared_slots(),
                links=TERMINAL_LINKS,
                preload=TERMINAL_PRELOAD,
                extra_paths=paths,
            )
        return _sandboxes[key]


def _version_of(exe: str) -> tuple[int, int] | None:
    try:
        out = subprocess.run(
            [exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.fullmatch(r"(\d+)\.(\d+)", out)
    return (int(match[1]), int(match[2])) if match else None


def machine_pythons() -> dict[tuple[int, int], str]:
    """The interpreters this machine has, by minor version: ``TOOLGYM_SWE_PYTHONS`` (paths separated by
    ``os.pathsep``) when set, else ``pythonX.Y`` on ``PATH`` (pyenv's shims skipped: they fail for versions
    not selected), pyenv's and uv's installed versions, and this interpreter."""
    listed = os.environ.get("TOOLGYM_SWE_PYTHONS")
    candidates: list[str] = []
    if listed:
        candidates = [p for p in listed.split(os.pathsep) if p]
    else:
        for folder in os.environ.get("PATH", "").split(os.pathsep):
            if not folder or "shims" in Path(folder).parts:
                continue
            candidates.extend(str(p) for p in sorted(Path(folder).glob("python3.*")) if p.name[7:].isdigit())
        roots = [os.environ.get("PYENV_ROOT") or str(Path.home() / ".pyenv")]
        for root in roots:
            candidates.extend(str(p) for p in sorted(Path(root).glob("versions/3.*/bin/python3.*")))
        uv_dir = Path(os.environ.get("UV_PYTHON_INSTALL_DIR") or Path.home() / ".local/share/uv/python")
        candidates.extend(str(p) for p in sorted(uv_dir.glob("cpython-3.*/bin/python3.*")))
        candidates.append(sys.executable)
    found: dict[tuple[int, int], str] = {}
    for exe in candidates:
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)) or exe.endswith("-config"):
            continue
        version = _version_of(exe)
        if version is not None and version not in found:
            found[version] = exe
    return found


def choose_python(asked: str | None, available: Mapping[tuple[int, int], str]) -> dict[str, Any]:
    """The interpreter for a recipe's ``python``: that version, else the nearest newer minor (why is
    recorded), else ``NoInterpreter`` naming what the machine has. No version asked: this interpreter's."""
    have = ", ".join(f"{a}.{b}" for a, b in sorted(available)) or "none"
    if asked is None:
        mine = sys.version_info[:2]
        exe = available.get(mine) or next(iter(available.values()), None)
        if exe is None:
            raise NoInterpreter("no Python interpreter found")
        return {"asked": None, "used": "{}.{}".format(*(_version_of(exe) or mine)), "executable": exe,
                "reason": "the recipe names no version"}  # fmt: skip
    major, minor = (int(x) for x in asked.split(".")[:2])
    want = (major, minor)
    if want in available:
        return {"asked": asked, "used": asked, "executable": available[want], "reason": "as asked"}
    newer = sorted(v for v in available if v[0] == want[0] and v > want)
    if not newer:
        raise NoInterpreter(
            f"the recipe asks for Python {asked} and this machine has no {asked} or newer 3.x "
            f"(it has {have}); install one (pyenv, uv python install) or list it in TOOLGYM_SWE_PYTHONS",
        )
    used = newer[0]
    return {
        "asked": asked,
        "used": f"{used[0]}.{used[1]}",
        "executable": available[used],
        "reason": f"no Python {asked} on this machine (it has {have}): the nearest newer minor",
    }
