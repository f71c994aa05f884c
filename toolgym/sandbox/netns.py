"""A run's own loopback network (the sandbox's ``network="loopback"``): a fresh network namespace per run with
``lo`` up, and every address beyond it dropped in silence.

Test suites that SWE-bench's containers ran with a network start servers of their own on ``127.0.0.1``
(Django's ``LiveServerTestCase``, sphinx's linkcheck server, requests' local httpbin) and expect a connect
to an address outside the machine to time out (requests' ``TestTimeout`` connects to ``10.255.255.1``), as
behind a firewall that drops packets. Here:

- the namespace is new for each run, so a run reaches only the servers it started itself: nothing of the host
  (not its loopback, not its abstract unix sockets) and no other run;
- ``lo`` is brought up (``SIOCSIFFLAGS``), which gives ``127.0.0.1`` and ``::1``;
- IPv4's default route points at ``lo`` (``SIOCADDRT``): a packet to any other address leaves on ``lo`` and is
  dropped on arrival (not local, and a new namespace forwards nothing), so a connect times out instead of
  failing at once with "network unreachable". IPv6 beyond ``::1`` stays unreachable, as on a host without an
  IPv6 uplink;
- the name servers of ``/etc/resolv.conf`` are rejected (a host route each): a name lookup fails at once, as
  on a machine without a reachable name server, instead of waiting out the resolver's retries.

The calls are ioctls on an ``AF_INET`` socket (no netlink), so the same seccomp policy that lets the
program open inet sockets in this mode covers the setup too. Runs inside the fork server's child: standard
library only.
"""

from __future__ import annotations

import ctypes
import fcntl
import socket
import struct

from toolgym.sandbox import _linux as lx

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_SIOCADDRT = 0x890B
_IFF_UP = 0x1
_IFF_RUNNING = 0x40
_RTF_UP = 0x1
_RTF_HOST = 0x4
_RTF_REJECT = 0x200
_IFREQ = "16sh22x"  # struct ifreq: the name, then ifr_flags in the 24-byte union


class _SockaddrIn(ctypes.Structure):
    _fields_ = [
        ("family", ctypes.c_ushort),
        ("port", ctypes.c_ushort),
        ("addr", ctypes.c_uint32),
        ("zero", ctypes.c_char * 8),
    ]


class _RtEntry(ctypes.Structure):  # <linux/route.h>
    _fields_ = [
        ("pad1", ctypes.c_ulong),
        ("dst", _SockaddrIn),
        ("gateway", _SockaddrIn),
        ("genmask", _SockaddrIn),
        ("flags", ctypes.c_ushort),
        ("pad2", ctypes.c_short),
        ("pad3", ctypes.c_ulong),
        ("pad4", ctypes.c_void_p),
        ("metric", ctypes.c_short),
        ("dev", ctypes.c_char_p),
        ("mtu", ctypes.c_ulong),
        ("window", ctypes.c_ulong),
        ("irtt", ctypes.c_ushort),
    ]


def enter_loopback_network() -> None:
    """Move this process into a new network namespace holding only ``lo``, up, with the default route on it.

    Needs CAP_SYS_ADMIN and CAP_NET_ADMIN over the current user namespace (a root fork server's child, or a
    child of the server's own user namespace, before it drops them). Raises OSError saying which step failed.
    """
    lx.unshare(lx.CLONE_NEWNET)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        try:
            fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP | _IFF_RUNNING))
        except OSError as exc:
            raise OSError(exc.errno, f"bringing lo up: {exc.strerror}") from None
        device = ctypes.create_string_buffer(b"lo")
        route = _RtEntry(flags=_RTF_UP, dev=ctypes.cast(device, ctypes.c_char_p))
        route.dst.family = route.genmask.family = socket.AF_INET
        try:
            fcntl.ioctl(sock, _SIOCADDRT, bytes(route))
        except OSError as exc:
            raise OSError(exc.errno, f"the default route on lo: {exc.strerror}") from None
        for server in _name_servers():
            reject = _RtEntry(flags=_RTF_UP | _RTF_HOST | _RTF_REJECT)
            reject.dst.family = reject.genmask.family = socket.AF_INET
            reject.dst.addr = int.from_bytes(socket.inet_aton(server), "little")
            reject.genmask.addr = 0xFFFFFFFF
            try:
                fcntl.ioctl(sock, _SIOCADDRT, bytes(reject))
            except OSError as exc:
                raise OSError(exc.errno, f"the name server {server} refused: {exc.strerror}") from None


def _name_servers() -> list[str]:
    """The IPv4 name servers ``/etc/resolv.conf`` names (beyond the loopback): a lookup reaches out to them,
    and behind the dropped default route each would wait out the resolver's timeouts and retries (seconds
    per name, for every test that names a host). Each gets a reject route instead, so a lookup fails at
    once, as on a machine without a reachable name server."""
    servers = []
    try:
        with open("/etc/resolv.conf") as fh:
            for line in fh:
                words = line.split()
                if len(words) >= 2 and words[0] == "nameserver":
                    try:
                        socket.inet_aton(words[1])
                    except OSError:
                        continue  # (an IPv6 server: unreachable already)
                    if not words[1].startswith("127."):
                        servers.append(words[1])
    except OSError:
        pass
    return servers
