"""Hostile programs on a loopback network of their own (``LocalSandbox(network="loopback")``, the judge's).

A run may open inet sockets and serve on 127.0.0.1; it must still reach nothing else: not the host's
listeners on its loopback, not a server another run started at the same time, not the world (a connect
beyond the machine is dropped: it times out), and it may not change its namespace's links and routes or open
any other kind of socket. The sandbox is the red team's shared one's twin (``with_network``): the same
layers, limits and slots.
"""

from __future__ import annotations

import secrets
import socket
import textwrap
import threading

import pytest

from toolgym.sandbox.local import wait_until


@pytest.fixture(scope="module")
def box(sb):
    net = sb.with_network("loopback")
    if "loopback_network" not in net.isolation.active:
        pytest.skip(f"no loopback network here: {net.isolation.missing.get('loopback_network')}")
    yield net
    assert wait_until(lambda: not net.stray_processes(), timeout=5), net.stray_processes()


def run(box, code: str, **kw):
    res = box.run(textwrap.dedent(code), **kw)
    assert res.status == "ok", (res.status, res.detail, res.stderr[-800:])
    return res.stdout.split()


def test_a_run_serves_itself_and_reaches_neither_the_hosts_loopback_nor_the_world(box):
    listeners = [
        socket.create_server(("127.0.0.1", 0)),
        socket.create_server(("::1", 0), family=socket.AF_INET6),
    ]
    for listener in listeners:
        listener.settimeout(0.3)
    ports = [listener.getsockname()[1] for listener in listeners]
    try:
        out = run(
            box,
            f"""
            import socket
            server = socket.create_server(("127.0.0.1", 0))
            socket.create_connection(server.getsockname(), 1).sendall(b"x")
            print("own", server.accept()[0].recv(1).decode())
            for host, port in (("127.0.0.1", {ports[0]}), ("::1", {ports[1]}), ("10.255.255.1", 80),
                               ("1.1.1.1", 53)):
                try:
                    socket.create_connection((host, port), 1)
                    print("REACHED")
                except OSError as exc:
                    print(type(exc).__name__)
            try:  # (the name servers are rejected: no lookup leaves the machine, and none waits)
                socket.getaddrinfo("example.com", 80)
                print("RESOLVED")
            except OSError as exc:
                print(type(exc).__name__)
            """,
        )
        assert out == [
            "own",
            "x",
            "ConnectionRefusedError",
            "ConnectionRefusedError",
            "TimeoutError",
            "TimeoutError",
            "gaierror",
        ]
        for listener in listeners:
            with pytest.raises(TimeoutError):
                listener.accept()
    finally:
        for listener in listeners:
            listener.close()


SERVE = """
import socket, time
server = socket.create_server(("127.0.0.1", {port}))
since = time.time()
server.settimeout(4)
try:
    server.accept()
    print("ACCEPTED")
except OSError:
    print("alone")
print(since, time.time())
"""


def test_two_runs_at_once_do_not_share_a_loopback(box):
    """A run's server is its own: another run connecting while it listens sees a different 127.0.0.1 (and
    may bind the same port). The clocks say the connect happened while the server listened."""
    port = 40_000 + secrets.randbelow(20_000)
    served: list = []
    serving = threading.Thread(target=lambda: served.append(box.run(SERVE.format(port=port), timeout=10)))
    serving.start()
    try:
        out = run(
            box,
            f"""
            import socket, time
            time.sleep(1.5)
            at = time.time()
            try:
                socket.create_connection(("127.0.0.1", {port}), 1)
                print("REACHED")
            except OSError as exc:
                print(type(exc).__name__)
            socket.create_server(("127.0.0.1", {port}))
            print("bound", at)
            """,
        )
    finally:
        serving.join()
    assert out[:2] == ["ConnectionRefusedError", "bound"], out
    assert served[0].status == "ok", served[0]
    verdict, since, until = served[0].stdout.split()
    assert verdict == "alone" and float(since) < float(out[2]) < float(until), (served[0].stdout, out)


def test_no_other_socket_and_no_change_to_the_links_or_routes(box):
    out = run(
        box,
        """
        import ctypes, errno, fcntl, socket, struct
        def attempt(fn):
            try:
                fn()
                print("ALLOWED")
            except OSError as exc:
                print(type(exc).__name__)
        attempt(lambda: socket.socket(socket.AF_UNIX))
        attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW))
        attempt(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW))
        attempt(lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        # lo down (SIOCSIFFLAGS) and a route added (SIOCADDRT): CAP_NET_ADMIN, which the run has not
        attempt(lambda: fcntl.ioctl(s, 0x8914, struct.pack("16sh22x", b"lo", 0)))
        attempt(lambda: fcntl.ioctl(s, 0x890B, bytes(120)))
        libc = ctypes.CDLL(None, use_errno=True)  # a network namespace of its own (os.unshare: 3.12)
        print("unshare", libc.unshare(0x40000000), errno.errorcode[ctypes.get_errno()])
        """,
    )
    assert out == ["PermissionError"] * 6 + ["unshare", "-1", "EPERM"], out
