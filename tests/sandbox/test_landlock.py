"""Landlock as a layer: the ruleset it builds (read-only allowlist, one writable dir, TCP and signals
scoped) enforced on a forked process, and ``/etc`` narrowed to what other users may read."""

from __future__ import annotations

import json
import os
import socket
import sys

import pytest

from toolgym.sandbox import _linux as lx
from toolgym.sandbox import landlock

ABI = landlock.abi_version()
pytestmark = pytest.mark.skipif(ABI == 0, reason=f"no Landlock here: {landlock.unavailable_reason()}")


def confined(read: list[str], write: list[str], probe) -> dict:
    """Fork, confine the child to ``read``/``write`` and report what ``probe()`` saw."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the confined child
        try:
            os.close(r)
            lx.prctl(lx.PR_SET_NO_NEW_PRIVS, 1)
            landlock.restrict(read, write, ("/dev/null",), abi=ABI)
            os.write(w, json.dumps(probe()).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def attempt(fn) -> str:
    try:
        fn()
        return "allowed"
    except OSError:
        return "refused"


def test_only_the_allowlist_is_read_and_only_the_own_dir_written(tmp_path):
    own, other = tmp_path / "own", tmp_path / "other"
    own.mkdir()
    other.mkdir()
    (other / "secret").write_text("x")
    read = [
        "/usr",
        "/lib",
        "/lib64",
        "/bin",
        os.path.realpath(sys.base_prefix),
        *landlock.readable_by_others("/etc"),
    ]

    def probe() -> dict:
        return {
            "passwd": attempt(lambda: open("/etc/passwd").read()),
            "other": attempt(lambda: open(other / "secret").read()),
            "write_own": attempt(lambda: (own / "f").write_text("x")),
            "write_other": attempt(lambda: (other / "f").write_text("x")),
            "devnull": attempt(lambda: open("/dev/null", "w").write("x")),
        }

    out = confined(read, [str(own)], probe)
    assert out == {
        "passwd": "allowed",
        "other": "refused",
        "write_own": "allowed",
        "write_other": "refused",
        "devnull": "allowed",
    }
    assert not (other / "f").exists() and (own / "f").exists()


@pytest.mark.skipif(ABI < 6, reason="signal scoping needs Landlock ABI 6")
def test_tcp_and_signals_outside_the_domain_are_refused():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port, parent = listener.getsockname()[1], os.getpid()
    out = confined(
        ["/"],
        [],
        lambda: {
            "tcp": attempt(lambda: socket.create_connection(("127.0.0.1", port), 1)),
            "signal": attempt(lambda: os.kill(parent, 0)),
            "self": attempt(lambda: os.kill(os.getpid(), 0)),
        },
    )
    listener.close()
    assert out == {"tcp": "refused", "signal": "refused", "self": "allowed"}


def test_etc_allowlist_leaves_out_what_others_cannot_read(tmp_path):
    etc = tmp_path / "etc"
    (etc / "ssh").mkdir(parents=True)
    (etc / "passwd").write_text("x")
    (etc / "shadow").write_text("x")
    (etc / "shadow").chmod(0o640)
    (etc / "ssh" / "ssh_config").write_text("x")
    (etc / "ssh" / "host_key").write_text("x")
    (etc / "ssh" / "host_key").chmod(0o600)
    (etc / "locale").mkdir()
    (etc / "locale" / "a").write_text("x")
    rules = landlock.readable_by_others(str(etc))
    assert sorted(rules) == sorted(
        [str(etc / "locale"), str(etc / "passwd"), str(etc / "ssh" / "ssh_config")]
    )
    closed = tmp_path / "closed"
    (closed / "python").mkdir(parents=True)
    closed.chmod(0o700)  # as /root holding a pyenv Python: another uid cannot reach what lies beneath
    assert landlock.world_readable("/usr") and not landlock.world_readable(str(closed / "python"))
