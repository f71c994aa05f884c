"""Per-run isolation: what every freshly forked child does to itself before any user code runs.

``child_steps`` is the ordered list of (layer, action) a child performs, restricted to the layers the fork
server found working (its ``ServerPlan``, made by :mod:`toolgym.sandbox.isolation`). The same list serves the
start-up probe (every step tried, failures collected) and real children (the first failure aborts the child
with ``sandbox_error``), so detection and use cannot drift apart. ``lock_down`` comes last: no_new_privs,
then the seccomp filter.

Runs inside the fork server's children, so it imports only the standard library and its sibling modules.
"""

from __future__ import annotations

import functools
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolgym.sandbox import _linux as lx
from toolgym.sandbox import landlock
from toolgym.sandbox.fsview import rebind_read_only
from toolgym.sandbox.netns import enter_loopback_network

if TYPE_CHECKING:
    from toolgym.sandbox.server_plan import ServerPlan

SANDBOX_HOME = "/tmp"  # cwd, HOME and TMPDIR of sandboxed code (a private tmpfs with fs_view)
#: how long a child's setup (fork, isolation layers, a fresh interpreter state) may take before its program
#: starts. A run's ``timeout`` is the program's own time: it starts when the setup is done, so a slow or
#: loaded machine does not eat into it. A setup that takes longer than this is a ``sandbox_error``.
SETUP_TIMEOUT_S = 30.0
NOBODY = 65534
_CAP_SETUID = 7
_CAP_SYS_ADMIN = 21


class SetupError(RuntimeError):
    """An isolation layer that was detected as available failed for this child."""


@dataclass
class ChildSpec:
    """Per-child parameters the server hands to the forked child."""

    uid: int  # host uid to become (root mode)
    limits: dict
    host_tmp: str | None = None  # per-run tmp dir on the host (only when fs_view is missing)


def _processes_of(uid: int) -> int:
    """How many processes ``uid`` runs now (what RLIMIT_NPROC counts when there is no private uid)."""
    count = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.stat(f"/proc/{entry}").st_uid == uid:
                    count += 1
            except OSError:
                continue
    return count


