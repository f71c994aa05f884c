"""The backend-independent sandbox interface (local fork servers, e2b, ...)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol

from toolgym.sandbox.capacity import Reservation
from toolgym.sandbox.limits import Limits
from toolgym.sandbox.result import ExecResult, IsolationReport


class SandboxUnavailable(RuntimeError):
    """The backend cannot run here (missing package, credentials, or a required isolation layer)."""


class SandboxSession(Protocol):
    """A stateful interpreter: variables persist across ``run`` calls until ``close``."""

    def run(self, code: str, *, stdin: str | None = None, timeout: float | None = None) -> ExecResult: ...

    async def arun(
        self, code: str, *, stdin: str | None = None, timeout: float | None = None
    ) -> ExecResult: ...

    def close(self) -> None: ...


class Sandbox(ABC):
    """Runs untrusted Python code and says how it went; never raises for the program's own failures."""

    limits: Limits

    @abstractmethod
    def run(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        """Run ``code`` as a fresh ``python -c`` program."""

    @abstractmethod
    async def arun(
        self,
        code: str,
        *,
        stdin: str | None = None,
        timeout: float | None = None,
        limits: Limits | None = None,
        files: dict[str, str | bytes] | None = None,
    ) -> ExecResult:
        """Async ``run`` with bounded concurrency (callers wait for a free worker)."""

    @abstractmethod
    def session(self, *, limits: Limits | None = None, files: dict[str, str | bytes] | None = None) -> Any:
        """A new stateful interpreter session (see :class:`SandboxSession`)."""

    def reserve_sessions(self, n: int) -> Reservation:
        """Hold capacity for ``n`` sessions while the caller runs ``n`` episodes at once (release it when
        they are done). A backend without a session cap reserves nothing."""
        return Reservation(None, n)

    @property
    @abstractmethod
    def isolation(self) -> IsolationReport:
        """The isolation layers in effect."""

    @abstractmethod
    def close(self) -> None:
        """Release every process or remote resource."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_files(files: dict[str, str | bytes] | None) -> dict[str, str | bytes] | None:
    """Validate caller-provided file names: relative, no '..', so they land inside the working directory."""
    if not files:
        return None
    for name, data in files.items():
        parts = name.split("/")
        if not name or name.startswith("/") or ".." in parts or "" in parts[:-1] or parts[-1] in ("", "."):
            raise ValueError(f"file name {name!r} must be a relative path without '..'")
        if not isinstance(data, str | bytes):
            raise TypeError(f"file {name!r} must be str or bytes, not {type(data).__name__}")
    return dict(files)
