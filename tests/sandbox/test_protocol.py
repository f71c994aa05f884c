"""The wire helpers: capped output capture and the untrusted frame reader."""

from __future__ import annotations

import json
import struct

from hypothesis import given
from hypothesis import strategies as st

from toolgym.sandbox.protocol import CappedStream, FrameReader, frame_json, render_capped, wipe


@given(
    cap=st.integers(min_value=2, max_value=300),
    data=st.binary(max_size=1000),
    cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=20),
)
def test_capped_stream_keeps_exact_head_and_tail(cap, data, cuts):
    stream = CappedStream(cap)
    pos = 0
    for cut in [*cuts, len(data)]:
        stream.feed(data[pos : pos + cut])
        pos += cut
    stream.feed(data[pos:])
    head, t1, t2 = (bytes(p) for p in stream.parts())
    assert stream.total == len(data)
    if len(data) <= cap:
        assert head + t1 + t2 == data and not stream.truncated
    else:
        assert head == data[: cap // 2]
        assert t1 + t2 == data[len(data) - (cap - cap // 2) :]
        assert stream.truncated


def test_capped_text_marks_truncation():
    stream = CappedStream(10)
    stream.feed(b"0123456789ABCDEFGHIJ")
    assert stream.text() == "01234\n[... 10 bytes truncated (20 bytes total) ...]\nFGHIJ"
    assert render_capped(b"ab", b"", 2) == "ab"


def test_wipe_zeroes_in_place():
    buf = bytearray(b"secret" * 10)
    view = memoryview(buf)
    wipe(buf, 6)
    assert bytes(view[:6]) == b"\0" * 6 and bytes(view[6:12]) == b"secret"
    stream = CappedStream(8)
    stream.feed(b"abcdefghijkl")
    stream.wipe()
    assert all(b == 0 for part in stream.parts() for b in bytes(part))


def test_frame_reader_reassembles_split_frames():
    reader = FrameReader()
    data = frame_json(b'{"a": 1}') + frame_json(b'{"b": 2}')
    frames = [f for byte in data for f in reader.feed(bytes([byte]))]
    assert [json.loads(f) for f in frames] == [{"a": 1}, {"b": 2}]


def test_garbage_after_a_trusted_frame_never_hides_it():
    """The sandbox writes its 'ready' frame before user code; the program's garbage must not erase it."""
    ready = frame_json(json.dumps({"ready": True}).encode())
    forged = frame_json(json.dumps({"setup_error": "x"}).encode())
    reader = FrameReader()
    frames = reader.feed(ready + forged + b"\xff" * 100 + frame_json(b"{}"))
    assert [json.loads(f) for f in frames] == [{"ready": True}, {"setup_error": "x"}]
    assert reader.error and reader.feed(frame_json(b"{}")) == []


def test_frame_reader_caps_frame_size():
    reader = FrameReader(max_len=16)
    assert reader.feed(struct.pack(">I", 17) + b"x" * 17) == []
    assert "exceeds" in reader.error
