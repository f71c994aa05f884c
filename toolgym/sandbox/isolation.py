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
``loopback_network`` (only with ``network="loopback"``)
    Each run gets a network namespace of its own with ``lo`` up and every other address dropped in silence
    (:mod:`toolgym.sandbox.netns`), and may open inet sockets (seccomp's ``inet_sockets`` variant; Landlock
    leaves TCP alone): its tests can serve and fetch on ``127.0.0.1``, and reach nothing else, not the host's
    loopback, nor another run. For tests written for a machine with a network (SWE-bench's containers). It
    needs the namespaces' privilege (root, or a user namespace); without it the runs have no network at all,
    and ``missing`` says so.
``uts_namespace``
    The host name reads ``sandbox`` (one UTS namespace per fork server: changing it needs privileges the
    program does not have, so there is nothing to isolate between runs).
``unprivileged_user``
    As root: ``setresuid``/``setresgid`` to a uid from an unused high range (one uid per concurrent child, so
    ``RLIMIT_NPROC`` is a per-run budget) with no supplementary groups and no capabilities. As a normal
    user: a user namespace per run, uid 65534 inside, every capability dropped. As root without the
    read-only view when the interpreter lies under a directory other uids cannot enter (``/root`` holds
    pyenv, uv and conda Pythons): the same uid, but *file access* as uid 0 (``setfsuid``) with no
    capability, so the child reads the interpreter as the host does; only with ``landlock``, which then
    confines what that file access reaches (a signal, ``ptrace`` and ``RLIMIT_NPROC`` still see the
    unprivileged uid).
``landlock``
    The kernel's unprivileged access control (:mod:`toolgym.sandbox.landlock`), in every mode. Each child
    confines itself to a Landlock domain: files read-only except its private dir, TCP bind/connect denied,
    signals and abstract unix sockets scoped to the run (by ABI). With ``fs_view`` it is defense in depth.
    Without it (a container without CAP_SYS_ADMIN, a user without user namespaces) it *is* the filesystem
    wall: the fork server first confines itself to an allowlist (system dirs, ``/etc`` less what others may
    not read, the interpreter's paths as written and resolved, the run dirs' parent), and each child then
    narrows that to its own dir.
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
the run), a scrubbed environment (nothing inherited from the host), isolated interpreter flags (``-s -P``:
no user site, no cwd on ``sys.path``; the only ``PYTHON*`` variable is ours, ``PYTHONHASHSEED=0``), the
wall-clock timeout enforced from outside, capped output capture, and closing every inherited file
descriptor.

This module is the fork server's side, once per server: ``prepare_server`` establishes the server-wide
layers and detects the per-child ones by performing them in a throwaway child (``probe_child_layers``); the
result is the ``ServerPlan`` every child follows. What each child does is in
:mod:`toolgym.sandbox.child_setup`; watching and killing process trees in :mod:`toolgym.sandbox.processes`.

It runs inside the fork server, so it imports only the standard library and its sibling modules (no
pydantic, not the ``toolgym`` package ``__init__``).

Why one module of this length: each layer is detected by performing it, and the server's setup runs those
steps in an order that matters; they read best in that order beside the list above, while each child's own
steps are in child_setup.
"""

from __future__ import annotations

import errno
import json
import os
import signal
from collections.abc import Callable, Iterable, Sequence

from toolgym.sandbox import _linux as lx
from toolgym.sandbox import landlock
from toolgym.sandbox.child_setup import (
    NOBODY,
    ChildSpec,
    SetupError,
    child_steps,
    lock_down,
    make_private_dir,
)
from toolgym.sandbox.fsview import SYSTEM_DIRS, ViewError, build_fs_view, exposed_paths, under_tmp
from toolgym.sandbox.netns import enter_loopback_network
from toolgym.sandbox.processes import lifeline_alive
from toolgym.sandbox.server_plan import ServerPlan

LAYERS: tuple[str, ...] = (
    "fs_view",
    "pid_namespace",
    "net_namespace",
    "ipc_namespace",
    "uts_namespace",
    "unprivileged_user",
    "landlock",
    "no_new_privs",
    "seccomp",
    "rlimits",
)
#: layers a sandbox has only when it asks for them (``network="loopback"``)
ON_REQUEST: tuple[str, ...] = ("loopback_network",)
ALWAYS_ON: tuple[str, ...] = (
    "memory_watchdog",
    "clean_env",
    "isolated_interpreter",
    "wall_timeout",
    "output_caps",
    "closed_fds",
)
_NAMESPACE_LAYERS = ("fs_view", "pid_namespace", "net_namespace", "ipc_namespace", "uts_namespace")


# What losing a layer means, said in the warning so nobody has to guess.
_CONSEQUENCE = {
    "fs_view": "the program sees the host filesystem with your permissions and can write where you can",
    "pid_namespace": "host processes are visible and children that call setsid() can outlive the run",
    "net_namespace": "network isolation rests on seccomp alone",
    "ipc_namespace": "System V IPC and POSIX message queues are shared with the host",
    "uts_namespace": "the host name is visible",
    "unprivileged_user": "the program runs as your uid: it reads your files and your processes' environment",
    "landlock": "no second wall: files, TCP and signals rest on the other layers alone",
    "loopback_network": "the runs have no network at all: a test that serves or connects on 127.0.0.1 fails "
    "(PermissionError)",
}
#: the sandbox's ``network`` settings: no socket at all, or a loopback network per run
NETWORKS = ("none", "loopback")


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


def enter_server_userns() -> None:
    """Become root of a fresh user namespace (normal users only): uid/gid 0 inside map to ours outside."""
    uid, gid = os.geteuid(), os.getegid()
    lx.unshare(lx.CLONE_NEWUSER)
    lx.write_proc_file("/proc/self/setgroups", "deny")
    lx.write_proc_file("/proc/self/uid_map", f"0 {uid} 1")
    lx.write_proc_file("/proc/self/gid_map", f"0 {gid} 1")


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


# ---------------------------------------------------------------- Landlock

_LANDLOCK_SERVER_EXTRA = ("/proc", "/sys/devices/system/cpu", "/dev/random", "/dev/urandom")


def _landlock_allowlist(extra_paths: Sequence[str]) -> list[str]:
    """What a process outside the read-only view may read: system dirs, ``/etc`` less what others may not
    read (``/etc/shadow``, ssh host keys), the interpreter's paths as written and resolved, extras."""
    system = [d for d in SYSTEM_DIRS if d != "/etc" and os.path.isdir(d)]
    return [
        *system,
        *landlock.readable_by_others("/etc"),
        *exposed_paths(extra_paths),
        *_LANDLOCK_SERVER_EXTRA,
    ]


