"""The ``python`` tool: a stateful, sandboxed Python interpreter per episode.

Why stateful: tool-integrated reasoning and coding agents define a function in one turn and test it in the
next, so variables, imports and definitions persist across the calls of one episode (one sandbox session,
opened on the episode's first call and closed when the episode ends). Episodes never share state.

Why one shared sandbox: a ``LocalSandbox`` is a pool of warm fork servers; starting one per env would cost
processes and memory per env for no gain. ``toolgym.sandbox.shared_sandbox()`` is a process-wide pool (two
workers, created on first use, closed at exit) that every tool and ``toolgym.rewards.code`` share unless given
another.

What the model sees: stdout, then stderr if any, then a status line when the run did not end normally
(``[timed out after 10 s; ...]``). A failure of the program (exception, non-zero exit, timeout, memory,
output flood) is ``status="error"``: the model's to fix. A failure of the sandbox is ``infra_error``, and so
is any call after the episode's state was lost through the sandbox's doing (``ExecResult.infra_reset``: its
fork server died, the sandbox restarted) or that found no session slot: the trainer can keep such an episode
out of the loss (``Trajectory.trainable_for(exclude_infra_errors=True)``). A live episode's session is never
evicted to make room (``toolgym.sandbox.capacity``); the seconds a call waited for a slot are in
``metadata["wait_s"]``.
"""

from __future__ import annotations

import threading
from typing import Any

from pydantic import BaseModel, Field

from toolgym.core.types import ToolResult
from toolgym.sandbox import ExecResult, Limits, Sandbox, shared_sandbox
from toolgym.tools.base import Tool, register_tool

DEFAULT_TIMEOUT = 10.0


def render_exec_result(res: ExecResult, timeout: float) -> str:
    """stdout, then stderr, then a status line for anything but a normal exit."""
    parts = [p.rstrip("\n") for p in (res.stdout, res.stderr) if p.strip()]
    lost = "earlier variables are gone"
    signal = f" by signal {res.signal}" if res.signal else ""
    status = {
        "ok": None,
        "error": f"[exit code {res.exit_code}]",
        "timeout": f"[timed out after {timeout:g} s; the interpreter was stopped, {lost}]",
        "memory": f"[out of memory; {lost}]",
        "output_limit": f"[killed for printing too much output; {lost}]",
        "killed": f"[the interpreter died{signal} (it exited, crashed or hit a limit); {lost}]",
        "sandbox_error": f"[sandbox error: {res.detail}]",
    }[res.status]
    if res.session_reset:  # the detail says why the state was lost before this call
        parts.insert(0, f"[note: {res.detail}]")
    if status:
        parts.append(status)
    return "\n".join(parts) if parts else "(no output; use print() to see values)"


@register_tool
class PythonTool(Tool):
    """Runs code in a per-episode sandbox session (see the module docstring)."""

    name = "python"
    description = (
        "Run Python code in a sandboxed interpreter and see what it prints. Variables, functions and imports "
        "persist between calls in the same task. Use print() to show results."
    )
    primary_arg = "code"

    class Args(BaseModel):
        code: str = Field(description="Python source code to run; print() what you want to see.")

    def __init__(
        self, sandbox: Sandbox | None = None, timeout: float = DEFAULT_TIMEOUT, limits: Limits | None = None
    ):
        """``sandbox``: the one to use (not closed by the tool); default the shared one, started lazily.
        ``timeout``: seconds per call. ``limits``: per-session limits (default: the sandbox's)."""
        self._sandbox = sandbox
        self.timeout = float(timeout)
        self.limits = limits
        self._session: Any = None
        self._episode: str | None = None
        self._lock = threading.Lock()

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox if self._sandbox is not None else shared_sandbox()

    # -- episodes

    def start_episode(self, episode_id: str) -> None:
        self._close_session()
        self._episode = episode_id

    def end_episode(self, episode_id: str) -> None:
        if episode_id == self._episode:
            self._close_session()
            self._episode = None

    def close(self) -> None:
        self._close_session()
        self._episode = None

    def _close_session(self) -> None:
        with self._lock:
            sess, self._session = self._session, None
        if sess is not None:
            sess.close()

    def _current_session(self) -> Any:
        with self._lock:
            if self._session is None:
                self._session = self.sandbox.session(limits=self.limits)
            return self._session

    # -- calls

    def run(self, args: Args) -> ToolResult:
        return self._result(self._current_session().run(args.code, timeout=self.timeout))

    async def arun(self, args: Args) -> ToolResult:
        """Waits for a free sandbox worker (bounded concurrency) instead of occupying a thread."""
        return self._result(await self._current_session().arun(args.code, timeout=self.timeout))

    def _result(self, res: ExecResult) -> ToolResult:
        if res.status == "sandbox_error" or res.infra_reset:
            status = "infra_error"
        else:
            status = "ok" if res.ok else "error"
        return ToolResult(
            name=self.name,
            status=status,
            output=render_exec_result(res, self.timeout),
            metadata={"exec_status": res.status, "wait_s": round(res.session_wait_s, 3)},
        )
