"""LocalSandbox: isolated, fast local Python execution on a pool of warm fork servers.

``workers`` fork servers (default 2, one per core) each run one program at a time; ``run`` takes a free
server (blocking while all are busy), ``arun`` does the same from asyncio behind a semaphore of size
``workers`` so thousands of envs can share one sandbox with back-pressure instead of a thread pile-up.
A server that dies is restarted on its next use; the run it was serving returns ``sandbox_error``.

Every layer the machine does not allow is listed in ``sandbox.isolation.missing`` and logged once as a
warning; ``strict=True`` turns a missing layer into an error instead. A sandbox whose children cannot use
their interpreter (the canary, :mod:`toolgym.sandbox.canary`) is *broken*: ``strict=True`` refuses it, and
otherwise every run is a ``sandbox_error``, so no verifier scores honest code 0 on a faulty machine.

Why one module of this length: LocalSandbox is one object whose worker servers, their restarts, session slots
and sync and async paths share its locks and state; the fork server, sessions, capacity and the canary live in
their own modules.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import random
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from toolgym.sandbox import canary
from toolgym.sandbox.base import Sandbox, SandboxUnavailable, check_files
from toolgym.sandbox.capacity import (
    DEFAULT_IDLE_S,
    DEFAULT_WAIT_S,
    MAX_SESSIONS,
    Reservation,
    SessionSlots,
)
from toolgym.sandbox.child_setup import SETUP_TIMEOUT_S
from toolgym.sandbox.client import ServerDied, ServerHandle
from toolgym.sandbox.fsview import check_links
from toolgym.sandbox.isolation import LAYERS, NETWORKS
from toolgym.sandbox.limits import Limits
from toolgym.sandbox.processes import process_table, tree_memory
from toolgym.sandbox.result import ExecResult, IsolationReport
from toolgym.sandbox.session import Session, SessionProcess
from toolgym.util.program_clock import STARVED_FACTOR

log = logging.getLogger("toolgym.sandbox")


class SandboxBroken(ServerDied):
    """The sandbox's canary failed: no run is attempted (each is a ``sandbox_error`` saying why)."""


# Modules every fork server imports up front (stdlib only: always present). Add numpy/sympy via
# ``preload=DEFAULT_PRELOAD + ("numpy", "sympy")``; missing optional modules are skipped and reported.
# Deliberately absent: random, threading and what imports them (subprocess, statistics, tempfile, logging).
# They register after-fork hooks (reseeding, lock resets) that would run in, and copy memory pages of,
# every child whether it uses them or not: ~0.2 ms per run. A program that imports them pays ~1 ms once.
DEFAULT_PRELOAD: tuple[str, ...] = (
    "json",
    "math",
    "cmath",
    "re",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "string",
    "fractions",
    "decimal",
    "datetime",
    "typing",
    "dataclasses",
    "copy",
    "operator",
    "textwrap",
    "io",
    "time",
    "array",
    "struct",
    "hashlib",
    "base64",
    "unicodedata",
    "csv",
    "enum",
    "abc",
    "contextlib",
    "traceback",
)
SCIENTIFIC_PRELOAD: tuple[str, ...] = (*DEFAULT_PRELOAD, "random", "statistics", "numpy", "sympy")

UID_BASE = 1_900_000_000  # sandbox uids (root only): far above any real or container range in common use
#: uids per fork server: one for its runs, one per session it may host. A server can host every session of
#: the sandbox (the others may be busy), transient ones (the code verifier's) included.
UID_PER_SERVER = MAX_SESSIONS + 64
UID_CELL = 4096  # a sandbox's uid range starts on a multiple of this, at random (two sandboxes rarely meet)
_START_TIMEOUT = 120.0
# beyond the run's own timeout (the program's time) and its setup's bound, for teardown and draining
_REPLY_GRACE = 10.0
#: tests only: every child of a sandbox made while this is set sleeps this long at the end of its setup,
#: before its program starts (what a slow, loaded machine does to a run; its timeout must not count it)
_SETUP_DELAY_S = 0.0

_warned: set[tuple[str, ...]] = set()
_warn_lock = threading.Lock()