def _set_rlimits(limits: dict, shared_uid: bool = False) -> None:
    """Apply the limits (soft = hard, so the program cannot raise them back).

    ``shared_uid``: the program keeps the caller's uid (no user namespace), so RLIMIT_NPROC counts all of
    that user's processes; the budget is then added on top of what the user runs right now.
    """
    nproc = limits["processes"] + (_processes_of(os.getuid()) if shared_uid else 0)
    cpu = max(1, int(-(-limits["cpu_s"] // 1)))
    for res, value in (
        # soft == hard: pid 1 of a namespace ignores SIGXCPU, so the kill must come from the hard limit.
        (resource.RLIMIT_CPU, (cpu, cpu)),
        (resource.RLIMIT_AS, (limits["memory_bytes"],) * 2),
        (resource.RLIMIT_FSIZE, (limits["file_size_bytes"],) * 2),
        (resource.RLIMIT_NOFILE, (limits["open_files"],) * 2),
        (resource.RLIMIT_NPROC, (nproc, nproc)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
        (resource.RLIMIT_MEMLOCK, (0, 0)),
    ):
        resource.setrlimit(res, value)


def _drop_user_root(uid: int, fs_as_root: bool = False) -> None:
    """Become ``uid`` (real, effective, saved) with no group and no capability.

    ``fs_as_root``: keep file access as uid 0 (the interpreter lies under a 0700 directory of root's, and
    there is no read-only view to re-expose it). The capabilities are kept across the uid change only long
    enough to set the filesystem uid, then every set is emptied: the process is ``uid`` to signals,
    ``ptrace`` and ``RLIMIT_NPROC``, and root without any capability to file permission checks, which
    Landlock (required for this mode) narrows to the allowlist.
    """
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    if fs_as_root:
        lx.prctl(lx.PR_SET_KEEPCAPS, 1)
    os.setresuid(uid, uid, uid)
    if fs_as_root:
        lx.set_capabilities(1 << _CAP_SETUID)
        lx.setfsuid(0)
        lx.prctl(lx.PR_SET_KEEPCAPS, 0)
        lx.drop_all_capabilities()
    if lx.capability_effective() != 0:
        raise SetupError("capabilities survived the uid change")


_DEVICES = ("/dev/null", "/dev/zero", "/dev/full")


def _enter_landlock(plan: ServerPlan, spec: ChildSpec) -> None:
    """Confine this child to its Landlock domain: read ``plan.landlock_read``, write only its own dir."""
    if lx.libc.prctl(lx.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        lx.prctl(lx.PR_SET_NO_NEW_PRIVS, 1)  # Landlock's condition (no CAP_SYS_ADMIN needed then)
    own = ["/tmp", "/dev/shm"] if plan.has("fs_view") else [spec.host_tmp] if spec.host_tmp else []
    landlock.restrict(
        plan.landlock_read, own, _DEVICES, abi=plan.landlock_abi, allow_tcp=plan.has("loopback_network")
    )


def _drop_user_userns() -> None:
    lx.unshare(lx.CLONE_NEWUSER)
    lx.write_proc_file("/proc/self/setgroups", "deny")
    lx.write_proc_file("/proc/self/uid_map", f"{NOBODY} 0 1")
    lx.write_proc_file("/proc/self/gid_map", f"{NOBODY} 0 1")
    lx.drop_all_capabilities()


def _mount_run_tmpfs(limits: dict, uid: int, owner: bool, keep: list[str]) -> None:
    size = limits["disk_bytes"]
    own = f",uid={uid},gid={uid}" if owner else ""
    rebind_read_only(
        keep,
        lambda: lx.mount(
            "tmpfs",
            "/tmp",
            "tmpfs",
            lx.MS_NOSUID | lx.MS_NODEV,
            f"size={size},nr_inodes=65536,mode=0700{own}",
        ),
    )
    shm = min(size, 64 * 1024 * 1024)
    lx.mount(
        "tmpfs", "/dev/shm", "tmpfs", lx.MS_NOSUID | lx.MS_NODEV, f"size={shm},nr_inodes=4096,mode=0700{own}"
    )


def child_steps(plan: ServerPlan, spec: ChildSpec) -> list[tuple[str, Callable[[], None]]]:
    """The ordered setup steps of a child as (layer, action), restricted to the plan's layers.

    The same list serves the start-up probe (every step tried, failures collected) and real children (first
    failure aborts the child with ``sandbox_error``), so detection and use cannot drift apart.
    """
    has = plan.has
    root_mode = plan.mode == "root"
    steps: list[tuple[str, Callable[[], None]]] = []
    unshare_flags = [
        ("fs_view", lx.CLONE_NEWNS),
        ("ipc_namespace", lx.CLONE_NEWIPC),
    ]
    for layer, flag in unshare_flags:
        if has(layer):
            steps.append((layer, functools.partial(lx.unshare, flag)))
    if has("loopback_network"):  # while the child still holds the capabilities it takes
        steps.append(("loopback_network", enter_loopback_network))
    if has("fs_view"):
        steps.append(
            ("fs_view", lambda: _mount_run_tmpfs(spec.limits, spec.uid, owner=root_mode, keep=plan.tmp_binds))
        )
        if has("pid_namespace"):
            steps.append(
                (
                    "pid_namespace",
                    lambda: lx.mount("proc", "/proc", "proc", lx.MS_NOSUID | lx.MS_NODEV | lx.MS_NOEXEC),
                )
            )
    if has("rlimits"):
        shared = not has("unprivileged_user")
        steps.append(("rlimits", lambda: _set_rlimits(spec.limits, shared_uid=shared)))
    if has("unprivileged_user"):
        if root_mode:
            steps.append(("unprivileged_user", lambda: _drop_user_root(spec.uid, plan.fs_as_root)))
        else:
            steps.append(("unprivileged_user", _drop_user_userns))
    if has("landlock"):
        steps.append(("landlock", lambda: _enter_landlock(plan, spec)))
    return steps


def lock_down(plan: ServerPlan) -> None:
    """The last steps before user code: no_new_privs, then the seccomp filter (which needs it)."""
    if plan.locked_in_server:
        return
    # Without CAP_SYS_ADMIN the kernel only accepts a filter from a no_new_privs process.
    needs_nnp = plan.has("seccomp") and not lx.capability_effective() & (1 << _CAP_SYS_ADMIN)
    if plan.has("no_new_privs") or needs_nnp:
        lx.prctl(lx.PR_SET_NO_NEW_PRIVS, 1)
    if plan.has("seccomp") and plan.seccomp_bpf:
        lx.load_seccomp_bpf(plan.seccomp_bpf)


def enter_child(plan: ServerPlan, spec: ChildSpec) -> str:
    """Apply every layer of the plan to this (freshly forked) process; return the working directory.

    Raises SetupError naming the layer on the first failure: a layer that the probe found working must not
    be skipped silently for one run.
    """
    for layer, action in child_steps(plan, spec):
        try:
            action()
        except Exception as exc:
            raise SetupError(f"{layer}: {exc}") from exc
    return SANDBOX_HOME if plan.has("fs_view") else (spec.host_tmp or SANDBOX_HOME)


def make_private_dir(parent: str, prefix: str = "") -> str:
    """mkdtemp without the tempfile module (which imports random, whose after-fork hook costs every child)."""
    while True:
        path = os.path.join(parent, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue
