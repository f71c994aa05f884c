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
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path

from toolgym.core.task import Task
from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.shared import TERMINAL_LINKS, TERMINAL_PRELOAD, shared_slots

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