def _plan_landlock(plan: ServerPlan, extra_paths: Sequence[str]) -> None:
    """Detect Landlock, decide each child's read rules, and (outside the view) confine the server itself.

    Outside the view the server's own domain carries the long allowlist once; a child's domain only has to
    keep it out of ``/tmp`` (every other run's dir lies there) and give it its own dir, a few rules per run.
    """
    abi = landlock.abi_version()
    if not abi:
        plan.missing["landlock"] = f"{landlock.unavailable_reason()}; {_CONSEQUENCE['landlock']}"
        plan.layers.discard("landlock")
        return
    plan.landlock_abi = abi
    plan.details["landlock"] = f"ABI {abi}: " + "; ".join(
        landlock.features(abi, plan.has("loopback_network"))
    )
    if plan.has("fs_view"):
        plan.landlock_read = ["/"]
        return
    exposed = exposed_paths(extra_paths)
    if plan.mode == "userns":  # the server must still write its children's uid maps: no server domain
        plan.landlock_read = _landlock_allowlist(extra_paths)
        return
    tmp_root = "/" + (plan.host_tmp_base or "/tmp").strip("/").split("/")[0]
    child_read = [
        *(os.path.join("/", n) for n in sorted(os.listdir("/")) if os.path.join("/", n) != tmp_root),
        *(p for p in exposed if p.startswith(tmp_root + "/")),
    ]
    try:
        lx.prctl(lx.PR_SET_NO_NEW_PRIVS, 1)  # Landlock's condition without CAP_SYS_ADMIN (as in a container)
        landlock.restrict(
            _landlock_allowlist(extra_paths),
            [plan.host_tmp_base or "/nonexistent"],
            ("/dev/null", "/dev/zero", "/dev/full"),
            abi=abi,
            allow_tcp=plan.has("loopback_network"),
        )
    except OSError as exc:
        plan.missing["landlock"] = f"confining the fork server: {exc}; {_CONSEQUENCE['landlock']}"
        plan.layers.discard("landlock")
        return
    plan.landlock_read = child_read
    if plan.mode == "root" and plan.has("unprivileged_user"):
        closed = [p for p in exposed if not landlock.world_readable(p)]
        if closed:
            plan.fs_as_root = True
            plan.details["fs_as_root"] = (
                f"{closed[0]} is under a directory other uids cannot enter: children read files as uid 0 "
                "with no capability, confined by Landlock"
            )


# ---------------------------------------------------------------- server preparation


