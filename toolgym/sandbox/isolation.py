"""Isolation layers: detection, the fork server's one-time setup, and the per-child setup.

Layers (each detected by actually performing it once at fork-server start, and reported):

``fs_view``
    A private mount namespace whose root is a read-only tmpfs holding only what Python needs: ``/usr``,
    ``/etc``, ``/lib*``, ``/bin``, ``/sbin``, the interpreter's prefixes and ``sys.path`` entries, a few
    device nodes and ``/sys/devices/system/cpu``. Everything else on the host (home directories, ``/root``,
    ``/work``, the project's own files unless they are on ``sys.path``, host ``/tmp``, host ``/dev/shm``) is
    simply absent. Each run gets a fresh tmpfs on ``/tmp`` (cwd, ``HOME``, ``TMPDIR``) and on ``/dev/shm``;
    both vanish with the run's mount namespace, so nothing is left on the host.
``pid_namespace``
    The program is pid 1 of its own pid namespace with its own ``/proc``: it sees no host process, and
    killing it (SIGKILL from the fork server) kills every descendant, daemonized or not.
``net_namespace``
    A private, empty network namespace (loopback down, no interface): nothing on the host, not even its
    abstract unix sockets, is reachable. One per fork server rather than per run: creating and tearing down
    a network namespace costs ~0.3 ms of CPU per run, and with seccomp no socket can be created anyway.
    (Without seccomp, a run and the sessions of the same worker could meet over an abstract unix socket.)
``ipc_namespace``
    Private System V IPC and POSIX message queues per run.
``uts_namespace``
    The host name reads ``sandbox`` (one UTS namespace per fork server: changing it needs privileges the
    program does not have, so there is nothing to isolate between runs).
``unprivileged_user``
    As root: ``setresuid``/``setresgid`` to a uid from an unused high range (one uid per concurrent child, so
    ``RLIMIT_NPROC`` is a per-run budget) with no supplementary groups and no capabilities. As a normal
    user: a user namespace per run, uid 65534 inside, every capability dropped.
``no_new_privs``
    ``PR_SET_NO_NEW_PRIVS``: setuid binaries and file capabilities cannot raise privileges.
``seccomp``
    The deny list in :mod:`toolgym.sandbox.seccomp` (needs ``pyseccomp`` + libseccomp). As root, the fork
    server installs it (with ``no_new_privs``) on itself once, after its own setup, and every child
    inherits it; with a user namespace each child installs it after creating its own user namespace.
``rlimits``
    CPU, address space, file size, open files, processes, core dumps = 0.

Always on, whatever the machine allows: a memory watchdog (the fork server kills a run whose processes
together hold more than ``memory_bytes``, checked every 0.1 s; RLIMIT_AS alone bounds each process, not
the run), a scrubbed environment (nothing inherited from the host), ``-I`` interpreter flags (no user
site, no ``PYTHON*`` variables, no cwd on ``sys.path``), the wall-clock timeout enforced from outside,
capped output capture, and closing every inherited file descriptor.

This module runs inside the fork server and its children, so it imports only the standard library and its
sibling modules (no pydantic, not the ``toolgym`` package ``__init__``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import resource
import select
import signal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from toolgym.sandbox import _linux as lx
from toolgym.sandbox.fsview import ViewError, build_fs_view, rebind_read_only, under_tmp

LAYERS: tuple[str, ...] = (
    "fs_view",
    "pid_namespace",
    "net_namespace",
    "ipc_namespace",
    "uts_namespace",
    "unprivileged_user",
    "no_new_privs",
    "seccomp",
    "rlimits",
)
ALWAYS_ON: tuple[str, ...] = (
    "memory_watchdog",
    "clean_env",
    "isolated_interpreter",
    "wall_timeout",
    "output_caps",
    "closed_fds",
)
_NAMESPACE_LAYERS = ("fs_view", "pid_namespace", "net_namespace", "ipc_namespace", "uts_namespace")

SANDBOX_HOME = "/tmp"
_CAP_SYS_ADMIN = 21
NOBODY = 65534

# What losing a layer means, said in the warning so nobody has to guess.
_CONSEQUENCE = {
    "fs_view": "the program sees the host filesystem with your permissions and can write where you can",
    "pid_namespace": "host processes are visible and children that call setsid() can outlive the run",
    "net_namespace": "network isolation rests on seccomp alone",
    "ipc_namespace": "System V IPC and POSIX message queues are shared with the host",
    "uts_namespace": "the host name is visible",
    "unprivileged_user": "the program runs as your uid: it reads your files and your processes' environment",
}


class SetupError(RuntimeError):
    """An isolation layer that was detected as available failed for this child."""


@dataclass
class ServerPlan:
    """What the fork server established once, and what every child must do. Plain data, picklable."""

    mode: str  # "root" (real root), "userns" (normal user with a user namespace), "plain" (neither)
    layers: set[str]
    missing: dict[str, str] = field(default_factory=dict)
    disabled: set[str] = field(default_factory=set)
    details: dict[str, str] = field(default_factory=dict)
    seccomp_bpf: bytes | None = None
    locked_in_server: bool = False  # no_new_privs and seccomp already in force in the server (inherited)
    pidns_fd: int = -1  # the server's own pid namespace, to restore pid_for_children after each fork
    host_tmp_base: str | None = None  # where per-run tmp dirs live when fs_view is missing
    tmp_binds: list[str] = field(default_factory=list)  # view paths under /tmp, re-bound in each run

    def has(self, layer: str) -> bool:
        return layer in self.layers


# ---------------------------------------------------------------- detection helpers


def _userns_block_reason() -> str:
    """Why unprivileged user namespaces are unavailable, from the sysctls that control them."""
    checks = (
        ("/proc/sys/kernel/unprivileged_userns_clone", "0", "kernel.unprivileged_userns_clone=0"),
        ("/proc/sys/user/max_user_namespaces", "0", "user.max_user_namespaces=0"),
        (
            "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
            "1",
            "kernel.apparmor_restrict_unprivileged_userns=1 (AppArmor)",
        ),
    )
    for path, bad, what in checks:
        try:
            with open(path) as fh:
                if fh.read().strip() == bad:
                    return what
        except OSError:
            continue
    return "denied by the kernel or a security module"


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_server_userns() -> None:
    """Become root of a fresh user namespace (normal users only): uid/gid 0 inside map to ours outside."""
    uid, gid = os.geteuid(), os.getegid()
    lx.unshare(lx.CLONE_NEWUSER)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")


def become_pid1_of_new_namespace() -> None:
    """Continue as pid 1 of a new pid namespace (user-namespace mode only).

    Each run gets its own pid namespace by ``unshare(CLONE_NEWPID)`` before the fork and ``setns`` back after
    it. ``setns`` needs CAP_SYS_ADMIN over the namespace's owner, which a normal user never has over the host
    pid namespace, but does have over one created inside its user namespace. The original process stays
    behind only to wait and relay the exit status; the new one dies with it (PDEATHSIG).
    """
    r, w = os.pipe()
    lx.unshare(lx.CLONE_NEWPID)
    pid = os.fork()
    if pid:  # pragma: no cover - the waiting outer process
        os.closerange(3, w)
        os.closerange(w + 1, 1 << 20)
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    os.close(w)
    lx.prctl(lx.PR_SET_PDEATHSIG, signal.SIGKILL)
    if not lifeline_alive(r):
        os._exit(1)
    os.close(r)


# ---------------------------------------------------------------- per-child setup


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


def _drop_user_root(uid: int) -> None:
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if lx.capability_effective() != 0:
        raise SetupError("capabilities survived the uid change")


def _drop_user_userns() -> None:
    lx.unshare(lx.CLONE_NEWUSER)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{NOBODY} 0 1")
    _write("/proc/self/gid_map", f"{NOBODY} 0 1")
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
            steps.append((layer, lambda flag=flag: lx.unshare(flag)))
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
            steps.append(("unprivileged_user", lambda: _drop_user_root(spec.uid)))
        else:
            steps.append(("unprivileged_user", _drop_user_userns))
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


# ---------------------------------------------------------------- probe (once per server)


def probe_child_layers(plan: ServerPlan, uid: int, limits: dict) -> dict[str, str]:
    """Fork a throwaway child that performs every per-child step; return {layer: why it failed}."""
    failures: dict[str, str] = {}
    if plan.has("pid_namespace"):
        try:
            lx.unshare(lx.CLONE_NEWPID)
        except OSError as exc:
            failures["pid_namespace"] = f"unshare(CLONE_NEWPID): {exc.strerror}"
            plan.layers.discard("pid_namespace")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the probe child
        code = 0
        try:
            os.close(r)
            found: dict[str, str] = {}
            for layer, action in child_steps(plan, ChildSpec(uid=uid, limits=limits)):
                if layer in found:
                    continue
                try:
                    action()
                except Exception as exc:
                    found[layer] = f"{type(exc).__name__}: {exc}"
            if plan.has("pid_namespace") and os.getpid() != 1:
                found["pid_namespace"] = "the child is not pid 1 of a new namespace"
            if plan.has("uts_namespace") and os.uname().nodename != "sandbox":
                found["uts_namespace"] = "the host name is not 'sandbox'"
            for layer, action in (("no_new_privs", _probe_nnp), ("seccomp", lambda: _probe_seccomp(plan))):
                if plan.has(layer):
                    try:
                        action()
                    except Exception as exc:
                        found[layer] = f"{type(exc).__name__}: {exc}"
            os.write(w, json.dumps(found).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    if plan.has("pid_namespace"):
        lx.setns(plan.pidns_fd, lx.CLONE_NEWPID)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    if not data:
        failures["probe"] = f"probe child died (wait status {status})"
        return failures
    failures.update(json.loads(data))
    return failures


def _probe_nnp() -> None:
    lx.prctl(lx.PR_SET_NO_NEW_PRIVS, 1)
    if lx.libc.prctl(lx.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        raise SetupError("PR_SET_NO_NEW_PRIVS did not stick")


def _probe_seccomp(plan: ServerPlan) -> None:
    lock_down(plan)
    with open("/proc/self/status") as fh:
        if "Seccomp:\t2" not in fh.read():
            raise SetupError("no seccomp filter in force")
    try:
        lx.unshare(lx.CLONE_NEWUSER)  # allowed to any user by the kernel here; the filter must refuse it
    except OSError as exc:
        if exc.errno != errno.EPERM:
            raise
    else:
        raise SetupError("filter in force but unshare(CLONE_NEWUSER) was not denied")


# ---------------------------------------------------------------- server preparation


def _compile_seccomp_elsewhere(for_privileged_server: bool) -> tuple[bytes | None, list[str], str | None]:
    """Compile the filter in a throwaway child: (bpf, unknown syscalls, why unavailable).

    pyseccomp imports ctypes.util, which imports subprocess and threading; threading's after-fork hook
    would then run in every child the server forks. Compiling in a child keeps all of that out.
    """
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the compiler child
        try:
            from toolgym.sandbox.seccomp import build_filter_bpf, seccomp_unavailable_reason

            reason = seccomp_unavailable_reason()
            out: dict = {"reason": reason, "bpf": "", "unknown": []}
            if reason is None:
                try:
                    bpf, out["unknown"] = build_filter_bpf(for_privileged_server=for_privileged_server)
                    out["bpf"] = bpf.hex()
                except OSError as exc:
                    out["reason"] = f"building the filter failed: {exc}"
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    try:
        out = json.loads(data)
    except ValueError:
        return None, [], "the seccomp compiler process failed"
    return (bytes.fromhex(out["bpf"]) or None), out["unknown"], out["reason"]


def prepare_server(
    disabled: Iterable[str], uid_probe: int, probe_limits: dict, extra_paths: Sequence[str] = ()
) -> ServerPlan:
    """Establish the server-wide layers (user namespace, read-only view) and detect the per-child ones."""
    disabled_set = {d for d in disabled if d in LAYERS}
    wanted = [layer for layer in LAYERS if layer not in disabled_set]
    missing: dict[str, str] = {}
    details: dict[str, str] = {}
    is_root = os.geteuid() == 0
    host_uid = os.geteuid()
    mode = "root" if is_root else "plain"
    if not is_root and any(layer in wanted for layer in (*_NAMESPACE_LAYERS, "unprivileged_user")):
        try:
            enter_server_userns()
            mode = "userns"
        except OSError as exc:
            why = f"not root and user namespaces are unavailable ({_userns_block_reason()}: {exc.strerror})"
            for layer in (*_NAMESPACE_LAYERS, "unprivileged_user"):
                if layer in wanted:
                    missing[layer] = f"{why}; {_CONSEQUENCE[layer]}"
    if mode == "userns" and "pid_namespace" in wanted:
        try:
            become_pid1_of_new_namespace()
        except OSError as exc:
            missing["pid_namespace"] = f"unshare(CLONE_NEWPID) in the user namespace: {exc.strerror}"
    if mode == "userns":
        details["unprivileged_user"] = (
            f"user namespace per run, uid {NOBODY} inside -> uid {host_uid} outside"
        )
    layers = {layer for layer in wanted if layer not in missing}
    plan = ServerPlan(mode=mode, layers=layers, missing=missing, disabled=disabled_set, details=details)

    if plan.has("seccomp"):
        bpf, unknown, reason = _compile_seccomp_elsewhere(for_privileged_server=is_root)
        plan.seccomp_bpf = bpf
        if unknown:
            details["seccomp"] = "syscalls unknown to this libseccomp: " + ", ".join(unknown)
        if reason:
            missing["seccomp"] = reason
            layers.discard("seccomp")

    for layer, flag in (("net_namespace", lx.CLONE_NEWNET), ("uts_namespace", lx.CLONE_NEWUTS)):
        if plan.has(layer):  # server-wide: every child inherits them
            try:
                lx.unshare(flag)
                if layer == "uts_namespace":
                    lx.sethostname("sandbox")
            except OSError as exc:
                missing[layer] = f"unshare: {exc.strerror}; {_CONSEQUENCE[layer]}"
                layers.discard(layer)
    if plan.has("fs_view"):
        try:
            exposed = build_fs_view(extra_paths)
            plan.tmp_binds = under_tmp(exposed)
            details["fs_view"] = "exposed read-only: system dirs + " + ", ".join(exposed)
        except (OSError, ViewError) as exc:
            missing["fs_view"] = f"{exc}"
            layers.discard("fs_view")
    if not plan.has("fs_view"):
        plan.host_tmp_base = make_private_dir("/tmp", "toolgym-sandbox-")
        if is_root:
            os.chmod(plan.host_tmp_base, 0o711)
    if plan.has("pid_namespace"):
        plan.pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    if is_root:  # lock the server itself: children inherit no_new_privs and the filter for free
        lock_down(plan)
        plan.locked_in_server = True
        if plan.has("unprivileged_user"):
            details["unprivileged_user"] = f"setresuid to uid {uid_probe} and up (one uid per live child)"
    if plan.has("seccomp"):
        where = "installed once in the fork server, inherited" if is_root else "installed by each child"
        details["seccomp"] = f"{where}; {details['seccomp']}" if "seccomp" in details else where

    for layer, why in probe_child_layers(plan, uid_probe, probe_limits).items():
        if layer in layers or layer == "probe":
            missing[layer] = why
            layers.discard(layer)
    if not os.path.exists("/proc/thread-self/children"):
        details["memory_watchdog"] = (
            "kernel without CONFIG_PROC_CHILDREN: only each run's main process counted"
        )
    if "unprivileged_user" not in layers and "rlimits" in layers:
        details["rlimits"] = (
            "RLIMIT_NPROC is shared with every process of your uid: set to their count + limit"
        )
    if "fs_view" in missing and "pid_namespace" in layers:
        details["pid_namespace"] = (
            "no fresh /proc without fs_view: host processes are listed but not reachable"
        )
    return plan


# ---------------------------------------------------------------- killing what a child left behind


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


# ---------------------------------------------------------------- memory of a whole process tree


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
            with open(f"/proc/{p}/smaps_rollup", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children", "rb") as fh:
                    stack.extend(int(c) for c in fh.read().split())
        except (OSError, ValueError):
            continue  # exited meanwhile
    return total


MEMORY_CHECK_S = 0.1


def make_private_dir(parent: str, prefix: str = "") -> str:
    """mkdtemp without the tempfile module (which imports random, whose after-fork hook costs every child)."""
    while True:
        path = os.path.join(parent, prefix + os.urandom(6).hex())
        try:
            os.mkdir(path, 0o700)
            return path
        except FileExistsError:
            continue


def lifeline_alive(fd: int) -> bool:
    """True while the fork server holds the write end of the lifeline pipe (POLLHUP once it is gone)."""
    p = select.poll()
    p.register(fd, select.POLLIN)
    return not p.poll(0)
