"""The read-only filesystem view: a private mount namespace whose root holds only what Python needs.

Built once per fork server, before anything else runs in it: a tmpfs becomes the new root, the system
directories and the interpreter's paths are bind-mounted into it, everything is remounted read-only, and
``pivot_root`` makes it the server's ``/`` (the host's root is detached, not hidden). Each child later adds
its own private tmpfs on ``/tmp`` and ``/dev/shm`` and, with a pid namespace, its own ``/proc``.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Callable, Iterable, Mapping

from toolgym.sandbox import _linux as lx


class ViewError(RuntimeError):
    """The view cannot be built here (the reason is reported as the missing ``fs_view`` layer)."""


# Top-level system directories exposed read-only (when present). /etc is needed for locale, TLS roots,
# /etc/passwd lookups; its secrets (shadow, ssh host keys) are unreadable by the unprivileged uid.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_DEVICES = ("null", "zero", "full", "random", "urandom")
_MOUNT_OPTION_FLAGS = {
    "nosuid": lx.MS_NOSUID,
    "nodev": lx.MS_NODEV,
    "noexec": lx.MS_NOEXEC,
    "noatime": lx.MS_NOATIME,
    "nodiratime": lx.MS_NODIRATIME,
    "relatime": lx.MS_RELATIME,
}


def _unescape_mountinfo(field_: str) -> str:
    return field_.encode().decode("unicode_escape") if "\\" in field_ else field_


def _mounts() -> dict[int, tuple[str, str]]:
    """mount id -> (mount point, per-mount options) from /proc/self/mountinfo."""
    out: dict[int, tuple[str, str]] = {}
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            parts = line.split()
            out[int(parts[0])] = (_unescape_mountinfo(parts[4]), parts[5])
    return out


def exposed_paths(extra: Iterable[str] = ()) -> list[str]:
    """The host paths the read-only view exposes: Python's prefixes and sys.path, extras.

    Each both as written and resolved: a venv reached through a symlink (``.venv -> /scratch/...``) has
    ``sys.prefix`` and ``sys.path`` spelled with the link, and the interpreter looks its packages up by
    those names, so the view must answer to both.
    """
    wanted = [
        sys.prefix,
        sys.exec_prefix,
        sys.base_prefix,
        sys.base_exec_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
        *(p for p in sys.path if p),
        *extra,
    ]
    present = [p for p in wanted if p and os.path.exists(p)]
    paths = {os.path.realpath(p) for p in present} | {os.path.abspath(p) for p in present}
    links = [d + "/" for d in SYSTEM_DIRS if os.path.islink(d)]
    # a path through a system link (/lib -> usr/lib) is already in the view as the link and its target
    paths = {p for p in paths if p != "/" and not any(p.startswith(link) for link in links)}
    # Only bind the outermost of nested paths (binds are recursive).
    out: list[str] = []
    for p in sorted(paths, key=lambda s: (s.count("/"), s)):
        if not any(p == q or p.startswith(q + "/") for q in out):
            out.append(p)
    return out


def check_links(links: Mapping[str, str]) -> dict[str, str]:
    """Check view links (``{"/app": "/tmp/app"}``): a new top-level name pointing into the run's ``/tmp``."""
    out = {}
    for link, target in links.items():
        name = link.strip("/")
        if not link.startswith("/") or not name or "/" in name or name in ("tmp", "proc", "dev"):
            raise ValueError(f"view link {link!r} must be a new top-level path such as /app")
        if "/" + name in SYSTEM_DIRS:
            raise ValueError(f"view link {link!r} would hide the system directory")
        if not (target == "/tmp" or target.startswith("/tmp/")) or ".." in target.split("/"):
            raise ValueError(f"view link target {target!r} must lie in the run's private /tmp")
        out["/" + name] = target
    return out


