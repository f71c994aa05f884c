"""The life of a forked child, from fork to exit: isolate itself, become a fresh ``python -c``, run code.

``child_main`` is what the fork server's ``os.fork()`` leads to: it sets up the child's descriptors, applies
the isolation layers (:mod:`toolgym.sandbox.child_setup`), and then runs the program or the session loop.
The child is a fork of the warm fork server, so it starts with the server's modules already imported. This
module resets everything that would otherwise leak from the server or differ from a fresh interpreter:
the environment, stdio objects, ``sys.argv``, ``__main__``, random seeds, cached temp dirs. Exit follows the
interpreter's own order (join non-daemon threads, run atexit handlers, flush) and then ``os._exit``, so no
code of the fork server ever runs again in the child.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import io
import json
import linecache
import marshal
import os
import resource
import signal
import sys
import time
import traceback
import types
from typing import TYPE_CHECKING

from toolgym.sandbox import _linux as lx
from toolgym.sandbox.child_setup import ChildSpec, enter_child, lock_down
from toolgym.sandbox.processes import lifeline_alive
from toolgym.sandbox.protocol import frame_json, read_frame_fd, wipe

if TYPE_CHECKING:
    from toolgym.sandbox.server_plan import ServerPlan

STATUS_FD = 3  # run: status frames to the server; session: the control channel to the parent
SETUP_FAILED_EXIT = 121
_hard_exit = os._exit  # bound once: sandboxed code may replace os._exit in its (forked) copy of this module

# Old stdio objects of the server: kept alive so their finalizers never close fds 0-2 of the child.
_KEEP: list[object] = []


def child_env(cwd: str) -> dict[str, str]:
    """The complete environment of sandboxed code: nothing inherited from the host."""
    bindir = os.path.dirname(sys.executable)
    return {
        "PATH": f"{bindir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": cwd,
        "TMPDIR": cwd,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "SHELL": "/bin/sh",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONHASHSEED": "0",  # as the fork server's own (client.SERVER_ENV): python subprocesses hash alike
    }


def write_status(obj: dict) -> None:
    """Send one JSON frame on fd 3 (before user code runs this is trusted by the server)."""
    os.write(STATUS_FD, frame_json(json.dumps(obj).encode()))


def _fresh_stdio() -> tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]:
    """stdin/stdout/stderr objects on fds 0-2, configured like ``python -c`` with pipes."""
    return (
        io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"),
        io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"),
        io.TextIOWrapper(
            io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
            encoding="utf-8",
            errors="backslashreplace",
            line_buffering=True,
        ),
    )


_STDIO: list[tuple[io.TextIOWrapper, io.TextIOWrapper, io.TextIOWrapper]] = []


def prepare_server_interpreter(default_cwd: str) -> None:
    """Once, in the fork server: everything of ``prepare_interpreter`` that does not depend on the run.

    Work done here is not repeated (nor copied page by page) in every child: the environment template,
    unused stdio objects for the children, and dropping the sandbox's own modules from ``sys.modules`` so
    sandboxed code cannot import them from memory.
    """
    os.environ.clear()
    os.environ.update(child_env(default_cwd))
    _STDIO.append(_fresh_stdio())
    for name in [m for m in sys.modules if m == "toolgym" or m.startswith("toolgym.")]:
        del sys.modules[name]


def prepare_interpreter(cwd: str, files: dict | None) -> None:
    """In the child: make this forked process look like a fresh ``python -s -P -c`` started in ``cwd``."""
    if os.environ.get("HOME") != cwd:  # a per-run host tmp dir (no private tmpfs)
        os.environ.update(HOME=cwd, TMPDIR=cwd)
    os.chdir(cwd)
    tempfile = sys.modules.get("tempfile")
    if tempfile is not None:  # forget a temp dir the server may have cached
        tempfile.tempdir = None  # type: ignore[attr-defined]  # a bare ModuleType to mypy
    for name, data in (files or {}).items():
        path = os.path.join(cwd, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data if isinstance(data, bytes) else data.encode())
    _KEEP.extend((sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__))
    stdin, stdout, stderr = _STDIO[0] if _STDIO else _fresh_stdio()
    # the originals are replaced on purpose (typeshed declares them Final: programs should not)
    sys.stdin = sys.__stdin__ = stdin  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = stdout  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = stderr  # type: ignore[misc]
    sys.argv = ["-c"]
    np = sys.modules.get("numpy")
    if np is not None:  # a fresh process seeds numpy's global generator from the OS; so must we
        with contextlib.suppress(Exception):
            np.random.seed()


def fresh_main() -> dict:
    """A new ``__main__`` module namespace (registered, so pickling and multiprocessing find it)."""
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = module
    return module.__dict__


def _system_exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def run_code(code: str, namespace: dict, filename: str = "<string>") -> tuple[int, str | None]:
    """Execute ``code`` like ``python -c``; returns (exit code, name of the uncaught exception or None).

    The source is registered with linecache so tracebacks show the offending lines, which is what a model
    needs to fix its code. The traceback starts at the user's code, not at this function.
    """
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    try:
        exec(compile(code, filename, "exec"), namespace)
    except SystemExit as exc:
        return _system_exit_code(exc), None
    except BaseException as exc:
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        exc.__traceback__ = tb
        try:
            if sys.excepthook is sys.__excepthook__:
                traceback.print_exception(exc)  # the pure-Python printer reads linecache; the C one does not
            else:
                sys.excepthook(type(exc), exc, tb)
        except BaseException:
            pass
        exit_code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        return exit_code, type(exc).__name__
    return 0, None


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()


def finish_run(exit_code: int, exc_name: str | None) -> None:
    """Shut down like the interpreter would, report how, and leave without running server code."""
    try:
        threading = sys.modules.get("threading")  # only if the program imported it
        if threading is not None:
            with contextlib.suppress(BaseException):
                threading._shutdown()  # join non-daemon threads
        with contextlib.suppress(BaseException):
            atexit._run_exitfuncs()
        _flush()
        if exc_name:
            with contextlib.suppress(OSError):
                write_status({"exc": exc_name})
    finally:
        os._exit(exit_code)


def _usage() -> tuple[float, int]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    return cpu, max(own.ru_maxrss, kids.ru_maxrss) * 1024


def session_loop() -> None:
    """Serve session calls on fd 3 until the parent closes it: one namespace, one call at a time."""
    namespace = fresh_main()
    calls = 0
    while True:
        try:
            raw = read_frame_fd(STATUS_FD)
        except Exception:
            raw = None
        if raw is None:
            os._exit(0)
        request = json.loads(raw)
        calls += 1
        stdin = request.get("stdin")
        if stdin is not None:
            sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()), encoding="utf-8")
        cpu0, _ = _usage()
        exit_code, exc_name = run_code(request["code"], namespace, filename=f"<cell {calls}>")
        _flush()
        cpu1, peak = _usage()
        write_status({"exit_code": exit_code, "exc": exc_name, "cpu_s": cpu1 - cpu0, "peak": peak})


def child_main(  # pragma: no cover - runs in the child
    plan: ServerPlan,
    kind: str,
    header: dict,
    buffer: bytearray,
    size: int,
    uid: int,
    fds: dict[str, int],
    lifeline_r: int,
) -> None:
    """Everything a freshly forked child does; never returns (it ``_exit``s).

    ``buffer[:size]`` is the request payload the server received but never parsed: it is parsed here and
    this copy wiped at once. ``fds`` are the child's ends of its stdout/stderr pipes and its status (run) or
    control (session) channel; ``lifeline_r`` is the read end of the pipe whose hang-up means the fork server
    is gone. Setup failures are reported as a ``setup_error`` status frame and exit ``SETUP_FAILED_EXIT``;
    a finished setup as ``{"ready": true, "t": <time.monotonic()>}``, the time a run's timeout counts from.
    """
    code = SETUP_FAILED_EXIT
    try:
        os.setsid()
        lx.prctl(lx.PR_SET_PDEATHSIG, signal.SIGKILL)
        if not lifeline_alive(lifeline_r):
            _hard_exit(code)
        payload = marshal.loads(memoryview(buffer)[:size]) if size else {}
        wipe(buffer, size)
        stdin = payload.get("stdin")
        if stdin is not None:
            stdin_fd = os.memfd_create("stdin")
            os.write(stdin_fd, stdin if isinstance(stdin, bytes) else stdin.encode())
            os.lseek(stdin_fd, 0, os.SEEK_SET)
        else:
            stdin_fd = os.open("/dev/null", os.O_RDONLY)
        lifeline = STATUS_FD + 1
        wanted = {0: stdin_fd, 1: fds["out"], 2: fds["err"], STATUS_FD: fds["ctl"]}
        wanted[lifeline] = lifeline_r
        # Move every source above the target range first, so no dup2 clobbers a source still needed.
        high = {target: fcntl.fcntl(src, fcntl.F_DUPFD, 256) for target, src in wanted.items()}
        for target, src in high.items():
            os.dup2(src, target)
        os.closerange(lifeline + 1, 1 << 20)
        try:
            spec = ChildSpec(uid=uid, limits=header["limits"], host_tmp=header.get("host_tmp"))
            cwd = enter_child(plan, spec)
            lx.prctl(lx.PR_SET_PDEATHSIG, signal.SIGKILL)  # a uid change clears it: set it again
            if not lifeline_alive(lifeline):
                _hard_exit(code)
            os.close(lifeline)
            prepare_interpreter(cwd, payload.get("files"))
            lock_down(plan)
            if header.get("setup_delay_s"):  # tests only: a slow machine's setup (ForkServer.setup_delay_s)
                time.sleep(header["setup_delay_s"])
        except BaseException as exc:
            write_status({"setup_error": f"{type(exc).__name__}: {exc}"})
            _hard_exit(code)
        # the end of the setup, and when the program's clock starts (the fork server's wall clock of a run)
        write_status({"ready": True, "t": time.monotonic()})
        if kind == "session":
            session_loop()
        else:
            main = fresh_main()
            source = payload.get("code", "")
            del payload
            finish_run(*run_code(source, main))
    finally:
        _hard_exit(code)
