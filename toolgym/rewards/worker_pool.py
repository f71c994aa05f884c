"""A few persistent worker processes that run one function with a hard deadline per call.

Why processes: some checks (math-verify on sympy) can spin for minutes inside C code that holds the GIL, so no
thread, signal or ``asyncio`` timeout in the caller's process can stop them; and math-verify's own timeouts
use ``signal.alarm``, which only works on a main thread. A worker process runs the check on its own main
thread, and the caller can always kill it.

Why our own processes over pipes rather than ``concurrent.futures.ProcessPoolExecutor``: an executor cannot
cancel a running task, and a worker that hangs keeps its slot, so one pathological input blocks every later
call. Here each call owns one worker, and a worker that misses its deadline is killed and replaced in the
background; the next call takes another worker (or the replacement once it is ready). Workers are plain
``python -c …`` subprocesses running ``worker_main("module:function")`` and speaking JSON lines, so they
never re-import the caller's ``__main__`` (as ``spawn`` would) nor inherit its threads (as ``fork`` would).

Deadlines, innermost first:

- soft: the worker arms a ``setitimer`` alarm that raises ``SoftTimeout`` (a ``BaseException``, so the
  ``except Exception`` in library code cannot swallow it) into the running Python code, and the worker
  reports a timeout. The handler also records that it fired, so a timeout is reported even if some code
  swallowed the exception anyway. The worker is then retired and replaced in the background, not reused: the
  exception may have interrupted it half-way through updating shared state (an import, a cache such as the
  DFA ANTLR builds while parsing LaTeX for math-verify), after which its calls can fail or judge wrongly
  without any error.
- hard: the caller waits ``timeout`` seconds in total, then kills the worker (it is stuck in C code).
- orphan backstop: each call also lowers the worker's ``RLIMIT_CPU`` to a few seconds past the deadline, so
  a worker whose caller died mid-call is ended by the kernel instead of burning a core forever.

With ``clock="cpu"`` (for CPU-bound checks: math-verify's pool) both bounds count the worker's own CPU time
instead of the wall clock: the soft alarm is ``ITIMER_PROF`` and the caller reads the worker's time from
``/proc/<pid>/stat``. A verdict must not depend on how busy the machine is: on two loaded cores a set
comparison that takes 0.1 s alone took more than the 4-s wall-clock bound (the reward server's 2,000-request
test, failing in a loaded CI run) and came back a timeout. A call that does not use the CPU (it waits on
something) is still ended, at ``WALL_FACTOR`` times its bound on the wall clock. Where ``/proc`` is absent
the caller's bound falls back to the wall clock.

Startup (importing the function's module, then running the pool's ``warmup`` payload once) happens when the
pool starts, off the hot path: ``start()`` is non-blocking, and the time a call waits for a free or starting
worker does not count against its deadline (it is bounded separately by ``wait_timeout``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import Any


class PoolError(RuntimeError):
    """The call did not produce a result. The subclasses say why."""


class WorkerTimeout(PoolError, TimeoutError):
    """The call ran past its deadline."""


class WorkerCrashed(PoolError):
    """The worker died, or the function raised, during the call."""


class PoolUnavailable(PoolError):
    """No worker could be started, or none became free in time."""


class SoftTimeout(BaseException):
    """Raised inside a worker when a call's soft deadline passes."""


CLOCKS = ("wall", "cpu")
#: under ``clock="cpu"``, a call is also ended once it has taken this many times its bound on the wall clock
WALL_FACTOR = 10.0
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process ``pid`` has used, or None where ``/proc`` cannot say."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _TICKS  # utime and stime, fields 14 and 15 of stat


_POOLS: weakref.WeakSet[WorkerPool] = weakref.WeakSet()
_WORKER_BOOT = (
    "import sys; from toolgym.rewards.worker_pool import worker_main; sys.exit(worker_main(*sys.argv[1:]))"
)


class _Worker:
    """One worker subprocess and the caller's end of its pipes."""

    def __init__(self, target: str, env: dict[str, str] | None, warmup: str | None = None):
        env = dict(os.environ if env is None else env)
        # what the caller can import, the worker can import (as multiprocessing's spawn does)
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, target, *([warmup] if warmup is not None else [])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
            start_new_session=True,  # a Ctrl-C in the caller's terminal is the caller's to handle
        )
        self._buffer = b""
        assert self.proc.stdout is not None
        self._poller = select.poll()
        self._poller.register(self.proc.stdout.fileno(), select.POLLIN)

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def receive(self, deadline: float) -> dict[str, Any] | None:
        """The next message, or ``None`` if none arrived before ``deadline``. Raises ``WorkerCrashed`` if the
        worker closed its end."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            # poll, not select: a busy server's pipes can get descriptors above select's limit of 1024
            if not self._poller.poll(remaining * 1000):
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise WorkerCrashed(f"the worker exited (code {self.proc.poll()})")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


class WorkerPool:
    """``size`` worker processes that each run ``target`` (``"module:function"``, called with one JSON-plain
    argument and returning a JSON-plain result), one call at a time per worker.

    Thread-safe: any number of threads may ``call`` at once; at most ``size`` calls run, the rest wait.
    """

    def __init__(
        self,
        target: str,
        size: int = 2,
        *,
        start_timeout: float = 60.0,
        soft_fraction: float = 0.8,
        env: dict[str, str] | None = None,
        warmup: Any = None,
        clock: str = "wall",
    ):
        if clock not in CLOCKS:
            raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        if not 0 < soft_fraction <= 1:
            raise ValueError(f"soft_fraction must be in (0, 1], got {soft_fraction}")
        self.target = target
        self.size = size
        self.start_timeout = start_timeout
        self.soft_fraction = soft_fraction
        #: what a call's ``timeout`` counts: the wall clock, or the worker's CPU time (module docstring)
        self.clock = clock
        self._env = env
        #: a payload each worker runs once while starting, off every call's deadline (lazy imports, caches)
        self._warmup = None if warmup is None else json.dumps(warmup)
        #: workers belong to the process that started them; a forked child must not use or kill them
        self.owner_pid = os.getpid()
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._busy = 0
        self._starting = 0
        self._closed = False
        self.last_start_error: str | None = None
        #: counters for tests and monitoring
        self.stats = {"calls": 0, "killed": 0, "started": 0, "soft_timeouts": 0, "retired": 0}
        _POOLS.add(self)

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start workers up to ``size`` in the background; returns at once."""
        with self._cond:
            self._top_up()

    def close(self) -> None:
        """Kill every idle worker; busy ones are killed when their call returns. In a forked child this only
        marks the inherited copy closed: the workers are the parent's."""
        with self._cond:
            self._closed = True
            if os.getpid() != self.owner_pid:
                self._idle = []
                return
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        for worker in idle:
            worker.kill()

    @property
    def ready_workers(self) -> int:
        with self._cond:
            return len(self._idle)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until every worker is started and idle (tests, benchmarks, server start-up)."""
        self.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while len(self._idle) + self._busy < self.size or self._starting:
                if self._starting == 0 and self.last_start_error:
                    return False
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._cond.wait(remaining)
        return True

    def _top_up(self) -> None:
        """Caller holds the lock. Spawn the missing workers, each from a background thread."""
        if self._closed:
            return
        missing = self.size - len(self._idle) - self._busy - self._starting
        for _ in range(max(missing, 0)):
            self._starting += 1
            threading.Thread(target=self._spawn, name="toolgym-pool-spawn", daemon=True).start()

    def _spawn(self) -> None:
        worker: _Worker | None = None
        error: str | None = None
        try:
            worker = _Worker(self.target, self._env, self._warmup)
            hello = worker.receive(time.monotonic() + self.start_timeout)
            if hello is None:
                error = f"the worker did not start within {self.start_timeout:g}s"
            elif not hello.get("ready"):
                error = hello.get("error") or "the worker failed to start"
        except (OSError, PoolError, ValueError) as exc:
            error = f"{type(exc).__name__}: {exc}"
        with self._cond:
            self._starting -= 1
            if error is None and not self._closed:
                assert worker is not None
                self._idle.append(worker)
                self.stats["started"] += 1
                self.last_start_error = None
                worker = None
            elif error is not None:
                self.last_start_error = f"{self.target}: {error}"
            self._cond.notify_all()
        if worker is not None:
            worker.kill()

    # -- calls ---------------------------------------------------------------------------------------------

    def call(self, payload: Any, *, timeout: float, wait_timeout: float = 120.0) -> Any:
        """Run ``target(payload)`` in a worker and return its result.

        ``timeout`` bounds the call once a worker has it; ``wait_timeout`` bounds the wait for a free worker
        (including start-up). Raises ``WorkerTimeout``, ``WorkerCrashed`` or ``PoolUnavailable``; a worker
        that timed out in C code or died is replaced in the background.
        """
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        worker = self._acquire(wait_timeout)
        healthy, reply = False, {}
        try:
            reply = self._exchange(worker, payload, timeout)
            healthy = True
        finally:
            self._release(worker, healthy, retire=bool(reply.get("timeout")))
        if reply.get("timeout"):
            with self._cond:
                self.stats["soft_timeouts"] += 1
            soft = timeout * self.soft_fraction
            if self.clock == "wall":
                raise WorkerTimeout(f"timed out after {soft:g}s")
            if reply["timeout"] == "cpu":
                raise WorkerTimeout(f"timed out after {soft:g}s of CPU time")
            raise WorkerTimeout(
                f"timed out after {soft * WALL_FACTOR:g}s on the wall clock, using little CPU"
            )
        if "error" in reply:
            raise WorkerCrashed(reply["error"])
        return reply["result"]

    def _exchange(self, worker: _Worker, payload: Any, timeout: float) -> dict[str, Any]:
        pid = worker.proc.pid
        spent = _cpu_seconds(pid) if self.clock == "cpu" else None
        started = time.monotonic()
        # the wall-clock bound: the call's own, or (CPU clock) the backstop for a call that uses no CPU
        deadline = started + (timeout if spent is None else timeout * WALL_FACTOR)
        try:
            worker.send(
                {
                    "payload": payload,
                    "soft_timeout": timeout * self.soft_fraction,
                    "timeout": timeout,
                    "clock": "wall" if spent is None else "cpu",
                }
            )
            while True:
                # with the CPU clock, look at the worker's time a few times a second
                step = deadline if spent is None else min(deadline, time.monotonic() + 0.1)
                reply = worker.receive(step)
                if reply is not None or time.monotonic() >= deadline:
                    break
                used = _cpu_seconds(pid)
                if spent is not None and used is not None and used - spent >= timeout:
                    break
        except (OSError, ValueError) as exc:
            raise WorkerCrashed(f"lost the worker: {type(exc).__name__}: {exc}") from None
        if reply is None:
            cpu = spent is not None and time.monotonic() < deadline
            raise WorkerTimeout(
                f"timed out after {timeout:g}s{' of CPU time' if cpu else ''} (the worker was killed)"
            )
        return reply

    def _acquire(self, wait_timeout: float) -> _Worker:
        if os.getpid() != self.owner_pid:
            raise PoolUnavailable("this pool belongs to the parent of a forked process; create a new one")
        deadline = time.monotonic() + wait_timeout
        with self._cond:
            self._top_up()
            while not self._idle:
                if self._closed:
                    raise PoolUnavailable("the pool is closed")
                if self._starting == 0 and self._busy == 0 and self.last_start_error:
                    raise PoolUnavailable(self.last_start_error)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise PoolUnavailable(f"no worker became free within {wait_timeout:g}s")
                self._cond.wait(remaining)
            self._busy += 1
            self.stats["calls"] += 1
            return self._idle.pop()

    def _release(self, worker: _Worker, healthy: bool, *, retire: bool = False) -> None:
        """Return a worker to the pool; kill it if it failed (``healthy`` False) or must not serve again."""
        keep = healthy and not retire and not self._closed and worker.proc.poll() is None
        if not keep:
            worker.kill()  # before anything else, so a stuck worker stops using its CPU now
        with self._cond:
            self._busy -= 1
            if keep:
                self._idle.append(worker)
            else:
                self.stats["killed"] += not healthy
                self.stats["retired"] += healthy and retire
                self._top_up()
            self._cond.notify_all()


@atexit.register
def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()


# -- the worker side -----------------------------------------------------------------------------------------


def _load(target: str):
    module_name, _, attr = target.partition(":")
    if not attr:
        raise ValueError(f"target must be 'module:function', got {target!r}")
    return getattr(importlib.import_module(module_name), attr)


def worker_main(target: str, warmup: str | None = None) -> int:
    """Serve calls on stdin/stdout until stdin closes; first run ``warmup`` (JSON) once, if given."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints from libraries go to stderr, never into the protocol

    def write(message: dict[str, Any]) -> None:
        try:
            out.write(json.dumps(message).encode() + b"\n")
            out.flush()
        except BrokenPipeError:  # the caller is gone (it exited, or killed us a moment too late): so are we
            os._exit(0)

    try:
        fn = _load(target)
        if warmup is not None:
            fn(json.loads(warmup))
    except Exception as exc:
        write({"ready": False, "error": f"cannot load {target}: {type(exc).__name__}: {exc}"})
        return 1
    state: dict[str, Any] = {"active": False, "fired": None}  # fired: the clock whose alarm went off

    def on_alarm(signum: int, frame: Any) -> None:
        if state["active"]:
            state["fired"] = "cpu" if signum == signal.SIGPROF else "wall"
            raise SoftTimeout

    signal.signal(signal.SIGALRM, on_alarm)
    signal.signal(signal.SIGPROF, on_alarm)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    write({"ready": True, "pid": os.getpid()})
    for line in sys.stdin.buffer:
        request = json.loads(line)
        _limit_cpu(request["timeout"])
        state.update(active=True, fired=None)
        message: dict[str, Any]
        # the soft alarm on the clock the call's bound counts (module docstring), and on the CPU clock the
        # wall-clock backstop too
        timers = [(signal.ITIMER_REAL, request["soft_timeout"])]
        if request.get("clock") == "cpu":
            timers = [(signal.ITIMER_PROF, request["soft_timeout"]),
                      (signal.ITIMER_REAL, request["soft_timeout"] * WALL_FACTOR)]  # fmt: skip
        try:
            for which, seconds in timers:
                signal.setitimer(which, seconds)
            try:
                result = fn(request["payload"])
            finally:
                state["active"] = False
                for which, _ in timers:
                    signal.setitimer(which, 0)
            message = {"timeout": state["fired"]} if state["fired"] else {"result": result}
        except SoftTimeout:
            message = {"timeout": state["fired"] or "wall"}
        except Exception as exc:
            message = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
        try:
            write(message)
        except (TypeError, ValueError) as exc:
            write({"error": f"the result is not JSON-serialisable: {exc}"})
    return 0


def _limit_cpu(timeout: float) -> None:
    """End this worker (SIGXCPU) if it uses more CPU than a call may, even with no caller left to kill it."""
    import resource

    used = resource.getrusage(resource.RUSAGE_SELF)
    budget = math.ceil(used.ru_utime + used.ru_stime + timeout) + 2
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    if hard == resource.RLIM_INFINITY or budget < hard:
        resource.setrlimit(resource.RLIMIT_CPU, (budget, hard))