def build_fs_view(extra: Iterable[str] = (), links: Mapping[str, str] | None = None) -> list[str]:
    """Replace this process's root with the read-only allowlisted view (in a new mount namespace).

    ``links``: extra symlinks in the view's root into each run's private ``/tmp`` (``/app -> /tmp/app``), so a
    run's own files appear at a fixed path (a terminal task's workspace).

    The bind sources are opened as O_PATH descriptors before the staging tmpfs covers ``/tmp``, so Python
    installed anywhere (even under /tmp) can be exposed. Returns the exposed host paths.
    """
    system_links: list[tuple[str, str]] = []
    system_dirs: list[str] = []
    for d in SYSTEM_DIRS:
        if os.path.islink(d):
            system_links.append((d, os.readlink(d)))
        elif os.path.isdir(d):
            system_dirs.append(d)
    binds = [p for p in exposed_paths(extra) if not any(p == d or p.startswith(d + "/") for d in system_dirs)]
    binds = system_dirs + binds
    if "/tmp" in binds:
        raise ViewError("/tmp itself is on sys.path; each run replaces it with its private tmpfs")

    lx.unshare(lx.CLONE_NEWNS)
    lx.mount(None, "/", None, lx.MS_REC | lx.MS_PRIVATE)
    before = set(_mounts())
    sources = {p: os.open(p, os.O_PATH | os.O_CLOEXEC) for p in binds}
    devices = {
        d: os.open(f"/dev/{d}", os.O_PATH | os.O_CLOEXEC) for d in _DEVICES if os.path.exists(f"/dev/{d}")
    }
    cpu = "/sys/devices/system/cpu"
    if os.path.isdir(cpu):
        sources[cpu] = os.open(cpu, os.O_PATH | os.O_CLOEXEC)
    proc_fd = os.open("/proc", os.O_PATH | os.O_CLOEXEC)
    root = "/tmp"
    lx.mount("tmpfs", root, "tmpfs", lx.MS_NOSUID, "mode=0755,size=4m")
    try:
        for link, target in system_links:
            os.symlink(target, root + link)
        for link, target in check_links(links or {}).items():
            os.symlink(target, root + link)
        for path, fd in sources.items():
            dst = root + path
            if os.path.isdir(f"/proc/self/fd/{fd}"):
                os.makedirs(dst, exist_ok=True)
            else:
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                open(dst, "wb").close()
            lx.mount(f"/proc/self/fd/{fd}", dst, None, lx.MS_BIND | lx.MS_REC)
        for d in ("/tmp", "/proc", "/dev/shm"):
            os.makedirs(root + d, exist_ok=True)
        # A bind of the host /proc keeps a fully visible procfs in this mount namespace, which the kernel
        # requires before a user namespace may mount a fresh /proc; each run mounts its own on top of it.
        lx.mount(f"/proc/self/fd/{proc_fd}", root + "/proc", None, lx.MS_BIND | lx.MS_REC)
        for name, fd in devices.items():
            open(f"{root}/dev/{name}", "wb").close()
            lx.mount(f"/proc/self/fd/{fd}", f"{root}/dev/{name}", None, lx.MS_BIND)
        for name, target in (
            ("fd", "/proc/self/fd"),
            ("stdin", "/proc/self/fd/0"),
            ("stdout", "/proc/self/fd/1"),
            ("stderr", "/proc/self/fd/2"),
        ):
            os.symlink(target, f"{root}/dev/{name}")
    finally:
        for fd in (*sources.values(), *devices.values(), proc_fd):
            os.close(fd)
    for mount_id, (point, opts) in sorted(_mounts().items()):
        if mount_id in before or point == root:
            continue
        flags = lx.MS_REMOUNT | lx.MS_BIND | lx.MS_RDONLY
        for opt in opts.split(","):
            flags |= _MOUNT_OPTION_FLAGS.get(opt, 0)
        try:
            lx.mount(None, point, None, flags)
        except OSError as exc:
            if exc.errno != errno.ENOENT:  # a submount hidden under another bind: not reachable anyway
                raise
    lx.mount(None, root, None, lx.MS_REMOUNT | lx.MS_RDONLY | lx.MS_NOSUID)
    os.chdir(root)
    lx.pivot_root(".", ".")
    lx.umount2(".", lx.MNT_DETACH)
    os.chdir("/")
    return [p for p in binds if p not in system_dirs]


def under_tmp(paths: Iterable[str]) -> list[str]:
    """The exposed paths that each run's private ``/tmp`` would cover (Python installed under /tmp, as in a
    CI checkout there): runs bind them again on top of their tmpfs, read-only."""
    return [p for p in paths if p.startswith("/tmp/")]


def rebind_read_only(paths: Iterable[str], mount_tmpfs: Callable[[], None]) -> None:
    """Run ``mount_tmpfs`` (which covers ``/tmp``), then re-expose ``paths`` (under /tmp) at the same place.

    The paths are opened before the tmpfs hides them. A bind of a read-only mount is read-only itself, and
    these come from the view, where every bind was remounted read-only.
    """
    fds = [(p, os.open(p, os.O_PATH | os.O_CLOEXEC)) for p in paths]
    try:
        mount_tmpfs()
        for path, fd in fds:
            os.makedirs(path, exist_ok=True)
            lx.mount(f"/proc/self/fd/{fd}", path, None, lx.MS_BIND | lx.MS_REC)
    finally:
        for _, fd in fds:
            os.close(fd)
