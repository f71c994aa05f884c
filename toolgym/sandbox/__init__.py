"""Code-execution backends for model-written Python: isolated by default, fast, and honest about it.

::

    from toolgym.sandbox import LocalSandbox, Limits
    with LocalSandbox(limits=Limits(timeout_s=5)) as sb:
        res = sb.run("print(1)")          # ExecResult(status="ok", stdout="1\\n", ...)
        sess = sb.session()               # variables persist across sess.run calls
        sb.isolation.missing              # layers this machine does not allow, with reasons

``get_sandbox("local", ...)`` / ``get_sandbox("e2b", ...)`` pick a backend by name. ``doctor_report()`` lists
every layer with whether it works here (for ``toolgym doctor``).
"""

from __future__ import annotations

import sys
from typing import Any

from toolgym.sandbox.base import Sandbox, SandboxSession, SandboxUnavailable
from toolgym.sandbox.capacity import NoSessionSlot, Reservation, SessionSlots
from toolgym.sandbox.isolation import ALWAYS_ON, LAYERS, ON_REQUEST
from toolgym.sandbox.limits import Limits
from toolgym.sandbox.local import DEFAULT_PRELOAD, SCIENTIFIC_PRELOAD, LocalSandbox
from toolgym.sandbox.result import STATUSES, ExecResult, IsolationReport, Status
from toolgym.sandbox.session import Session
from toolgym.sandbox.shared import close_shared_sandbox, reserve_sessions, shared_sandbox

BACKENDS = ("local", "e2b")


def get_sandbox(kind: str = "local", **kwargs: Any) -> Sandbox:
    """Construct a backend by name: ``"local"`` (fork servers + namespaces) or ``"e2b"`` (hosted microVMs)."""
    if kind == "local":
        return LocalSandbox(**kwargs)
    if kind == "e2b":
        from toolgym.sandbox.e2b import E2BSandbox

        return E2BSandbox(**kwargs)
    raise ValueError(f"unknown sandbox backend {kind!r}; choose one of {', '.join(BACKENDS)}")


def doctor_report() -> list[tuple[str, bool, str]]:
    """(layer, available, detail) for every isolation layer of the local backend on this machine.

    Starts one throwaway fork server, which performs each layer once, exactly as runs do; with
    ``network="loopback"``, so that the SWE judge's loopback network per run is checked too.
    """
    rows: list[tuple[str, bool, str]] = [
        ("platform", sys.platform == "linux", f"{sys.platform}, Python {sys.version.split()[0]}")
    ]
    try:
        sb = LocalSandbox(workers=1, preload=(), max_sessions=1, network="loopback")
    except SandboxUnavailable as exc:
        return [*rows, ("fork_server", False, str(exc))]
    try:
        report = sb.isolation
        rows.append(("mode", True, report.details.get("mode", "")))
        rows.append(("setup", True, setup_name(report)))
        rows.append(
            (
                "canary",
                not report.broken,
                report.broken
                or "a child imports its packages (stdlib C extensions, numpy) and reads sys.path",
            )
        )
        for layer in (*LAYERS, *ON_REQUEST):
            if layer in report.missing:
                rows.append((layer, False, report.missing[layer]))
            else:
                rows.append((layer, True, report.details.get(layer, "")))
        rows.extend((layer, True, "always on") for layer in ALWAYS_ON)
    finally:
        sb.close()
    return rows


def setup_name(report: IsolationReport) -> str:
    """Which row of the docs' "Running in containers and clusters" table this machine is."""
    mode = report.details.get("mode", "")
    view = "fs_view" in report.active
    if mode == "root":
        return (
            "root on a host (every layer)"
            if view
            else "root without CAP_SYS_ADMIN (a Docker/Kubernetes container)"
        )
    if mode == "userns":
        return "a user with user namespaces (every layer)"
    return "a user without user namespaces (a cluster job in a pod, or a locked-down host)"


def session_memory_figure(sessions: int = 16) -> str:
    """What one live session costs here: ``sessions`` interpreters that each ran a line, their mean Pss
    (for sizing: live episodes x this must fit the memory the sandbox may take). For ``toolgym doctor``."""
    with LocalSandbox(workers=1, max_sessions=sessions) as sb:
        opened = [sb.session() for _ in range(sessions)]
        for i, sess in enumerate(opened):
            sess.run(f"x = {i}")
        live, total = sb.session_memory()
    if not live:
        return "sandbox sessions: none started"
    per = total / live / 2**20
    return (
        f"sandbox sessions: {per:.1f} MiB Pss each ({live} live interpreters: {total / 2**20:.0f} MiB); "
        f"256 live episodes need ~{per * 256:.0f} MiB"
    )


__all__ = [
    "ALWAYS_ON",
    "BACKENDS",
    "DEFAULT_PRELOAD",
    "LAYERS",
    "SCIENTIFIC_PRELOAD",
    "STATUSES",
    "ExecResult",
    "IsolationReport",
    "Limits",
    "LocalSandbox",
    "NoSessionSlot",
    "Reservation",
    "Sandbox",
    "SandboxSession",
    "SandboxUnavailable",
    "Session",
    "SessionSlots",
    "Status",
    "close_shared_sandbox",
    "doctor_report",
    "get_sandbox",
    "reserve_sessions",
    "session_memory_figure",
    "shared_sandbox",
]
