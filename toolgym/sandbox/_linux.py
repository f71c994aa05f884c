"""Thin ctypes bindings for the Linux calls the sandbox needs and Python 3.11 does not expose.

``os.unshare``/``os.setns`` arrive in Python 3.12; ``mount``, ``pivot_root``, ``prctl`` and ``capset`` are not
in the standard library at all. Everything here is a direct libc call that raises ``OSError`` on failure, so
callers can report *why* a layer is unavailable instead of guessing. This module is imported by the fork
server too, so it must stay light (no pydantic, no toolgym imports).
"""

from __future__ import annotations

import ctypes
import os
import platform

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACE_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_NOATIME = 0x400
MS_NODIRATIME = 0x800
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
MS_RELATIME = 0x200000
MS_STRICTATIME = 0x1000000
MNT_DETACH = 0x2

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_KEEPCAPS = 8
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_GET_NO_NEW_PRIVS = 39
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

# pivot_root has no glibc wrapper; its number differs per architecture.
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

# dlopen(NULL): the interpreter's own symbols, libc included. Avoids ctypes.util, whose import pulls in
# subprocess and threading, and threading's after-fork hook would then run (and copy pages) in every child.
libc = ctypes.CDLL(None, use_errno=True)
libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
libc.umount2.argtypes = (ctypes.c_char_p, ctypes.c_int)
libc.unshare.argtypes = (ctypes.c_int,)
libc.setns.argtypes = (ctypes.c_int, ctypes.c_int)
libc.prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
libc.syscall.restype = ctypes.c_long
libc.setfsuid.argtypes = (ctypes.c_uint32,)


def _check(ret: int, what: str, path: str | None = None) -> int:
    if ret == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}", path)
    return ret


def _b(path: str | bytes | None) -> bytes | None:
    return os.fsencode(path) if path is not None else None


def unshare(flags: int) -> None:
    _check(libc.unshare(flags), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(libc.setns(fd, nstype), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)), "mount", target)


def umount2(target: str, flags: int) -> None:
    _check(libc.umount2(_b(target), flags), "umount2", target)


def pivot_root(new_root: str, put_old: str) -> None:
    nr = _SYS_PIVOT_ROOT.get(platform.machine())
    if nr is None:
        raise OSError(0, f"pivot_root: unknown syscall number on {platform.machine()}")
    _check(libc.syscall(ctypes.c_long(nr), _b(new_root), _b(put_old)), "pivot_root", new_root)


def prctl(option: int, arg2: int = 0, arg3: int = 0, arg4: int = 0, arg5: int = 0) -> int:
    return _check(libc.prctl(option, arg2, arg3, arg4, arg5), "prctl")


def sethostname(name: str) -> None:
    raw = name.encode()
    _check(libc.sethostname(raw, len(raw)), "sethostname")


def write_proc_file(path: str, text: str) -> None:
    """Write a ``/proc`` control file (``uid_map``, ``setgroups``) in one ``write``, as the kernel wants."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def load_seccomp_bpf(program: bytes) -> None:
    """Install a classic-BPF seccomp program (as exported by libseccomp) on the calling thread.

    Loading pre-compiled bytes is one syscall; compiling the filter with libseccomp in every child would cost
    a millisecond per run. The caller must have set no_new_privs (or hold CAP_SYS_ADMIN).
    """
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp")


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_CAP_LAST = 63  # generous upper bound; PR_CAPBSET_DROP on an unknown cap fails with EINVAL, which we ignore


def drop_all_capabilities() -> None:
    """Empty the bounding, ambient, inheritable, permitted and effective capability sets.

    Needed inside a user namespace, where the process owns every capability of that namespace and changing
    to a non-root uid does not clear them.
    """
    for cap in range(_CAP_LAST + 1):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past last
            break
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")


def set_capabilities(mask: int) -> None:
    """Make ``mask`` the effective and permitted capability sets (inheritable empty)."""
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for i in (0, 1):
        word = (mask >> (32 * i)) & 0xFFFFFFFF
        data[i].effective = data[i].permitted = word
    _check(libc.capset(ctypes.byref(header), data), "capset")


def setfsuid(uid: int) -> None:
    """Set the filesystem uid (the uid the kernel checks file access against); raises if it did not take.

    ``setfsuid`` reports no error, only the previous value: the result is read back from /proc.
    """
    libc.setfsuid(uid)
    with open("/proc/self/status", "rb") as fh:
        for line in fh:
            if line.startswith(b"Uid:"):
                if int(line.split()[4]) != uid:
                    raise OSError(1, f"setfsuid({uid}) did not take")
                return


def capability_effective() -> int:
    """The effective capability mask of the calling process (from /proc, no extra binding needed)."""
    with open("/proc/self/status", "rb") as fh:
        for line in fh:
            if line.startswith(b"CapEff:"):
                return int(line.split()[1], 16)
    return 0
