"""The parent's handle on one fork server process: start it, send requests, notice when it dies.

The server is started as ``python -s -P -c BOOTSTRAP`` with only ``SERVER_ENV`` and ``cwd=/``, in a new
session (no controlling terminal). The bootstrap registers bare ``toolgym``/``toolgym.sandbox`` package stubs
so the server imports only the few light modules it needs (no pydantic, no env registry), whatever the state
of the rest of the package.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

from toolgym.sandbox.protocol import ProtocolError, recv, recv_exact, render_capped, send, send_request

_PKG_ROOT = str(Path(__file__).resolve().parents[2])

BOOTSTRAP = """
import sys, types
root, fd = sys.argv[1], int(sys.argv[2])
for name in ("toolgym", "toolgym.sandbox"):
    module = types.ModuleType(name)
    module.__path__ = [root + "/" + name.replace(".", "/")]
    sys.modules[name] = module
from toolgym.sandbox.forkserver import serve
serve(fd)
"""

# The server's whole environment: thread caps keep numpy/OpenBLAS from starting threads (the server must stay
# single-threaded to fork and unshare safely); nothing else is inherited from the host. PYTHONHASHSEED=0:
# every child is forked from the server and shares its string hashes, so the same program prints a set in the
# same order in every process and on every machine (a seed and a sequence of actions name one episode).
# The interpreter flags are ``-I`` less ``-E`` (``-s -P``), so that this variable, ours alone, is read.
SERVER_ENV = {
    "PYTHONHASHSEED": "0",
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


class ServerDied(RuntimeError):
    """The fork server is gone or unresponsive; the request it was serving is lost."""


class ServerHandle:
    """One fork server. Not thread-safe by itself: the sandbox hands each handle to one caller at a time."""

    def __init__(self, index: int, config: dict) -> None:
        self.index = index
        self.config = config
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.hello: dict | None = None
        self.lock = threading.Lock()
        #: how many times this server was started: a session knows the server that forked it died (and took
        #: the session with it) when this changed or the server is down
        self.launches = 0

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self.sock is not None

    def launch(self) -> None:
        """Start the process and send its configuration (does not wait for it to be ready)."""
        self.launches += 1
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-s", "-P", "-c", BOOTSTRAP, _PKG_ROOT, str(child.fileno())],
                env=SERVER_ENV,
                cwd="/",
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                pass_fds=(child.fileno(),),
                start_new_session=True,
            )
        finally:
            child.close()
        self.sock = parent
        send(parent, self.config)

    def await_hello(self, timeout: float) -> dict:
        """Wait for the server's report of what it set up; raises ServerDied if it failed to start."""
        assert self.sock is not None
        self.sock.settimeout(timeout)
        try:
            hello = recv(self.sock)
        except (ProtocolError, OSError) as exc:
            self.kill()
            raise ServerDied(f"fork server {self.index} did not start: {exc}") from exc
        if not isinstance(hello, dict) or not hello.get("ok"):
            self.kill()
            detail = hello.get("detail") if isinstance(hello, dict) else hello
            raise ServerDied(f"fork server {self.index} failed to start: {detail}")
        self.hello = hello
        return hello

    def start(self, timeout: float) -> dict:
        self.launch()
        return self.await_hello(timeout)

    def run(self, header: dict, payload: dict, timeout: float) -> dict:
        """Send one run and wait for its reply (header frame, then the raw head/tail bytes of each stream).

        Any failure kills the server and raises ServerDied.
        """
        if not self.alive:
            raise ServerDied(f"fork server {self.index} is not running")
        assert self.sock is not None
        try:
            self.sock.settimeout(timeout)
            send_request(self.sock, header, payload)
            reply = recv(self.sock)
            if not isinstance(reply, dict):
                raise ProtocolError("malformed reply")
            for stream in ("out", "err"):
                head_len, tail_len, total = reply.pop(stream, (0, 0, 0))
                head = recv_exact(self.sock, head_len) if head_len else b""
                tail = recv_exact(self.sock, tail_len) if tail_len else b""
                reply[f"std{stream}"] = render_capped(head, tail, total)
                reply[f"std{stream}_truncated"] = total > head_len + tail_len
        except TimeoutError as exc:
            self.kill()
            raise ServerDied(f"fork server {self.index} did not answer within {timeout:.1f} s") from exc
        except (ProtocolError, OSError) as exc:
            code = self.kill()
            raise ServerDied(f"fork server {self.index} died ({_describe_exit(code)}): {exc}") from exc
        return reply

    def open_session(self, header: dict, payload: dict, timeout: float) -> tuple[dict, list[int]]:
        """Ask for a session child; a successful reply carries its fds (SCM_RIGHTS) before the frame."""
        if not self.alive:
            raise ServerDied(f"fork server {self.index} is not running")
        assert self.sock is not None
        fds: list[int] = []
        try:
            self.sock.settimeout(timeout)
            send_request(self.sock, header, payload)
            reply = recv(self.sock) if self._peek_is_frame() else None
            if reply is None:
                _, fds, _, _ = socket.recv_fds(self.sock, 1, 8)
                reply = recv(self.sock)
        except (ProtocolError, OSError) as exc:
            for fd in fds:
                os.close(fd)
            code = self.kill()
            raise ServerDied(f"fork server {self.index} died ({_describe_exit(code)}): {exc}") from exc
        return reply, fds  # type: ignore[return-value]

    def _peek_is_frame(self) -> bool:
        """Session replies start with a one-byte ``F`` carrying fds; failures are a bare frame."""
        assert self.sock is not None
        head = self.sock.recv(1, socket.MSG_PEEK)
        if not head:
            raise ProtocolError("peer closed the channel")
        return head != b"F"

    def kill(self) -> int | None:
        """SIGKILL the server (its children die with it via PDEATHSIG) and reap it; returns its exit code."""
        code = None
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = self.proc.wait(timeout=10)
        self._remove_host_tmp()
        return code

    def _remove_host_tmp(self) -> None:
        """A killed server cannot clean up the host tmp dirs of its runs (only used without fs_view)."""
        base = (self.hello or {}).get("host_tmp_base")
        if base and os.path.basename(base).startswith("toolgym-sandbox-"):
            shutil.rmtree(base, ignore_errors=True)

    def close(self) -> None:
        """Graceful stop: closing the socket makes the server kill its sessions and exit."""
        if self.sock is not None:
            with contextlib.suppress(OSError):
                self.sock.close()
            self.sock = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._remove_host_tmp()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by signal {-code}"
    return f"exit code {code}"