class LocalSandbox(Sandbox):
    """Local sandbox backed by warm fork servers (see the module docstring and ``isolation`` for layers)."""

    def __init__(
        self,
        limits: Limits | None = None,
        workers: int = 2,
        preload: Sequence[str] | None = None,
        *,
        max_sessions: int | None = None,
        session_wait_s: float = DEFAULT_WAIT_S,
        session_idle_s: float = DEFAULT_IDLE_S,
        slots: SessionSlots | None = None,
        disable: Iterable[str] = (),
        strict: bool = False,
        extra_paths: Sequence[str] = (),
        links: Mapping[str, str] | None = None,
        session_cpu_factor: float = 10.0,
        uid_base: int | None = None,
        network: str = "none",
    ) -> None:
        """
        Args:
            limits: default limits of every run (override per call).
            workers: number of fork servers, i.e. programs running at once.
            preload: modules each server imports once so children get them for free.
            max_sessions: a fixed number of live session interpreters. ``None`` (default): as many as the
                callers reserve (``reserve_sessions``), at least 64. A live session is never evicted for
                room: a session beyond the capacity waits ``session_wait_s`` for a slot, then its call is a
                ``sandbox_error``. See ``toolgym.sandbox.capacity``.
            session_wait_s: how long a new session waits for a slot.
            session_idle_s: a session unused this long may give its slot to a waiting one.
            slots: a slot table to use instead (the process-wide sandbox's, which outlives restarts).
            disable: isolation layers to switch off (for measuring their cost); see ``isolation.LAYERS``.
            strict: raise SandboxUnavailable instead of warning when a layer is missing on this machine.
            extra_paths: host paths to expose read-only inside the sandbox (data sets, extra packages).
            links: symlinks added to the read-only view's root, each into the run's private ``/tmp``
                (``{"/app": "/tmp/app"}``: a terminal workspace at a fixed path). Only with ``fs_view``;
                without it ``isolation.missing`` says so and the links do not exist.
            session_cpu_factor: a session's CPU budget is ``limits.cpu_s`` times this (one process,
                many calls).
            uid_base: first host uid of this sandbox's uid block (root only); random block by default.
            network: ``"none"`` (default): no socket but anonymous unix pairs. ``"loopback"``: each run gets
                a network namespace of its own with ``lo`` up, every other address dropped in silence
                (``toolgym.sandbox.netns``), for tests that serve and fetch on ``127.0.0.1``. Needs the
                namespaces' privilege; without it ``isolation.missing["loopback_network"]`` says so and the
                runs have no network.
        """
        if network not in NETWORKS:
            raise ValueError(f"network must be one of {', '.join(NETWORKS)}, not {network!r}")
        unknown = set(disable) - set(LAYERS)
        if unknown:
            raise ValueError(f"unknown isolation layers {sorted(unknown)}; known: {', '.join(LAYERS)}")
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if slots is not None and max_sessions is not None:
            raise ValueError("give max_sessions or slots, not both")
        self._slots = slots or SessionSlots(max_sessions, wait_s=session_wait_s, idle_s=session_idle_s)
        super().__init__(limits, workers)
        self.network = network
        # what a twin on another network is made with (``with_network``): this one's settings, its slots
        self._settings: dict[str, Any] = dict(
            limits=limits,
            workers=workers,
            preload=preload,
            session_cpu_factor=session_cpu_factor,
            slots=self._slots,
            disable=tuple(disable),
            strict=strict,
            extra_paths=tuple(extra_paths),
            links=dict(links or {}),
        )
        self._twins: dict[str, LocalSandbox] = {}
        self._twins_lock = threading.Lock()
        self._owner_pid = os.getpid()
        self.session_cpu_factor = session_cpu_factor
        self._closed = False
        per_server = UID_PER_SERVER
        if uid_base is None:  # a random block below 2**31 (some tools still read uids as signed)
            cells = (2**31 - 1 - UID_BASE - workers * per_server) // UID_CELL
            uid_base = UID_BASE + random.randrange(cells) * UID_CELL
        self.uid_range = range(uid_base, uid_base + workers * per_server)
        probe_limits = self.limits.model_dump()
        self._servers = [
            ServerHandle(
                i,
                {
                    "index": i,
                    "disabled": sorted(set(disable)),
                    "preload": list(DEFAULT_PRELOAD if preload is None else preload),
                    "uid_lo": uid_base + i * per_server,
                    "uid_count": per_server,
                    "extra_paths": list(extra_paths),
                    "links": check_links(links or {}),
                    "network": network,
                    "probe_limits": probe_limits,
                    "setup_delay_s": _SETUP_DELAY_S,
                },
            )
            for i in range(workers)
        ]
        try:
            for server in self._servers:
                server.launch()
            hellos = [server.await_hello(_START_TIMEOUT) for server in self._servers]
        except Exception as exc:
            for server in self._servers:
                server.kill()
            raise SandboxUnavailable(str(exc)) from exc
        hello = hellos[0]
        self.preloaded: tuple[str, ...] = tuple(hello["preloaded"])
        self.preload_failed: dict[str, str] = dict(hello["preload_failed"])
        self._report = IsolationReport(
            backend="local",
            active=tuple(hello["active"]),
            missing=dict(hello["missing"]),
            disabled=tuple(hello["disabled"]),
            details={**hello["details"], "mode": hello["mode"]},
        )
        self._idle: queue.Queue[ServerHandle] = queue.Queue()
        for server in self._servers:
            self._idle.put(server)
        self._executor: ThreadPoolExecutor = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix="toolgym-sandbox"
        )
        self._sessions: dict[Session, None] = {}  # sessions with a live process (transient ones too)
        self._sessions_lock = threading.Lock()
        self._all_sessions: weakref.WeakSet[Session] = weakref.WeakSet()
        self._broken: str | None = None
        self._announce_missing(strict)
        self._check_canary(hello["mode"], tuple(extra_paths), strict)

    # ------------------------------------------------------------ reporting

    @property
    def isolation(self) -> IsolationReport:
        return self._report

    def _announce_missing(self, strict: bool) -> None:
        report = self._report
        if not report.missing:
            return
        message = "toolgym sandbox is running WITHOUT these isolation layers: " + "; ".join(
            f"{layer} ({why})" for layer, why in report.missing.items()
        )
        if strict:
            self.close()
            raise SandboxUnavailable(message)
        key = tuple(sorted(report.missing))
        with _warn_lock:
            if key not in _warned:
                _warned.add(key)
                log.warning(message)

    @property
    def broken(self) -> str | None:
        """Why this sandbox cannot run code correctly (its canary failed), or None. See ``canary``."""
        return self._broken

    def _check_canary(self, mode: str, extra_paths: tuple[str, ...], strict: bool) -> None:
        """Run the canary (once per process and configuration) and mark the sandbox broken if it fails."""
        report = self._report
        key = (
            sys.executable,
            tuple(sys.path),
            mode,
            report.active,
            tuple(sorted(report.missing)),
            report.disabled,
            self.preloaded,
            extra_paths,
        )

        def compute() -> str | None:
            code = canary.canary_code(canary.canary_modules(self.preloaded), canary.host_paths())
            res = self.run(code, limits=Limits(timeout_s=60, cpu_s=60, memory_bytes=2 * 1024**3))
            return canary.judge(res.status, res.stdout, res.stderr, res.detail)

        broken = canary.cached_verdict(key, compute)
        if broken is None:
            return
        self._broken = broken
        self._report = report.model_copy(update={"broken": broken})
        message = f"toolgym sandbox is BROKEN, every run will be a sandbox_error: {broken}"
        if strict:
            self.close()
            raise SandboxUnavailable(message)
        log.error(message)

    def _sandbox_error(self, detail: str) -> ExecResult:
        return ExecResult(status="sandbox_error", detail=detail, isolation=self._report)

    # ------------------------------------------------------------ server pool

    @contextlib.contextmanager
    def _server(self):
        if self._closed:
            raise RuntimeError("sandbox is closed")
        if os.getpid() != self._owner_pid:
            raise RuntimeError(
                "this LocalSandbox belongs to the process that created it (its fork servers speak to that "
                "process only); create a new one after fork()"
            )
        if self._broken:
            raise SandboxBroken(f"the sandbox is broken: {self._broken}")
        server = self._idle.get()
        try:
            if not server.alive:
                server.kill()
                server.start(_START_TIMEOUT)  # raises ServerDied if it cannot come back
            yield server
        finally:
            self._idle.put(server)

    # ------------------------------------------------------------ runs

    def run(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        lim = limits or self.limits
        wall = float(timeout if timeout is not None else lim.timeout_s)
        if wall <= 0:
            raise ValueError("timeout must be positive")
        files = check_files(files)
        for name, data in (files or {}).items():
            if len(data) > lim.file_size_bytes:
                raise ValueError(f"file {name!r} is larger than file_size_bytes={lim.file_size_bytes}")
        if files and sum(len(d) for d in files.values()) > lim.disk_bytes // 2:
            raise ValueError(f"files take more than half of disk_bytes={lim.disk_bytes}")
        header = {"op": "run", "limits": lim.model_dump(), "timeout": wall}
        payload = {"code": code, "stdin": stdin, "files": files}
        try:
            with self._server() as server:
                # clock="program": a busy machine stretches a run up to STARVED_FACTOR times on the wall clock
                longest = wall * (STARVED_FACTOR if lim.clock == "program" else 1.0)
                reply = server.run(header, payload, timeout=longest + SETUP_TIMEOUT_S + _REPLY_GRACE)
        except ServerDied as exc:
            return self._sandbox_error(str(exc))
        return ExecResult(**reply, isolation=self._report)

    # ------------------------------------------------------------ sessions

    def session(
        self,
        *,
        limits: Limits | None = None,
        files: dict[str, str | bytes] | None = None,
        transient: bool = False,
    ) -> Session:
        """A stateful interpreter; its process starts on the first call.

        ``transient``: a short-lived session whose caller bounds how many exist at once (the code verifier's);
        it takes no slot of the capacity, so it never waits behind the live episodes' sessions."""
        if self._closed:
            raise RuntimeError("sandbox is closed")
        lim = limits or self.limits
        lim = lim.model_copy(update={"cpu_s": lim.cpu_s * self.session_cpu_factor})
        sess = Session(self, lim, check_files(files), transient=transient)
        self._all_sessions.add(sess)
        return sess

    @property
    def max_sessions(self) -> int:
        """Live session interpreters this sandbox holds at once now (fixed, or what the callers reserved)."""
        return self._slots.capacity

    @property
    def slots(self) -> SessionSlots:
        return self._slots

    def reserve_sessions(self, n: int) -> Reservation:
        """Raise the capacity by ``n`` sessions while the caller runs ``n`` episodes at once; release the
        reservation (or leave its ``with`` block) when they are done. A fixed ``max_sessions`` ignores it."""
        return self._slots.reserve(n)

    def _open_session_process(self, sess: Session, limits: Limits, files: dict | None) -> SessionProcess:
        """Start ``sess``'s interpreter; a counted session first takes a slot (waiting for one if needed:
        ``NoSessionSlot`` when none came free)."""
        if not sess.transient:
            sess.waited_s += self._slots.acquire(sess)
        try:
            header = {"op": "session", "limits": limits.model_dump()}
            for attempt in range(2):
                try:
                    with self._server() as server:
                        reply, fds = server.open_session(header, {"files": files}, timeout=60.0)
                        launches = server.launches
                    break
                except ServerDied as exc:
                    # a server killed a moment ago can still look alive (not reaped yet): nothing ran, so
                    # the request goes once more, to a server started again
                    if attempt or isinstance(exc, SandboxBroken):
                        raise
            if not reply.get("ok"):
                raise RuntimeError(reply.get("detail", "session could not start"))
            if len(fds) != 4:
                for fd in fds:
                    os.close(fd)
                raise RuntimeError("fork server handed over an unexpected number of descriptors")
        except BaseException:
            self._slots.release(sess)
            raise
        proc = SessionProcess(fds, reply["pid"], reply["uid"], server=server, launches=launches)
        with self._sessions_lock:
            self._sessions[sess] = None
        return proc

    async def _await_slot(self, sess: Session) -> None:
        """Take ``sess``'s slot without holding a sandbox worker while it waits (``arun``)."""
        if not sess.transient:
            sess.waited_s += await self._slots.acquire_async(sess)

    def _touch_session(self, sess: Session) -> None:
        self._slots.touch(sess)

    def _forget_session(self, sess: Session) -> None:
        with self._sessions_lock:
            self._sessions.pop(sess, None)
        self._slots.release(sess)

    @property
    def live_sessions(self) -> int:
        """Session interpreters alive now (transient ones included)."""
        with self._sessions_lock:
            return len(self._sessions)

    # ------------------------------------------------------------ lifecycle

    def restart_workers(self) -> None:
        """Kill and restart every fork server. Mostly for tests and recovery. The sessions die with their
        servers; their next call says the state was lost through the sandbox's doing."""
        with self._sessions_lock:
            live = list(self._sessions)
        for sess in live:
            sess.evict("the sandbox restarted its fork servers", infra=True)
        for _ in self._servers:
            server = self._idle.get()
            server.kill()
            try:
                server.start(_START_TIMEOUT)
            finally:
                self._idle.put(server)

    @property
    def server_pids(self) -> list[int]:
        """Host pids of the fork servers (in user-namespace mode each is two: launcher and server)."""
        pids: set[int] = set()
        for server in self._servers:
            if server.proc is not None and server.proc.poll() is None:
                pids.add(server.proc.pid)
                if server.hello:
                    pids.add(int(server.hello["pid"]))
        return sorted(pids)

    def session_memory(self) -> tuple[int, int]:
        """(live session interpreters, the bytes they take together: the sum of their process trees' Pss).

        Pss counts the pages a session shares with its fork server (the preloaded interpreter) and with the
        other sessions proportionally, so the mean per session is what one more live episode costs: size a
        worker's sandbox as sessions x that figure (``toolgym doctor`` prints it).
        """
        pids = self.session_pids()
        return len(pids), sum(tree_memory(pid) for pid in pids)

    def session_pids(self) -> list[int]:
        """Host pids of the live session interpreters."""
        with self._sessions_lock:
            procs = [sess._proc for sess in self._sessions]
        return [p.host_pid for p in procs if p is not None and p.alive and p.host_pid]

    def stray_processes(self) -> list[tuple[int, int, str]]:
        """(pid, uid, command) of processes of this sandbox that should not exist.

        Anything a fork server forked, other than live session interpreters and what they started, and (as
        root) any process running as one of this sandbox's uids outside a live session. Runs leave nothing:
        a run's whole pid namespace dies with it, so this is empty between runs unless isolation failed.
        """
        table = process_table()
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)

        def descendants(roots: Iterable[int]) -> set[int]:
            found: set[int] = set()
            stack = list(roots)
            while stack:
                for kid in children.get(stack.pop(), ()):
                    if kid not in found:
                        found.add(kid)
                        stack.append(kid)
            return found

        servers = set(self.server_pids)
        sessions = set(self.session_pids())
        allowed = servers | sessions | descendants(sessions)
        suspects = descendants(servers) - allowed
        if self._report.details.get("mode") == "root":
            suspects |= {pid for pid, (_, uid, _) in table.items() if uid in self.uid_range} - allowed
        return sorted((pid, table[pid][1], table[pid][2]) for pid in suspects if pid in table)

    def with_network(self, network: str) -> LocalSandbox:
        """This sandbox, or its twin with ``network`` instead (the same layers, limits, paths, links and
        session slots; started on first use, closed with this one). The judge's test runs take the
        ``"loopback"`` twin of the sandbox an agent's commands run in."""
        if network == self.network:
            return self
        with self._twins_lock:
            twin = self._twins.get(network)
            if twin is None or twin._closed:
                twin = self._twins[network] = LocalSandbox(**self._settings, network=network)
            return twin

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for twin in list(self._twins.values()):
            twin.close()
        if os.getpid() != self._owner_pid:
            return  # a forked copy: the servers belong to the parent, leave them alone
        for sess in list(self._all_sessions):
            with contextlib.suppress(Exception):
                sess.close()
        for server in self._servers:
            server.close()
        self._executor.shutdown(wait=False, cancel_futures=True)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if not self._closed and os.getpid() == self._owner_pid:
                for server in self._servers:
                    server.kill()


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until it is true or ``timeout`` passes (small helper shared with tests)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
