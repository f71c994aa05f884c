"""What a sandboxed run returns, and which isolation layers were in effect.

A failure of the sandbox itself (the fork server died, a namespace could not be created) is status
``sandbox_error`` and never ``error``: a reward computed from a run must not punish the model for our
infrastructure, and a training loop must be able to tell the two apart.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Status = Literal["ok", "error", "timeout", "memory", "output_limit", "killed", "sandbox_error"]
STATUSES: tuple[Status, ...] = ("ok", "error", "timeout", "memory", "output_limit", "killed", "sandbox_error")


class IsolationReport(BaseModel):
    """Which isolation layers are active, which were switched off on purpose, and which are missing (why).

    ``missing`` is the loud part: a layer the sandbox wanted but the machine does not allow (not root and no
    user namespaces, no libseccomp, ...). ``disabled`` lists layers the caller turned off (benchmarks).
    """

    model_config = ConfigDict(frozen=True)

    backend: str = "local"
    active: tuple[str, ...] = ()
    missing: dict[str, str] = {}
    disabled: tuple[str, ...] = ()
    details: dict[str, str] = {}
    #: why the sandbox cannot run code correctly (its start-up canary failed); empty when healthy
    broken: str = ""

    @property
    def complete(self) -> bool:
        """True when every layer the backend knows is active (and the sandbox is not broken)."""
        return not self.missing and not self.disabled and not self.broken

    def summary(self) -> str:
        parts = [f"BROKEN: {self.broken}"] if self.broken else []
        parts.append(f"active: {', '.join(self.active) or '-'}")
        if self.disabled:
            parts.append(f"disabled: {', '.join(self.disabled)}")
        if self.missing:
            parts.append("missing: " + "; ".join(f"{k} ({v})" for k, v in self.missing.items()))
        return " | ".join(parts)


class ExecResult(BaseModel):
    """The outcome of one run (or one session call).

    ``status``: ``ok`` (exit code 0), ``error`` (raised or exited non-zero), ``timeout`` (wall or CPU limit),
    ``memory`` (MemoryError or killed at the memory limit), ``output_limit`` (killed for flooding output),
    ``killed`` (died from a signal it brought on itself, e.g. SIGSEGV), ``sandbox_error`` (our failure, see
    ``detail``). ``stdout``/``stderr`` keep the head and the tail of each stream with a marker in between
    when the ``*_truncated`` flag is set. ``isolation`` is the report of the layers in effect for this run.

    Session calls only: ``session_reset`` when the session's earlier state was lost before this call
    (``detail`` says why), ``infra_reset`` when that loss was the sandbox's doing and not the program's (its
    fork server died, the sandbox restarted, its idle slot was given away), and ``session_wait_s``, the
    seconds this call waited for a session slot (``toolgym.sandbox.capacity``).

    ``program_s``: with ``Limits(clock="program")``, the program's own time (``toolgym.util.program_clock``),
    the seconds its ``timeout`` was judged on; None otherwise.
    """

    model_config = ConfigDict(frozen=True)

    status: Status
    exit_code: int | None = None
    signal: int | None = None
    stdout: str = ""
    stderr: str = ""
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_bytes: int | None = None
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    isolation: IsolationReport = IsolationReport()
    detail: str = ""
    session_reset: bool = False
    infra_reset: bool = False
    session_wait_s: float = 0.0
    program_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"
