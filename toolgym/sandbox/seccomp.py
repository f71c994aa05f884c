"""The seccomp policy: which system calls sandboxed code may not make.

The filter is a deny list on top of the other layers, not the main wall: namespaces and the unprivileged uid
already make most of these calls fail, seccomp removes the kernel attack surface behind them (and is what
stops sockets when a network namespace is unavailable). Denied calls fail with an errno instead of killing
the process, so a program that probes for them gets a normal Python exception the model can read.

The policy is compiled once per fork server with libseccomp (through the ``pyseccomp`` ctypes binding) and
exported as raw BPF bytes; each child loads those bytes with a single ``prctl``.
"""

from __future__ import annotations

import errno
import os

# Calls that inspect or modify other processes, the mount table, namespaces, the kernel or its keyrings.
DENIED_SYSCALLS: tuple[str, ...] = (
    # other processes
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "pidfd_getfd",
    "kcmp",
    # mounts and namespaces
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "mount_setattr",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "open_tree",
    "move_mount",
    "open_by_handle_at",
    "name_to_handle_at",
    # kernel surface
    "bpf",
    "keyctl",
    "add_key",
    "request_key",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "fanotify_init",
    "lookup_dcookie",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    "swapon",
    "swapoff",
    "syslog",
    "acct",
    "quotactl",
    "iopl",
    "ioperm",
    "uselib",
    "vhangup",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
)

_AF_UNIX = 1
_AF_INET = 2
_AF_INET6 = 10
_TIOCSTI = 0x5412  # push bytes into a terminal's input queue
_TIOCLINUX = 0x541C
_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)


def seccomp_unavailable_reason() -> str | None:
    """None if a filter can be built here, else why not (what to install)."""
    try:
        import pyseccomp  # noqa: F401
    except ImportError:
        return "the 'pyseccomp' package is not installed (pip install pyseccomp)"
    except (OSError, RuntimeError) as exc:  # pyseccomp raises RuntimeError when libseccomp is missing
        return f"libseccomp is not loadable ({exc}); install libseccomp2 (Debian/Ubuntu) or libseccomp (RHEL)"
    return None


# Left to the kernel's capability checks when the filter is installed once in a privileged fork server:
# the server needs them to build each run's namespaces, and the program, which has no capabilities, gets
# EPERM from the kernel for each of them anyway (Docker's default profile makes the same call).
SETUP_SYSCALLS = ("mount", "unshare", "setns")
_CLONE_NEWUSER = 0x10000000


def build_filter_bpf(
    for_privileged_server: bool = False, inet_sockets: bool = False
) -> tuple[bytes, list[str]]:
    """Compile the policy for the native architecture; returns (BPF bytes, syscall names unknown here).

    ``for_privileged_server``: the variant a root fork server installs on itself before forking, so that
    children inherit it instead of each paying ~0.2 ms to load their own. It allows ``SETUP_SYSCALLS``
    (which need capabilities the children do not have) but still refuses new user namespaces, the one
    namespace an unprivileged process could otherwise create.

    Foreign architectures (i386 ``int 0x80`` and x32 entry points on x86_64) are killed outright by
    libseccomp's bad-arch action, so the deny list cannot be bypassed through a second syscall table.

    ``inet_sockets``: the variant for a sandbox whose runs each have a loopback network of their own
    (``toolgym.sandbox.netns``): ``socket()`` of the families ``AF_INET`` and ``AF_INET6`` is allowed (the
    run's network namespace holds only ``lo``), every other family still refused.
    """
    import pyseccomp as sc

    flt = sc.SyscallFilter(sc.ALLOW)
    flt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    unknown: list[str] = []
    deny = sc.ERRNO(errno.EPERM)
    if for_privileged_server:
        flt.add_rule(deny, "unshare", sc.Arg(0, sc.MASKED_EQ, _CLONE_NEWUSER, _CLONE_NEWUSER))
    for name in DENIED_SYSCALLS:
        if for_privileged_server and name in SETUP_SYSCALLS:
            continue
        try:
            flt.add_rule(deny, name)
        except (OSError, ValueError):
            unknown.append(name)  # older libseccomp/kernel without that call: nothing to deny
    # No socket of any family (inet ones only on a run's own loopback network): the program has no business
    # with the network or host daemons' unix sockets. Anonymous unix socketpairs stay allowed (asyncio's
    # self-pipe, multiprocessing.Pipe).
    refused = sc.ERRNO(errno.EACCES)
    if inet_sockets:
        # one comparison per rule on an argument (libseccomp's rule), compared as 64 bits: anything but
        # exactly 2 or 10, upper bits set included, meets one of these
        flt.add_rule(refused, "socket", sc.Arg(0, sc.LT, _AF_INET))
        for family in range(_AF_INET + 1, _AF_INET6):
            flt.add_rule(refused, "socket", sc.Arg(0, sc.EQ, family))
        flt.add_rule(refused, "socket", sc.Arg(0, sc.GT, _AF_INET6))
    else:
        flt.add_rule(refused, "socket")
    flt.add_rule(refused, "socketpair", sc.Arg(0, sc.NE, _AF_UNIX))
    # New namespaces would let the program build its own mount table or pid 1.
    for flag in _NS_FLAGS:
        flt.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory that seccomp cannot read: make libc fall back to clone.
    flt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for request in (_TIOCSTI, _TIOCLINUX):
        flt.add_rule(deny, "ioctl", sc.Arg(1, sc.EQ, request))

    fd = os.memfd_create("seccomp-bpf")
    try:
        with os.fdopen(os.dup(fd), "wb") as fh:
            flt.export_bpf(fh)
        size = os.lseek(fd, 0, os.SEEK_END)
        return os.pread(fd, size, 0), unknown
    finally:
        os.close(fd)
