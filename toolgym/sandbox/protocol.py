"""Wire formats and output capture shared by the parent, the fork servers and the children.

Frames are a 4-byte big-endian length followed by the payload. Between the parent and a fork server (both
ours) the payload is ``marshal`` of plain dicts: fast, and never able to run code when loaded. Anything that
crosses from a sandboxed process (status lines, session replies) is JSON with a size cap, parsed as untrusted.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import socket
import struct

_HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30  # requests can carry files; results are capped far below this
MAX_UNTRUSTED_FRAME = 1 << 16


class ProtocolError(ConnectionError):
    """The peer closed the channel or sent something malformed."""


def pack(obj: dict) -> bytes:
    payload = marshal.dumps(obj)
    return _HEADER.pack(len(payload)) + payload


def send(sock: socket.socket, obj: dict) -> None:
    sock.sendall(pack(obj))


def send_request(sock: socket.socket, header: dict, payload: dict) -> None:
    """A header frame followed by the raw ``marshal`` bytes of the payload (which the server never parses)."""
    raw = marshal.dumps(payload)
    sock.sendall(pack({**header, "payload_len": len(raw)}) + raw)


def recv_exact(sock: socket.socket, n: int) -> bytes:
    return _recv_exact(sock, n)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            raise ProtocolError("peer closed the channel")
        buf += chunk
    return bytes(buf)


def recv(sock: socket.socket, max_len: int = MAX_FRAME) -> object:
    (length,) = _HEADER.unpack(_recv_exact(sock, 4))
    if length > max_len:
        raise ProtocolError(f"frame of {length} bytes exceeds {max_len}")
    try:
        return marshal.loads(_recv_exact(sock, length))
    except (EOFError, ValueError, TypeError) as exc:
        raise ProtocolError(f"undecodable frame: {exc}") from exc


def frame_json(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


class FrameReader:
    """Incremental reader of length-prefixed frames from an untrusted byte stream.

    ``feed`` never raises: it returns every complete frame before the first malformed one, then sets
    ``error`` and ignores the rest of the stream. So garbage written after a trusted first frame (which the
    sandbox writes before any user code runs) can never hide that frame.
    """

    def __init__(self, max_len: int = MAX_UNTRUSTED_FRAME) -> None:
        self._buf = bytearray()
        self._max = max_len
        self.error: str | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self.error:
            return []
        self._buf += data
        frames = []
        while len(self._buf) >= 4:
            (length,) = _HEADER.unpack_from(self._buf)
            if length > self._max:
                self.error = f"frame of {length} bytes exceeds {self._max}"
                self._buf.clear()
                break
            if len(self._buf) < 4 + length:
                break
            frames.append(bytes(self._buf[4 : 4 + length]))
            del self._buf[: 4 + length]
        return frames


def read_frame_fd(fd: int, max_len: int = MAX_FRAME) -> bytes | None:
    """Blocking read of one frame from a raw fd; None on a clean EOF before any byte."""
    head = _read_exact_fd(fd, 4)
    if head is None:
        return None
    (length,) = _HEADER.unpack(head)
    if length > max_len:
        raise ProtocolError(f"frame of {length} bytes exceeds {max_len}")
    body = _read_exact_fd(fd, length)
    if body is None:
        raise ProtocolError("channel closed mid-frame")
    return body


def _read_exact_fd(fd: int, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            if buf:
                raise ProtocolError("channel closed mid-frame")
            return None
        buf += chunk
    return bytes(buf)


def wipe(buf: bytearray, n: int | None = None) -> None:
    """Zero (the first ``n`` bytes of) a buffer in place, so its bytes cannot be found by a later fork."""
    n = len(buf) if n is None else min(n, len(buf))
    if n:
        ctypes.memset((ctypes.c_char * len(buf)).from_buffer(buf), 0, n)


def recv_payload(sock: socket.socket, buf: bytearray, n: int) -> bytearray:
    """Receive exactly ``n`` raw bytes into ``buf`` (grown if needed, the old one wiped); return it."""
    if len(buf) < n:
        wipe(buf)
        buf = bytearray(max(n, 2 * len(buf)))
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:n])
        if not k:
            raise ProtocolError("peer closed the channel")
        got += k
    return buf


def render_capped(head: bytes, tail: bytes, total: int) -> str:
    """Decoded text of a capped stream; when bytes were dropped, head and tail joined by a marker."""
    omitted = total - len(head) - len(tail)
    if omitted <= 0:
        return (head + tail).decode("utf-8", "replace")
    marker = f"\n[... {omitted} bytes truncated ({total} bytes total) ...]\n"
    return head.decode("utf-8", "replace") + marker + tail.decode("utf-8", "replace")


class CappedStream:
    """Keeps the first and the last bytes of a stream, counting the rest, in fixed memory.

    The head is what a model usually needs (the first error); the tail is where a traceback or a final
    answer ends up. A 100 MB flood costs the reader ``cap`` bytes: the head and a ring buffer for the tail
    are allocated once and written in place (never resized), so ``wipe`` really erases every byte seen.
    """

    __slots__ = ("_head", "_head_len", "_tail", "_tail_len", "_tail_pos", "total")

    def __init__(self, cap: int) -> None:
        self._head = bytearray(cap // 2)
        self._tail = bytearray(cap - cap // 2)
        self._head_len = 0
        self._tail_pos = 0  # next write position in the ring
        self._tail_len = 0
        self.total = 0

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        n = len(view)
        self.total += n
        take = min(len(self._head) - self._head_len, n)
        if take:
            self._head[self._head_len : self._head_len + take] = view[:take]
            self._head_len += take
            view = view[take:]
        size = len(self._tail)
        if not len(view) or not size:
            return
        if len(view) >= size:
            self._tail[:] = view[len(view) - size :]
            self._tail_pos, self._tail_len = 0, size
            return
        first = min(size - self._tail_pos, len(view))
        self._tail[self._tail_pos : self._tail_pos + first] = view[:first]
        rest = len(view) - first
        if rest:
            self._tail[:rest] = view[first:]
        self._tail_pos = (self._tail_pos + len(view)) % size
        self._tail_len = min(size, self._tail_len + len(view))

    @property
    def truncated(self) -> bool:
        return self.total > self._head_len + self._tail_len

    def parts(self) -> tuple[memoryview, memoryview, memoryview]:
        """(head, tail part 1, tail part 2) as views into the buffers, for sending without copies."""
        head = memoryview(self._head)[: self._head_len]
        tail = memoryview(self._tail)
        if self._tail_len < len(self._tail):
            return head, tail[: self._tail_len], tail[:0]
        return head, tail[self._tail_pos :], tail[: self._tail_pos]

    def text(self) -> str:
        head, t1, t2 = self.parts()
        return render_capped(bytes(head), bytes(t1) + bytes(t2), self.total)

    def wipe(self) -> None:
        """Zero every byte this stream ever held and start over (the buffers are reused, not freed)."""
        wipe(self._head, self._head_len)
        wipe(self._tail, self._tail_len)
        self._head_len = self._tail_len = self._tail_pos = self.total = 0

    @property
    def cap(self) -> int:
        return len(self._head) + len(self._tail)
