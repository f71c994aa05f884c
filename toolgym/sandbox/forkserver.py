"""The warm fork server: one single-threaded process per worker that forks one isolated child per run.

Why a fork server: starting ``python`` costs ~20 ms and importing numpy another 50-100 ms; forking a process
that already did both costs a fraction of a millisecond. The server is started with ``python -s -P`` and an
environment of its own, sets up the server-wide layers once (user namespace, read-only root), preloads
modules, and then loops: receive a request, fork a child into fresh namespaces, watch it (wall clock, output
caps), SIGKILL its pid namespace when needed, reap it, reply. The server stays single-threaded because forking
a threaded process is unsafe and ``unshare`` refuses threaded callers.

A run's wall clock starts when its program starts: the child reports the end of its setup (fork, isolation
layers) in its first status frame, and the setup has a bound of its own (``SETUP_TIMEOUT_S``), so a slow or
loaded machine does not eat into a short limit.

Runs are enforced here, not in the (possibly busy) training process. Session children are forked here too,
but their control channel, output pipes and a pidfd are handed to the parent, which drives them directly.

No residue between runs: every child is a copy of the server's memory, so anything the server once held
(a previous run's code, hidden test files, outputs) could be dug out of a later child's heap. The server
therefore never parses a request's payload (code, stdin, files) - it receives it into a reusable buffer,
forks, lets the child parse it, and zeroes the buffer - and reads outputs into fixed buffers that are
zeroed after the reply. The parent talks to the server over a socketpair: a small ``marshal`` header frame,
then raw payload bytes (:mod:`toolgym.sandbox.protocol`). When the parent goes away the server sees EOF and
exits; its children die with it (``PR_SET_PDEATHSIG``).

Where the rest lives: the parent's side of the socket is :mod:`toolgym.sandbox.client`; what a forked child
does is :mod:`toolgym.sandbox.child` (isolating itself with :mod:`toolgym.sandbox.child_setup`); how a
finished run is classified is :mod:`toolgym.sandbox.run_status`.

Why one module of this length: the server is one single-threaded loop whose parts (the reusable buffers, a
run's watch, a session's hand-off, the memory watchdog) share its state; what can live apart does, in the
modules named above.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import json
import math
import os
import select
import shutil
import signal
import socket
import sys
import time

from toolgym.sandbox import _linux as lx
from toolgym.sandbox import child as childmod
from toolgym.sandbox import isolation as iso
from toolgym.sandbox.child_setup import SANDBOX_HOME, SETUP_TIMEOUT_S, make_private_dir
from toolgym.sandbox.processes import (
    MEMORY_CHECK_S,
    dir_usage,
    host_pid_of,
    own_host_pid,
    sweep_uid,
    tree_memory,
)
from toolgym.sandbox.protocol import (
    CappedStream,
    FrameReader,
    ProtocolError,
    pack,
    recv,
    recv_payload,
    send,
    wipe,
)
from toolgym.sandbox.run_status import classify_run
from toolgym.util.program_clock import ProgramClock

_READ_CHUNK = 1 << 16
_STATUS_CAP = 1 << 16
_SESSION_MEMORY_CHECK_S = 0.25


class ForkServer:
    """Server-side state; lives in the fork server process only."""

    def __init__(self, sock: socket.socket, config: dict) -> None:
        self.sock = sock
        self.config = config
        self.uid_lo: int = config["uid_lo"]
        self.free_uids = list(range(self.uid_lo + config["uid_count"] - 1, self.uid_lo, -1))
        # pidfd -> (pid, uid, host tmp dir, its disk limit)
        self.sessions: dict[int, tuple[int, int, str | None, int]] = {}
        self.session_memory: dict[int, int] = {}  # pidfd -> memory limit of its whole process tree
        self.next_session_check = 0.0
        self.forks = 0
        self.lifeline_r, self.lifeline_w = os.pipe()
        self.payload = bytearray(1 << 16)  # request payloads land here; zeroed after every fork
        self.chunk = bytearray(_READ_CHUNK)  # every output read lands here; zeroed after every run
        self.chunk_used = 0
        self.capture: tuple[CappedStream, CappedStream] | tuple[()] = ()
        self.plan = iso.prepare_server(
            config["disabled"],
            self.uid_lo,
            config["probe_limits"],
            config.get("extra_paths", ()),
            config.get("links") or None,
            config.get("network", "none"),
        )
        self.preloaded, self.preload_failed = self._preload(config["preload"])
        # tests only: every child sleeps this long at the end of its setup (a slow, loaded machine)
        self.setup_delay_s = float(config.get("setup_delay_s") or 0.0)
        childmod.prepare_server_interpreter(SANDBOX_HOME)
        threads = len(os.listdir("/proc/self/task"))
        if threads != 1:
            raise RuntimeError(
                f"fork server must be single-threaded, a preload started {threads - 1} thread(s)"
            )

    @staticmethod
    def _preload(names: list[str]) -> tuple[list[str], dict[str, str]]:
        done, failed = [], {}
        for name in names:
            try:
                importlib.import_module(name)
                done.append(name)
            except Exception as exc:
                failed[name] = f"{type(exc).__name__}: {exc}"
        return done, failed

    def hello(self) -> dict:
        plan = self.plan
        return {
            "ok": True,
            "pid": own_host_pid(),
            "mode": plan.mode,
            "active": [layer for layer in (*iso.LAYERS, *iso.ON_REQUEST) if plan.has(layer)]
            + list(iso.ALWAYS_ON),
            "missing": dict(plan.missing),
            "disabled": sorted(plan.disabled),
            "details": dict(plan.details),
            "preloaded": self.preloaded,
            "preload_failed": self.preload_failed,
            "host_tmp_base": plan.host_tmp_base,
        }

    # ------------------------------------------------------------ main loop

    def serve_forever(self) -> None:
        try:
            while True:
                poller = select.poll()
                poller.register(self.sock, select.POLLIN)
                for pidfd in self.sessions:
                    poller.register(pidfd, select.POLLIN)
                ready = {
                    fd for fd, _ in poller.poll(_SESSION_MEMORY_CHECK_S * 1000 if self.sessions else None)
                }
                self._check_session_memory()
                for pidfd in list(self.sessions):
                    if pidfd in ready:
                        self._reap_session(pidfd)
                if self.sock.fileno() not in ready:
                    continue
                try:
                    header = recv(self.sock)
                    if not isinstance(header, dict):
                        raise ProtocolError("malformed request")
                    size = int(header.get("payload_len", 0))
                    self.payload = recv_payload(self.sock, self.payload, size)
                except (ProtocolError, OSError, AttributeError, ValueError):
                    return  # the parent is gone (or is not speaking our protocol)
                op = header.get("op")
                if op == "run":
                    self.run(header, size)
                elif op == "session":
                    self.open_session(header, size)
                else:
                    send(self.sock, {"ok": op == "ping", "detail": f"op {op!r}"})
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        for pidfd, (pid, *_) in list(self.sessions.items()):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        if self.plan.host_tmp_base:
            with contextlib.suppress(OSError):
                os.chmod(self.plan.host_tmp_base, 0o700)  # it was not listable (0311) while serving
            shutil.rmtree(self.plan.host_tmp_base, ignore_errors=True)

    def _check_session_memory(self) -> None:
        """Kill sessions whose process trees hold more than their memory limit (the parent sees them die)."""
        now = time.monotonic()
        if now < self.next_session_check:
            return
        self.next_session_check = now + _SESSION_MEMORY_CHECK_S
        for pidfd, limit in self.session_memory.items():
            host_pid = host_pid_of(pidfd)
            _, _, host_tmp, disk = self.sessions[pidfd]
            if (host_pid and tree_memory(host_pid) > limit) or (host_tmp and dir_usage(host_tmp) > disk):
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)

    def _reap_session(self, pidfd: int) -> None:
        self.session_memory.pop(pidfd, None)
        pid, uid, host_tmp, _ = self.sessions.pop(pidfd)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        os.close(pidfd)
        if not self.plan.has("pid_namespace") and self.plan.mode == "root":
            sweep_uid(uid)
        if host_tmp:
            _rmtree_forcefully(host_tmp)
        self.free_uids.append(uid)

    # ------------------------------------------------------------ forking a child

    def _fork_child(self, kind: str, header: dict, size: int, uid: int, fds: dict[str, int]) -> int:
        """Fork a child in fresh namespaces; returns its pid. ``fds`` are the child's ends of its channels.

        The request payload is wiped from the server as soon as the child has its copy.
        """
        plan = self.plan
        self.forks += 1
        if self.setup_delay_s:
            header["setup_delay_s"] = self.setup_delay_s
        if self.forks % 64 == 0:  # what the server itself left as cyclic garbage since the last freeze
            gc.collect()
        gc.freeze()  # keep the collector from touching (and so copying) every inherited object in the child
        try:
            if plan.has("pid_namespace"):
                lx.unshare(lx.CLONE_NEWPID)
            try:
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child: child_main never returns (it _exits)
                    childmod.child_main(plan, kind, header, self.payload, size, uid, fds, self.lifeline_r)
            finally:
                if plan.has("pid_namespace"):
                    lx.setns(plan.pidns_fd, lx.CLONE_NEWPID)
            return pid
        finally:
            wipe(self.payload, size)

    def _new_child_fds(self, kind: str) -> tuple[dict[str, int], dict[str, int]]:
        """(server ends, child ends) of the stdout/stderr pipes and the status/control channel."""
        out_r, out_w = os.pipe2(os.O_CLOEXEC)
        err_r, err_w = os.pipe2(os.O_CLOEXEC)
        if kind == "session":
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            ctl_parent, ctl_child = a.detach(), b.detach()
        else:
            ctl_parent, ctl_child = os.pipe2(os.O_CLOEXEC)
        return {"out": out_r, "err": err_r, "ctl": ctl_parent}, {"out": out_w, "err": err_w, "ctl": ctl_child}

    def _host_tmp(self, uid: int) -> str | None:
        """A per-child tmp dir on the host, only when the private tmpfs (fs_view) is unavailable."""
        if self.plan.has("fs_view") or not self.plan.host_tmp_base:
            return None
        path = make_private_dir(self.plan.host_tmp_base)
        if self.plan.mode == "root" and self.plan.has("unprivileged_user") and not self.plan.fs_as_root:
            os.chown(path, uid, uid)  # (with file access as uid 0 the child owns what root owns)
        return path

    # ------------------------------------------------------------ runs

    def run(self, header: dict, size: int) -> None:
        limits = header["limits"]
        timeout = float(header.get("timeout") or limits["timeout_s"])
        uid = self.uid_lo
        host_tmp = header["host_tmp"] = self._host_tmp(uid)
        mine, theirs = self._new_child_fds("run")
        out, err = self._streams(limits["max_output_bytes"])
        t0 = time.monotonic()
        try:
            try:
                pid = self._fork_child("run", header, size, uid, theirs)
            except OSError as exc:
                send(self.sock, {"status": "sandbox_error", "detail": f"could not fork: {exc}"})
                return
            finally:
                for fd in theirs.values():
                    os.close(fd)
            reply = self._watch(pid, t0, timeout, limits, mine, uid, out, err, host_tmp)
            if host_tmp:  # gone before the caller hears the run is over
                _rmtree_forcefully(host_tmp)
                host_tmp = None
            parts = (*out.parts(), *err.parts())
            reply["out"] = (len(parts[0]), len(parts[1]) + len(parts[2]), out.total)
            reply["err"] = (len(parts[3]), len(parts[4]) + len(parts[5]), err.total)
            self.sock.sendall(pack(reply))
            for part in parts:
                if len(part):
                    self.sock.sendall(part)
        finally:
            for fd in mine.values():
                with contextlib.suppress(OSError):
                    os.close(fd)
            out.wipe()
            err.wipe()
            wipe(self.chunk, self.chunk_used)
            self.chunk_used = 0
            if host_tmp:
                _rmtree_forcefully(host_tmp)

    def _streams(self, cap: int) -> tuple[CappedStream, CappedStream]:
        """The two capture buffers, reused across runs (wiped after each) unless the cap changes."""
        if not self.capture or self.capture[0].cap != cap:
            self.capture = (CappedStream(cap), CappedStream(cap))
        return self.capture

    def _watch(
        self,
        pid: int,
        t0: float,
        timeout: float,
        limits: dict,
        fds: dict[str, int],
        uid: int,
        out: CappedStream,
        err: CappedStream,
        host_tmp: str | None = None,
    ) -> dict:
        """Pump output, enforce the wall clock, memory, disk (``host_tmp``: a run dir on the host's disk,
        where no private tmpfs bounds it) and output limits, reap, classify.

        The wall clock of ``timeout`` starts when the program starts (the time in the child's ``ready``
        frame, its last act before the program's first line); until then the setup has ``SETUP_TIMEOUT_S``.
        """
        pidfd = os.pidfd_open(pid)
        streams = {fds["out"]: out, fds["err"]: err}
        status_reader: FrameReader = FrameReader()
        status_frames: list[bytes] = []
        status_bytes = 0
        hard = limits["max_output_total_bytes"]
        poller = select.poll()
        for fd in (*streams, fds["ctl"], pidfd, self.sock.fileno()):
            poller.register(fd, select.POLLIN)
        deadline = t0 + SETUP_TIMEOUT_S  # until the program starts; then its start + timeout
        started = False
        reason = None
        exited = False
        open_fds = {*streams, fds["ctl"]}
        chunk = memoryview(self.chunk)
        next_memory_check = t0 + MEMORY_CHECK_S
        host_pid: int | None = None
        clock: ProgramClock | None = None  # clock="program": the program's own time (set when it starts)
        try:
            while not exited and reason is None:
                now = time.monotonic()
                remaining = deadline - now
                if remaining <= 0 and clock is not None:
                    wait = clock.next_check()
                    if wait > 0:  # it was kept from a CPU: not its time yet
                        deadline = now + wait
                        continue
                    starved = clock.starved()
                    reason = "timeout" if starved is None else "starved"
                    break
                if remaining <= 0:
                    reason = "timeout" if started else "setup_timeout"
                    break
                if now >= next_memory_check:  # only programs that run a while pay for this
                    next_memory_check = now + MEMORY_CHECK_S
                    host_pid = host_pid or host_pid_of(pidfd)
                    if host_pid and tree_memory(host_pid) > limits["memory_bytes"]:
                        reason = "memory"
                        break
                    if host_tmp and dir_usage(host_tmp) > limits["disk_bytes"]:
                        reason = "disk"
                        break
                wait = min(remaining, max(0.0, next_memory_check - now))
                for fd, _ in poller.poll(wait * 1000):
                    if fd == pidfd:
                        exited = True
                    elif fd == self.sock.fileno():
                        if not self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT):
                            os.kill(pid, signal.SIGKILL)
                            raise SystemExit(0)  # the parent is gone: stop serving
                        poller.unregister(fd)  # a pipelined request: handle it after this run
                    elif fd in open_fds:
                        n = os.readv(fd, [chunk])
                        self.chunk_used = max(self.chunk_used, n)
                        if not n:
                            poller.unregister(fd)
                            open_fds.discard(fd)
                        elif fd in streams:
                            streams[fd].feed(chunk[:n])
                            if streams[fd].total > hard:
                                reason = "output_limit"
                        elif status_bytes < _STATUS_CAP:
                            status_bytes += n
                            status_frames += status_reader.feed(chunk[:n])
                            if not started and status_frames:
                                start = _program_start(status_frames[0], t0, time.monotonic())
                                if start is not None:
                                    started, deadline = True, start + timeout
                                    if limits.get("clock") == "program":
                                        host_pid = host_pid or host_pid_of(pidfd)
                                        if host_pid:
                                            waiters = (f"/proc/{host_pid}/schedstat",)
                                            clock = ProgramClock(host_pid, timeout, waiters, start)
            # the program's own time, read while its process is still there (a zombie at worst)
            program_s = clock.used(scan=reason is not None)[0] if clock is not None else None
            if reason:
                os.kill(pid, signal.SIGKILL)
            _, wait_status, usage = os.wait4(pid, 0)
        finally:
            os.close(pidfd)
        wall = time.monotonic() - t0
        if not self.plan.has("pid_namespace"):
            self._kill_leftovers(pid, uid)
        for fd in list(open_fds):  # everything in the child's namespace is dead: drain to EOF
            self._drain(fd, streams.get(fd), status_reader if fd == fds["ctl"] else None, status_frames)
        result = classify_run(wait_status, usage, wall, reason, limits, timeout, status_frames)
        if program_s is not None:
            result["program_s"] = program_s
            if reason == "starved":
                got = f"{program_s:.2f} s of its {timeout:g} s in {wall:.1f} s"
                result["detail"] = f"not timed: the machine is too busy (the program got {got})"
        return result

    def _kill_leftovers(self, pid: int, uid: int) -> None:
        """Without a pid namespace: kill the process group, and (as root) every process of the run's uid."""
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        if self.plan.mode == "root" and self.plan.has("unprivileged_user"):
            sweep_uid(uid)

    def _drain(self, fd: int, stream: CappedStream | None, reader: FrameReader | None, frames: list) -> None:
        os.set_blocking(fd, False)
        chunk = memoryview(self.chunk)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            try:
                n = os.readv(fd, [chunk])
                self.chunk_used = max(self.chunk_used, n)
            except BlockingIOError:
                waiter = select.poll()
                waiter.register(fd, select.POLLIN)
                waiter.poll(50)
                continue
            if not n:
                return
            if stream is not None:
                stream.feed(chunk[:n])
            elif reader is not None:
                frames += reader.feed(chunk[:n])

    # ------------------------------------------------------------ sessions

    def _refuse_session(self, mine: dict[str, int], uid: int, host_tmp: str | None, detail: str) -> None:
        """Give back what a session that did not start held (its channels, uid and host tmp) and say why."""
        for fd in mine.values():
            os.close(fd)
        self.free_uids.append(uid)
        if host_tmp:
            _rmtree_forcefully(host_tmp)
        send(self.sock, {"ok": False, "detail": detail})

    def open_session(self, header: dict, size: int) -> None:
        if not self.free_uids:
            wipe(self.payload, size)
            send(self.sock, {"ok": False, "detail": "no free sandbox uid for another session on this worker"})
            return
        uid = self.free_uids.pop()
        header["host_tmp"] = self._host_tmp(uid)
        mine, theirs = self._new_child_fds("session")
        try:
            pid = self._fork_child("session", header, size, uid, theirs)
        except OSError as exc:
            self._refuse_session(mine, uid, header["host_tmp"], f"could not fork the session: {exc}")
            return
        finally:
            for fd in theirs.values():
                os.close(fd)
        pidfd = os.pidfd_open(pid)
        ready, why = self._await_session_ready(mine["ctl"], pidfd)
        if not ready:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(pidfd)
            self._refuse_session(mine, uid, header["host_tmp"], f"session setup failed: {why}")
            return
        self.sessions[pidfd] = (pid, uid, header["host_tmp"], header["limits"]["disk_bytes"])
        self.session_memory[pidfd] = header["limits"]["memory_bytes"]
        socket.send_fds(self.sock, [b"F"], [mine["ctl"], mine["out"], mine["err"], pidfd])
        send(self.sock, {"ok": True, "pid": pid, "uid": uid, "host_tmp": header["host_tmp"]})
        for fd in mine.values():
            os.close(fd)

    @staticmethod
    def _await_session_ready(ctl: int, pidfd: int) -> tuple[bool, str]:
        reader = FrameReader()
        deadline = time.monotonic() + SETUP_TIMEOUT_S
        poller = select.poll()
        poller.register(ctl, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        while (remaining := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(remaining * 1000):
                if fd == pidfd:
                    return False, "the session process died during setup"
                data = os.read(ctl, 4096)
                if not data:
                    return False, "the session closed its channel during setup"
                frames = reader.feed(data)
                if frames:
                    first = json.loads(frames[0])
                    if first.get("ready"):
                        return True, ""
                    return False, str(first.get("setup_error"))
        return False, "setup timed out"


def _program_start(first_frame: bytes, t0: float, now: float) -> float | None:
    """When the program of a run started: the monotonic time its child's first status frame (written by the
    sandbox's own code, before any line of the program, so trusted) reports as the end of its setup, kept
    within [fork, now]; None when that frame is no ``ready`` report (a setup that failed)."""
    try:
        report = json.loads(first_frame)
    except ValueError:
        return None
    if not isinstance(report, dict) or report.get("ready") is not True:
        return None
    at = report.get("t")
    if type(at) is not float or not math.isfinite(at):
        return now
    return min(max(at, t0), now)


def _rmtree_forcefully(path: str) -> None:
    """Remove a per-run host tmp dir even if the program made parts of it unreadable."""

    def fix(func, p, _exc):
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)

    shutil.rmtree(path, onerror=fix)


def serve(sock_fd: int) -> None:
    """Entry point of the fork server process (see ``BOOTSTRAP`` in :mod:`toolgym.sandbox.client`)."""
    sock = socket.socket(fileno=sock_fd)
    sock.setblocking(True)
    try:
        config = recv(sock)
        if not isinstance(config, dict):
            raise ProtocolError("malformed config")
        server = ForkServer(sock, config)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            send(sock, {"ok": False, "detail": f"fork server failed to start: {type(exc).__name__}: {exc}"})
        raise SystemExit(1) from None
    send(sock, server.hello())
    try:
        server.serve_forever()
    except OSError as exc:
        if exc.errno not in (errno.EPIPE, errno.ECONNRESET):
            raise
    sys.exit(0)
