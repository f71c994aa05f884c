"""Stateful interpreter sessions: one long-lived isolated child per trajectory, variables kept across calls.

A fork server forks the session child with the same layers as a run and hands the parent four descriptors:
the control socket, the stdout and stderr pipes and a pidfd. The parent then drives the child directly:
it sends a snippet, pumps output with the same caps as a run, and enforces the wall timeout by SIGKILL
through the pidfd (which kills the child's whole pid namespace). Nothing is re-executed: state lives in
the child's memory, so a timeout or a crash loses it, and the next call says so (``session_reset``). When
the loss was not the program's doing (the fork server that hosts the session died, the sandbox restarted, an
idle session gave its slot away) the result also says ``infra_reset``, and a call cut short by the fork
server's death is a ``sandbox_error``: a trainer must not blame the model. A session beyond the sandbox's
capacity waits for a slot (``toolgym.sandbox.capacity``); the wait is reported as ``session_wait_s``.

Replies from the child are untrusted (user code runs in that process and can write to the socket), so they
are size-capped JSON and a malformed one ends the session.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TypeVar

from toolgym.core.waits import add_wait
from toolgym.sandbox.capacity import NoSessionSlot
from toolgym.sandbox.limits import Limits
from toolgym.sandbox.protocol import CappedStream, FrameReader, frame_json
from toolgym.sandbox.result import ExecResult, IsolationReport

if TYPE_CHECKING:
    from toolgym.sandbox.client import ServerHandle

T = TypeVar("T")

_READ_CHUNK = 1 << 16


class SessionProcess:
    """The parent's end of one live session child."""

    def __init__(
        self, fds: list[int], pid: int, uid: int, server: ServerHandle | None = None, launches: int = 0
    ) -> None:
        self.ctl, self.out, self.err, self.pidfd = fds
        self.pid = pid
        self.uid = uid
        self.alive = True
        self._server = server
        self._launches = launches
        for fd in (self.ctl, self.out, self.err):
            os.set_blocking(fd, False)
        self.host_pid = _pidfd_pid(self.pidfd)

    def server_lost(self) -> bool:
        """True if the fork server that forked this session died or was restarted since (the session dies
        with it): a loss of state that is the sandbox's doing."""
        server = self._server
        return server is not None and (not server.alive or server.launches != self._launches)

    def exited(self) -> bool:
        """True if the process is gone (its pidfd polls readable)."""
        p = select.poll()
        p.register(self.pidfd, select.POLLIN)
        return bool(p.poll(0))

    def kill(self) -> None:
        if not self.alive:
            return
        self.alive = False
        with contextlib.suppress(OSError):
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        for fd in (self.ctl, self.out, self.err, self.pidfd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def call(self, code: str, stdin: str | None, timeout: float, limits: Limits) -> dict:
        """Run one snippet; returns the fields of an ExecResult. Kills the process on timeout/flood/death."""
        t0 = time.monotonic()
        pending = frame_json(json.dumps({"code": code, "stdin": stdin}).encode())
        out, err = CappedStream(limits.max_output_bytes), CappedStream(limits.max_output_bytes)
        streams = {self.out: out, self.err: err}
        reader = FrameReader()
        reply: dict | None = None
        reason = None
        poller = select.poll()
        poller.register(self.ctl, select.POLLIN | select.POLLOUT)
        for fd in (self.out, self.err, self.pidfd):
            poller.register(fd, select.POLLIN)
        deadline = t0 + timeout
        while reply is None and reason is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                reason = "timeout"
                break
            for fd, events in poller.poll(remaining * 1000):
                if fd == self.pidfd:
                    reason = "died"
                elif fd == self.ctl:
                    if events & select.POLLOUT and pending:
                        try:
                            pending = pending[os.write(self.ctl, pending) :]
                        except OSError:
                            reason = "died"
                            break
                        if not pending:
                            poller.modify(self.ctl, select.POLLIN)
                    if events & (select.POLLIN | select.POLLHUP):
                        data = _read(fd)
                        if data == b"":
                            reason = "died"
                        elif data:
                            frames = reader.feed(data)
                            try:
                                if frames:
                                    reply = json.loads(frames[0])
                                    if not isinstance(reply, dict):
                                        raise ValueError("reply is not an object")
                                elif reader.error:
                                    raise ValueError(reader.error)
                            except ValueError:
                                reply, reason = None, "protocol"
                else:
                    data = _read(fd)
                    if data:
                        streams[fd].feed(data)
                        if streams[fd].total > limits.max_output_total_bytes:
                            reason = "output_limit"
        # What was written before the reply is already in the pipes. Bounded: a background thread of the
        # session may keep writing forever (its later output shows up in the next call).
        for fd, stream in streams.items():
            for _ in range(64):
                data = _read(fd)
                if not data:
                    break
                stream.feed(data)
        wall = time.monotonic() - t0
        base = {
            "stdout": out.text(),
            "stderr": err.text(),
            "stdout_truncated": out.truncated,
            "stderr_truncated": err.truncated,
            "wall_s": wall,
        }
        if reason is not None:
            self.kill()
            lost = "the session was killed and its state is lost; the next call starts a fresh interpreter"
            status, detail = {
                "timeout": ("timeout", f"wall-clock limit of {timeout:g} s exceeded; {lost}"),
                "output_limit": (
                    "output_limit",
                    f"output exceeded {limits.max_output_total_bytes} bytes; {lost}",
                ),
                "died": (
                    "killed",
                    "the session process died during this call (it exited, crashed or hit a resource "
                    f"limit); {lost}",
                ),
                "protocol": ("error", f"the program interfered with the session channel; {lost}"),
            }[reason]
            return {**base, "status": status, "detail": detail}
        assert reply is not None
        return {**base, **_classify_reply(reply, limits)}


def _pidfd_pid(pidfd: int) -> int | None:
    """The pid a pidfd refers to, in our pid namespace (from /proc/self/fdinfo)."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as fh:
            for line in fh:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def _read(fd: int) -> bytes | None:
    """Non-blocking read: bytes, b'' at EOF, None when nothing is available."""
    try:
        return os.read(fd, _READ_CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def _classify_reply(reply: dict, limits: Limits) -> dict:
    exit_code = reply.get("exit_code")
    exit_code = exit_code if isinstance(exit_code, int) else 1
    exc = reply.get("exc")
    cpu = reply.get("cpu_s")
    peak = reply.get("peak")
    fields: dict = {
        "exit_code": exit_code,
        "cpu_s": float(cpu) if isinstance(cpu, int | float) else 0.0,
        "peak_memory_bytes": int(peak) if isinstance(peak, int) else None,
    }
    if exc == "MemoryError":
        fields.update(status="memory", detail=f"memory limit of {limits.memory_bytes} bytes reached")
    else:
        fields["status"] = "ok" if exit_code == 0 else "error"
    return fields


class SessionHost(Protocol):
    """What a session needs of the sandbox that made it (``LocalSandbox``): its child process, its slot, a
    worker to run on, and the isolation report its results carry."""

    @property
    def isolation(self) -> IsolationReport: ...

    def _open_session_process(self, sess: Session, limits: Limits, files: dict | None) -> SessionProcess: ...

    async def _await_slot(self, sess: Session) -> None: ...

    def _touch_session(self, sess: Session) -> None: ...

    def _forget_session(self, sess: Session) -> None: ...

    async def _bounded(self, fn: Callable[[], T]) -> T: ...


class Session:
    """A stateful interpreter for one trajectory (``sandbox.session()``). Thread-safe, one call at a time.

    The child process starts on the first call, once the session holds one of the sandbox's slots (it keeps
    it until it is closed or its process ends). ``Limits.cpu_s`` of a session is the CPU budget of the whole
    session (one process); ``timeout_s`` applies to each call. Output that background threads or processes of
    the session write between calls is reported with the next call.
    """

    def __init__(self, sandbox: SessionHost, limits: Limits, files: dict | None, transient: bool = False):
        self._sandbox = sandbox
        self.limits = limits
        self._files = files
        self.transient = transient
        self._proc: SessionProcess | None = None
        self._lost: str | None = None
        self._lost_to_infra = False
        self._closed = False
        self.calls = 0
        #: seconds spent waiting for a slot, not yet reported with a call's result
        self.waited_s = 0.0
        self.lock = threading.Lock()

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.alive

    def run(self, code: str, *, stdin: str | None = None, timeout: float | None = None) -> ExecResult:
        res = self._run(code, stdin, timeout)
        add_wait(res.session_wait_s)  # against the episode running this call, if any (toolgym.core.waits)
        return res

    def _run(self, code: str, stdin: str | None, timeout: float | None) -> ExecResult:
        with self.lock:
            if self._closed:
                raise RuntimeError("session is closed")
            reset_note = ""
            if self._proc is not None and self._proc.alive and self._proc.exited():
                # died between calls: with its fork server (ours), or its own doing (CPU budget, a crash)
                self._lose("the session process died between calls", infra=self._proc.server_lost())
            infra_reset = False
            if self._proc is None or not self._proc.alive:
                if self._lost:
                    reset_note = f"session was reset ({self._lost}): variables from earlier calls are gone. "
                    infra_reset, self._lost, self._lost_to_infra = self._lost_to_infra, None, False
                try:
                    self._proc = self._sandbox._open_session_process(self, self.limits, self._files)
                except Exception as exc:
                    why = f"could not start the session: {exc}"
                    if isinstance(exc, NoSessionSlot):
                        why, self.waited_s = str(exc), self.waited_s + exc.waited_s
                    return self._result(
                        {"status": "sandbox_error", "detail": f"{reset_note}{why}"}, infra_reset=infra_reset
                    )
            self._sandbox._touch_session(self)
            self.calls += 1
            proc = self._proc
            fields = proc.call(code, stdin, timeout or self.limits.timeout_s, self.limits)
            if not proc.alive:
                server_lost = proc.server_lost()
                if server_lost:  # the fork server died mid-call and took the session with it
                    lost = "the sandbox's fork server died during this call; the session's state is lost"
                    fields.update(status="sandbox_error", detail=lost)
                self._lose(f"the previous call ended with status {fields['status']}", infra=server_lost)
            if reset_note:
                fields["detail"] = (reset_note + fields.get("detail", "")).strip()
            return self._result(fields, reset=bool(reset_note), infra_reset=infra_reset)

    def _result(self, fields: dict, *, reset: bool = False, infra_reset: bool = False) -> ExecResult:
        waited, self.waited_s = self.waited_s, 0.0
        return ExecResult(
            **fields,
            session_reset=reset,
            infra_reset=infra_reset,
            session_wait_s=waited,
            isolation=self._sandbox.isolation,
        )

    def _lose(self, why: str, *, infra: bool) -> None:
        if self._proc is not None:
            self._proc.kill()
        self._proc = None
        self._lost, self._lost_to_infra = why, infra
        self._sandbox._forget_session(self)

    async def arun(self, code: str, *, stdin: str | None = None, timeout: float | None = None) -> ExecResult:
        """``run`` for asyncio. A session that needs a slot waits for it here, holding no sandbox worker."""
        res = None
        if not self.alive and not self._closed:
            try:
                await self._sandbox._await_slot(self)
            except NoSessionSlot as exc:
                self.waited_s += exc.waited_s
                res = self._result({"status": "sandbox_error", "detail": str(exc)})
        if res is None:
            res = await self._sandbox._bounded(lambda: self._run(code, stdin, timeout))
        add_wait(res.session_wait_s)
        return res

    def evict(self, why: str, *, infra: bool = True) -> None:
        """Kill the child; the next call reports that state was lost (``infra``: through no fault of the
        program). Waits for a call in progress to end."""
        with self.lock:
            if self._proc is not None and self._proc.alive:
                self._lose(why, infra=infra)

    def try_evict_idle(self, why: str) -> bool:
        """For the slot table: evict now unless a call is in progress (then False)."""
        if not self.lock.acquire(blocking=False):
            return False
        try:
            self._lose(why, infra=True)
            return True
        finally:
            self.lock.release()

    def close(self) -> None:
        with self.lock:
            self._closed = True
            if self._proc is not None:
                self._proc.kill()
                self._proc = None
            self._sandbox._forget_session(self)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
