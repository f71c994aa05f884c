"""The backend-independent sandbox interface (local fork servers, e2b, ...), with the one ``arun`` they share:
``run`` on a worker thread, at most ``workers`` at once."""

from __future__ import annotations

import asyncio
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Protocol, Self, TypeVar

from toolgym.sandbox.capacity import Reservation
from toolgym.sandbox.limits import Limits
from toolgym.sandbox.result import ExecResult, IsolationReport

T = TypeVar("T")


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
    workers: int
    _executor: Executor | None = None  # the threads ``arun`` runs on; None: the event loop's default ones

    def __init__(self, limits: Limits | None, workers: int) -> None:
        self.limits = limits or Limits()
        self.workers = workers
        self._semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

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
        return await self._bounded(
            lambda: self.run(code, stdin=stdin, timeout=timeout, limits=limits, files=files)
        )

    async def _bounded(self, fn: Callable[[], T]) -> T:
        """Call ``fn`` on a worker thread, at most ``workers`` at once on each event loop (the rest wait)."""
        loop = asyncio.get_running_loop()
        sem = self._semaphores.get(loop)
        if sem is None:
            sem = self._semaphores.setdefault(loop, asyncio.Semaphore(self.workers))
        async with sem:
            return await loop.run_in_executor(self._executor, fn)

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

    def __enter__(self) -> Self:
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
