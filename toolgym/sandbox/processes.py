"""Reading and policing processes through ``/proc``: a run's memory across its whole process tree, killing
what a run left behind, the lifeline between the fork server and its children, and the process table the
parent checks for strays.

Imported by the fork server and its children, so standard library only.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal

MEMORY_CHECK_S = 0.1  # how often the fork server sums a running program's memory (``tree_memory``)


def lifeline_alive(fd: int) -> bool:
    """True while the fork server holds the write end of the lifeline pipe (POLLHUP once it is gone)."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return not p.poll(0)


def sweep_uid(uid: int) -> None:
    """Kill every process of ``uid`` (root mode without a pid namespace): fork, become uid, kill(-1)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the sweeper
        try:
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            with contextlib.suppress(OSError):
                os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def host_pid_of(pidfd: int) -> int | None:
    """The pid a pidfd refers to, as numbered by our procfs (the host's: the view binds the host /proc)."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pid:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


def own_host_pid() -> int:
    """This process's pid as the host sees it (differs from getpid() when the server is pid 1 of its own
    namespace); /proc here is a bind of the host's procfs."""
    try:
        return int(os.readlink("/proc/self"))
    except (OSError, ValueError):
        return os.getpid()


def tree_memory(pid: int) -> int:
    """Bytes of memory attributable to ``pid`` and all its descendants (sum of their Pss).

    RLIMIT_AS bounds each process, not a run: 64 processes could each take the whole limit. The fork server
    checks this sum every ``MEMORY_CHECK_S`` while a program runs and kills the run above ``memory_bytes``.
    Pss counts pages shared with the server (or between the run's processes) proportionally, so forking
    does not count the interpreter again for every child. Orphans stay in the tree: in a pid namespace they
    are re-parented to the run's pid 1.
    """
    total = 0
    stack, seen = [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            total += _process_memory(p)
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children", "rb") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue  # exited meanwhile
    return total


def _process_memory(pid: int) -> int:
    """Pss of one process; where reading it is refused (``smaps_rollup`` needs ptrace access: a root
    without CAP_SYS_PTRACE, as in a container, watching another uid's process), its private resident
    memory from ``statm`` (resident less file-backed and shared pages), which needs no access check."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
        return 0
    except PermissionError:
        with open(f"/proc/{pid}/statm", "rb") as fh:
            fields = fh.read().split()
        return max(0, int(fields[1]) - int(fields[2])) * _PAGE


_PAGE = os.sysconf("SC_PAGE_SIZE")


def dir_usage(path: str) -> int:
    """Bytes of disk the files beneath ``path`` occupy (allocated blocks: a sparse file counts what it
    holds). Where no private tmpfs bounds a run's dir, the fork server polices ``disk_bytes`` with this."""
    total = 0
    stack = [path]
    while stack:
        try:
            with os.scandir(stack.pop()) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (ppid, real uid, command line) for every process visible in /proc."""
    table: dict[int, tuple[int, int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
            with open(f"/proc/{entry}/status", "rb") as fh:
                uid_line = next(line for line in fh if line.startswith(b"Uid:"))
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read(200).replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except (OSError, StopIteration):
            continue  # exited while we looked
        ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        table[int(entry)] = (ppid, int(uid_line.split()[1]), cmd)
    return table
