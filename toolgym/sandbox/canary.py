"""The canary: one run at sandbox start that proves a child can use the interpreter it was given.

Why: a sandbox whose children cannot read their own packages (the interpreter under a 0700 directory
another uid cannot enter, a venv reached through a symlink the view does not show) still runs
``print(1)``, and every honest solution that imports numpy fails. A code verifier would then score correct
code 0.0 with no error, and a training run would learn that numpy is wrong. The canary turns that into a
*broken* sandbox: ``LocalSandbox.broken`` says why, ``strict=True`` refuses to start, and every run and
session call is a ``sandbox_error`` (verdicts are errors, the python tool answers ``infra_error``).

What it checks, from inside a real child with every layer in force:

- every ``sys.path`` entry that exists on the host can be listed;
- the preloaded modules' files can be read, and the stdlib's C extensions and numpy (where the host has
  them) import from disk.

The verdict is kept per process and configuration (interpreter, layers, preload, extra paths): sandboxes
started alike in one process share it, so only the first pays the ~0.2 s a numpy import costs.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
from collections.abc import Callable, Iterable

# Common C extensions of the standard library: what a solution reaches for (hashing, sqlite, decimal,
# compression, ctypes, sockets' module); each checked only where the host interpreter has it.
STDLIB_EXTENSIONS: tuple[str, ...] = (
    "_ssl",
    "_hashlib",
    "_sqlite3",
    "_ctypes",
    "_decimal",
    "_json",
    "_socket",
    "select",
    "zlib",
    "_bz2",
    "_lzma",
    "_struct",
    "array",
    "math",
    "_datetime",
    "_pickle",
    "_csv",
    "unicodedata",
    "_posixsubprocess",
    "mmap",
)
_MARK = "toolgym-canary "

_CODE = """
import importlib, json, os, sys
problems = []
host_paths = set({paths!r})
for entry in sys.path:
    if entry in host_paths:
        try:
            os.listdir(entry)
        except OSError as exc:
            problems.append(f"sys.path entry {{entry}}: {{exc.strerror}}")
for name in {modules!r}:
    try:
        module = sys.modules.get(name) or importlib.import_module(name)
        path = getattr(module, "__file__", None)
        if path:
            with open(path, "rb") as fh:
                fh.read(1)
    except BaseException as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        problems.append(f"import {{name}}: {{type(exc).__name__}}: {{first}}")
print({mark!r} + json.dumps(problems))
"""

_verdicts: dict[tuple, str | None] = {}
_lock = threading.Lock()


def canary_modules(preloaded: Iterable[str]) -> list[str]:
    """What the canary imports: the preload, the stdlib's C extensions and numpy, where the host has them."""
    names = [*preloaded, *STDLIB_EXTENSIONS, "numpy"]
    out: list[str] = []
    for name in names:
        if name not in out and _findable(name):
            out.append(name)
    return out


def _findable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def canary_code(modules: Iterable[str], host_paths: Iterable[str]) -> str:
    return _CODE.format(paths=sorted(host_paths), modules=list(modules), mark=_MARK)


def judge(status: str, stdout: str, stderr: str, detail: str = "") -> str | None:
    """Why the canary run shows a broken sandbox, or None when it is healthy."""
    line = next((x for x in stdout.splitlines() if x.startswith(_MARK)), None)
    if status != "ok" or line is None:
        why = detail or (stderr.strip().splitlines() or [""])[-1]
        return f"the canary run ended with status {status}: {why[:300]}"
    problems = json.loads(line[len(_MARK) :])
    if problems:
        return (
            "a sandboxed child cannot use its interpreter: "
            + "; ".join(problems[:5])
            + (f" (and {len(problems) - 5} more)" if len(problems) > 5 else "")
        )
    return None


def cached_verdict(key: tuple, compute: Callable[[], str | None]) -> str | None:
    """The verdict for ``key``, computing it once per process (under a lock: sandboxes may start at once)."""
    with _lock:
        if key not in _verdicts:
            _verdicts[key] = compute()
        return _verdicts[key]


def forget() -> None:
    """Drop the kept verdicts (tests that break a sandbox on purpose)."""
    with _lock:
        _verdicts.clear()


def host_paths() -> list[str]:
    """The ``sys.path`` entries that exist here (a missing zip entry is not a fault of the sandbox)."""
    import os

    return [p for p in sys.path if p and os.path.isdir(p)]
