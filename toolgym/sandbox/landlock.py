"""Landlock: the kernel's unprivileged access control, over its three system calls (ctypes).

Why Landlock: it needs no privilege and no namespace, and Docker's default seccomp profile allows it
(moby #43199), so it is the one filesystem and network wall left in a container without CAP_SYS_ADMIN and
for a cluster user without user namespaces. Under the namespaces it is defense in depth. Why ctypes and not
a binding: the calls are three, the structures two, and the fork server imports only the standard library
(the PyPI bindings are thin, little used, or pull in cffi).

A *ruleset* lists what stays allowed; ``restrict_self`` makes it a domain the calling thread and every
descendant are confined to (it can only be narrowed later, never widened). What this module handles:

- filesystem (ABI 1+, REFER 2+, TRUNCATE 3+): read/execute beneath the read-only paths, everything beneath
  the writable ones (the run's private dir), read/write on a few device nodes, nothing elsewhere;
- network (ABI 4+): TCP bind and connect denied (no rule allows any port), but for a run on a loopback
  network of its own (``toolgym.sandbox.netns``), where the namespace is the wall;
- scopes (ABI 6+): signals and abstract unix sockets only within the run's own domain, so a program cannot
  signal the trainer or another run even where it shares their uid.

Processes outside a domain cannot be ptraced from inside it (any ABI): that closes ``/proc/<pid>/mem`` and
``environ`` of the host's processes as well.

Runs in the fork server and its children: standard library and ``_linux`` only.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable

from toolgym.sandbox import _linux as lx

# Generic syscall numbers: Landlock came after the table was unified, so they are the same on every arch.
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1

_FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE  # the rights a rule on a non-directory may carry
READ = EXECUTE | READ_FILE | READ_DIR
DEVICE = READ_FILE | WRITE_FILE | TRUNCATE


class LandlockError(OSError):
    """Landlock is unavailable or a rule could not be added (errno and the step say why)."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    )


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


def _syscall(number: int, *args: object) -> int:
    ret = lx.libc.syscall(ctypes.c_long(number), *args)
    if ret < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, os.strerror(err))
    return ret


def abi_version() -> int:
    """The kernel's Landlock ABI (0: not built in, or disabled at boot, or refused by a seccomp profile)."""
    try:
        return _syscall(
            _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION)
        )
    except LandlockError:
        return 0


def unavailable_reason() -> str:
    """Why ``abi_version()`` is 0, from the errno the kernel gave."""
    try:
        _syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except LandlockError as exc:
        reasons: dict[int | None, str] = {
            38: "the kernel has no Landlock (ENOSYS: older than 5.13 or built without it)",
            95: "Landlock is disabled at boot (EOPNOTSUPP: add 'landlock' to the lsm= kernel parameter)",
            1: "a seccomp profile refuses the Landlock system calls (EPERM)",
        }
        return reasons.get(exc.errno, f"landlock_create_ruleset: {exc.strerror}")
    return ""


def handled_fs(abi: int) -> int:
    """Every filesystem right this ABI knows (all of them are then denied unless a rule allows them)."""
    rights = (MAKE_SYM << 1) - 1
    if abi >= 2:
        rights |= REFER
    if abi >= 3:
        rights |= TRUNCATE
    return rights


def features(abi: int, allow_tcp: bool = False) -> list[str]:
    """What a domain built by ``restrict`` enforces on this ABI, in words (the isolation report's detail)."""
    out = ["filesystem: read-only beneath the allowed paths, writes only in the run's own dir"]
    if abi >= 4:
        out.append("TCP left to the run's own loopback network" if allow_tcp else "TCP bind/connect denied")
    if abi >= 6:
        out.append("signals and abstract unix sockets scoped to the run")
    return out


def world_readable(path: str) -> bool:
    """True when any uid may reach and read ``path`` (every ancestor searchable by others, and the path
    itself readable, and searchable if a directory): whether a separate sandbox uid can use it."""
    path = os.path.realpath(path)
    parts = path.strip("/").split("/")
    try:
        for i in range(1, len(parts)):
            if not os.stat("/" + "/".join(parts[:i])).st_mode & stat.S_IXOTH:
                return False
        mode = os.stat(path).st_mode
    except OSError:
        return False
    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(mode) else 0)
    return mode & need == need


def readable_by_others(top: str) -> list[str]:
    """The fewest paths beneath ``top`` that cover everything others may read there and nothing else.

    For ``/etc`` where the program's file access is that of root (no capabilities, but the owner of
    root's files): ``/etc/shadow`` and the ssh host keys stay out of reach, and everything a program
    legitimately reads (locale, TLS roots, passwd) stays in. Computed once per fork server.
    """

    def walk(path: str) -> tuple[bool, list[str]]:
        try:
            st = os.lstat(path)
        except OSError:
            return False, []
        if stat.S_ISLNK(st.st_mode):
            return True, []  # the link itself needs no rule; its target is judged where it lies
        if not st.st_mode & stat.S_IROTH:
            return False, []
        if not stat.S_ISDIR(st.st_mode):
            return True, [path]
        if not st.st_mode & stat.S_IXOTH:
            return False, []
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return False, []
        whole, parts = True, []
        for name in names:
            ok, sub = walk(os.path.join(path, name))
            whole &= ok
            parts += sub
        return (True, [path]) if whole else (False, parts)

    return walk(top)[1]


def restrict(
    read: Iterable[str],
    write: Iterable[str],
    devices: Iterable[str] = (),
    *,
    abi: int,
    allow_tcp: bool = False,
) -> None:
    """Confine the calling process (and its future children) to a new Landlock domain.

    ``read``: paths beneath which files may be read and executed and directories listed; ``write``: paths
    beneath which everything is allowed; ``devices``: files that may be read and written (``/dev/null``).
    Paths that do not exist are skipped. Needs ``no_new_privs`` (or CAP_SYS_ADMIN in the user namespace).
    ``allow_tcp``: TCP bind and connect are left alone (a run on a loopback network of its own, whose
    namespace is the wall; Landlock's rules are per port, not per address).
    """
    fs = handled_fs(abi)
    attr = _RulesetAttr(fs, NET_BIND_TCP | NET_CONNECT_TCP if abi >= 4 and not allow_tcp else 0, 0)
    size = 8
    if abi >= 4:
        size = 16
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
    ruleset = _syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for paths, rights in ((read, READ), (write, fs), (devices, DEVICE)):
            for path in paths:
                _add_path(ruleset, path, rights & fs)
        _syscall(_SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)


def _add_path(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(rights, fd)
        try:
            _syscall(
                _SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule), 0
            )
        except LandlockError as exc:
            raise LandlockError(exc.errno, f"landlock_add_rule({path!r}): {exc.strerror}") from None
    finally:
        os.close(fd)