def _in_throwaway_child(work: Callable[[], bytes]) -> tuple[bytes, int]:
    """``work()`` run in a forked child that exits at once after: (what it returned, its wait status). The
    server's own process keeps nothing the work imports or changes (a namespace entered, a module loaded)."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the throwaway child
        try:
            os.close(r)
            os.write(w, work())
        finally:
            os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return data, status


def _loopback_unavailable() -> str | None:
    """None if a child here can enter a loopback network of its own (tried in a throwaway child), else why."""

    def attempt() -> bytes:
        try:
            enter_loopback_network()
        except OSError as exc:
            return f"a network namespace with lo up: {exc.strerror or exc}".encode()
        return b""

    data, status = _in_throwaway_child(attempt)
    if status != 0:
        return f"the child trying it died (wait status {status})"
    return data.decode(errors="replace") or None


def _compile_seccomp_elsewhere(
    for_privileged_server: bool, inet_sockets: bool
) -> tuple[bytes | None, list[str], str | None]:
    """Compile the filter in a throwaway child: (bpf, unknown syscalls, why unavailable).

    pyseccomp imports ctypes.util, which imports subprocess and threading; threading's after-fork hook
    would then run in every child the server forks. Compiling in a child keeps all of that out.
    """

    def compile_filter() -> bytes:
        from toolgym.sandbox.seccomp import build_filter_bpf, seccomp_unavailable_reason

        reason = seccomp_unavailable_reason()
        out: dict = {"reason": reason, "bpf": "", "unknown": []}
        if reason is None:
            try:
                bpf, out["unknown"] = build_filter_bpf(for_privileged_server, inet_sockets)
                out["bpf"] = bpf.hex()
            except OSError as exc:
                out["reason"] = f"building the filter failed: {exc}"
        return json.dumps(out).encode()

    data, _ = _in_throwaway_child(compile_filter)
    try:
        out = json.loads(data)
    except ValueError:
        return None, [], "the seccomp compiler process failed"
    return (bytes.fromhex(out["bpf"]) or None), out["unknown"], out["reason"]


def prepare_server(
    disabled: Iterable[str],
    uid_probe: int,
    probe_limits: dict,
    extra_paths: Sequence[str] = (),
    links: dict[str, str] | None = None,
    network: str = "none",
) -> ServerPlan:
    """Establish the server-wide layers (user namespace, read-only view) and detect the per-child ones."""
    disabled_set = {d for d in disabled if d in LAYERS}
    wanted = [layer for layer in LAYERS if layer not in disabled_set]
    if network == "loopback":
        wanted.append("loopback_network")
    missing: dict[str, str] = {}
    details: dict[str, str] = {}
    is_root = os.geteuid() == 0
    host_uid = os.geteuid()
    mode = "root" if is_root else "plain"
    if not is_root and any(
        layer in wanted for layer in (*_NAMESPACE_LAYERS, "unprivileged_user", "loopback_network")
    ):
        try:
            enter_server_userns()
            mode = "userns"
        except OSError as exc:
            why = f"not root and user namespaces are unavailable ({_userns_block_reason()}: {exc.strerror})"
            for layer in (*_NAMESPACE_LAYERS, "unprivileged_user", "loopback_network"):
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
    plan = ServerPlan(
        mode=mode, layers=layers, missing=missing, disabled=disabled_set, details=details, network=network
    )
    if plan.has("loopback_network"):  # known before the filter is compiled: it lets inet sockets through
        why_not = _loopback_unavailable()
        if why_not:
            missing["loopback_network"] = f"{why_not}; {_CONSEQUENCE['loopback_network']}"
            layers.discard("loopback_network")
        else:
            details["loopback_network"] = "a network namespace per run: lo up, the default route on it"

    if plan.has("seccomp"):
        bpf, unknown, reason = _compile_seccomp_elsewhere(is_root, plan.has("loopback_network"))
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
            exposed = build_fs_view(extra_paths, links)
            plan.tmp_binds = under_tmp(exposed)
            details["fs_view"] = "exposed read-only: system dirs + " + ", ".join(exposed)
            if links:
                details["fs_view"] += "; links " + ", ".join(f"{k} -> {v}" for k, v in sorted(links.items()))
        except (OSError, ViewError) as exc:
            missing["fs_view"] = f"{exc}"
            layers.discard("fs_view")
    if not plan.has("fs_view"):
        plan.host_tmp_base = make_private_dir("/tmp", "toolgym-sandbox-")
        # search and create, no listing: a run finds no other run's dir (48 random bits each) to aim at
        os.chmod(plan.host_tmp_base, 0o311)
    if plan.has("landlock"):
        _plan_landlock(plan, extra_paths)
    if plan.has("pid_namespace"):
        plan.pidns_fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    if is_root:  # lock the server itself: children inherit no_new_privs and the filter for free
        lock_down(plan)
        plan.locked_in_server = True
        if plan.has("unprivileged_user"):
            details["unprivileged_user"] = f"setresuid to uid {uid_probe} and up (one uid per live child)"
            if plan.fs_as_root:
                details["unprivileged_user"] += "; file access as uid 0 without capabilities (" + (
                    details.pop("fs_as_root") + ")"
                )
    if plan.has("seccomp"):
        where = "installed once in the fork server, inherited" if is_root else "installed by each child"
        details["seccomp"] = f"{where}; {details['seccomp']}" if "seccomp" in details else where

    for layer, why in probe_child_layers(plan, uid_probe, probe_limits).items():
        if layer in wanted or layer == "probe":  # (the probe itself drops a pid_namespace it cannot create)
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
