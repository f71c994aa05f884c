"""The ``bash`` tool: shell commands in a per-episode sandboxed workspace (toolgym/Terminal-v0's tool).

Each call runs ``bash -c COMMAND`` in an isolated child of the sandbox: the layers of the python tool (no
network, read-only view of the system, unprivileged uid, seccomp, rlimits with a process-count cap), because
it runs inside the episode's sandbox session. The session's interpreter only drives the shell; it keeps the
**workspace** alive between calls: its private ``/tmp`` holds the workspace at ``/tmp/app``, which appears at
``/app`` through the terminal sandbox's view link (``toolgym.sandbox.shared.TERMINAL_LINKS``). A new episode
opens a new session from a fresh copy of the task's files; episodes never share one.

Per call: stdout and stderr merged, the head and the tail kept (``max_output_chars``), the exit code shown
in a status line after it (``[exit code N]``, ``[killed by signal N]``, ``[timed out after …]``). The result's
``metadata`` says the same without the text: ``exit_code``, ``timed_out`` and ``output_span`` (where the
command's own output is in ``output``), which the gateway's tool endpoint returns as fields.
Every call starts in the workspace (``cd`` does not carry over). At the end of a call, or at its wall-clock
timeout, every process the command started is killed, background ones and daemons included (``kill(-1)``
inside the session's own pid namespace, or its descendants, made its children by ``PR_SET_CHILD_SUBREAPER``,
where there is no pid namespace), so nothing outlives the call; a timeout is an ``error`` result and the
workspace stays for the next call. A failure of the sandbox is ``infra_error``, as for the python tool; a
session its own commands ended (its process tree past the memory or disk limit, or killed by a command where
there is no pid namespace) is an ``error``, the model's: the next call starts from a fresh copy with a note.

``snapshot()`` reads the final workspace back (files, modes, symlinks as links, never followed) for a
verifier that judges it in the trainer's process, after the episode: nothing a command does can run there.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from toolgym.core.task import Task
from toolgym.core.types import ToolResult, Verdict
from toolgym.sandbox import ExecResult, Limits, Sandbox
from toolgym.sandbox.driver import last_json
from toolgym.sandbox.limits import MiB
from toolgym.sandbox.shared import shared_terminal_sandbox
from toolgym.sandbox.shell_driver import SHELL_DEFINE
from toolgym.tools.base import Tool, register_tool
from toolgym.util.text import clip_middle

DEFAULT_TIMEOUT = 30.0
WORKSPACE = "app"  # the workspace's directory in the session's own /tmp (working dir)
WORKSPACE_PATH = "/app"
#: per-call output kept for the model (head and tail), in characters
MAX_OUTPUT_CHARS = 16_000
#: the largest workspace a snapshot reads back
MAX_SNAPSHOT_BYTES = 16 * MiB
SNAPSHOT_CHUNK = 192_000  # characters of the snapshot's JSON per call
_GRACE_S = 5.0  # beyond a call's own timeout, before the sandbox kills the whole session
TERMINAL_LIMITS = Limits(
    timeout_s=DEFAULT_TIMEOUT + _GRACE_S,
    cpu_s=60,
    memory_bytes=1024 * MiB,
    processes=64,
    open_files=256,
    file_size_bytes=32 * MiB,
    disk_bytes=128 * MiB,
    # what a call's reply may hold (the reader allocates it per call: keep it small); a command's own output
    # is capped by the driver, a snapshot comes back in chunks of SNAPSHOT_CHUNK
    max_output_bytes=256 * 1024,
    max_output_total_bytes=16 * MiB,
)

_ARCHIVE = ".toolgym-workspace.tar"  # the task's archive in the session's dir, until _tg_ready unpacks it


class Workspace:
    """An episode's final workspace as data: ``files`` (path -> bytes), ``modes``, ``links``, ``dirs``."""

    def __init__(self, entries: list[list[Any]]):
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, int] = {}
        self.links: dict[str, str] = {}
        self.dirs: set[str] = set()
        self.other: set[str] = set()
        self.deleted: set[str] = set()  # (what ``BashTool.changes`` found removed)
        for rel, kind, mode, data in entries:
            self.modes[rel] = int(mode)
            if kind == "file":
                self.files[rel] = base64.b64decode(data)
            elif kind == "link":
                self.links[rel] = data
            elif kind == "dir":
                self.dirs.add(rel)
            elif kind == "deleted":
                self.deleted.add(rel)
            else:
                self.other.add(rel)

    def text(self, path: str) -> str | None:
        """A file's text (None when absent or not a regular file)."""
        data = self.files.get(path)
        return None if data is None else data.decode("utf-8", "replace")

    def exists(self, path: str) -> bool:
        return path in self.files or path in self.links or path in self.dirs or path in self.other


class SnapshotError(RuntimeError):
    """The workspace could not be read back (the sandbox failed, the session was lost)."""


class WorkspaceFailure(ValueError):
    """The commands destroyed the workspace or left it unjudgeable: their session died of their own doing
    (the memory or disk limit of its process tree, a command that killed it where nothing stops that), or
    they left more than ``MAX_SNAPSHOT_BYTES``. Judged as a failure (reward 0), never a verifier error that
    would keep the episode out of training."""


def workspace_files(task: Task) -> dict[str, str | bytes]:
    """The task's initial files (``task.data["files"]``: path relative to the workspace -> content)."""
    return dict(task.data.get("files") or {})


#: how to give a sandbox whose children read files as uid 0 a workspace (docs/containers.md)
UID0_FIX = (
    "install Python where every uid can read it (/usr/local, /opt: e.g. UV_PYTHON_INSTALL_DIR=/opt/python uv "
    "python install), or let other uids traverse its directory (chmod o+x /root), or give the container "
    "CAP_SYS_ADMIN (docker run --cap-add SYS_ADMIN --security-opt apparmor=unconfined)"
)


def workspace_paths(
    sandbox: Any, workspace: str, workspace_path: str, *, requires_path: bool = False
) -> tuple[str, str] | str:
    """(a workspace's directory in a sandbox child, the path its programs see it at), or why no workspace can
    be set up on this sandbox: the bash tool's sessions, SWE-v0's judge and the miner share this rule."""
    report = sandbox.isolation
    if report.broken:
        return f"the sandbox is broken: {report.broken}"
    if report.backend != "local":  # e2b's sessions share one working directory in one microVM
        return f"the bash tool runs on the local sandbox only, not on the {report.backend} backend"
    if "fs_view" in report.active and f"{workspace_path} ->" in report.details.get("fs_view", ""):
        return f"/tmp/{workspace}", workspace_path
    if "file access as uid 0" in report.details.get("unprivileged_user", ""):
        # the session's files belong to root there, and a command (exec resets the file uid) could not
        # write them: refuse rather than play a workspace the model cannot change
        return (
            "without the read-only view, this sandbox's children read files as uid 0 (the interpreter "
            "lies under a directory other uids cannot enter), so shell commands could not write the "
            f"workspace. To fix it: {UID0_FIX}"
        )
    if requires_path:
        why = report.missing.get("fs_view") or "fs_view is disabled"
        return f"this task's workspace must be at {workspace_path}, which needs the read-only view: " + why
    return workspace, workspace  # relative to the child's working dir (its own host tmp dir)


@register_tool
class BashTool(Tool):
    """Runs shell commands in a per-episode sandboxed workspace (see the module docstring)."""

    name = "bash"
    description = (
        "Run a bash command in the task's workspace and see its output (stdout and stderr together) and exit "
        "code. Files you create or change stay for the rest of the task; each command starts in the "
        "workspace directory. There is no network."
    )
    primary_arg = "command"

    class Args(BaseModel):
        command: str = Field(description="The bash command (or script) to run.")

    def __init__(
        self,
        sandbox: Sandbox | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        limits: Limits | None = None,
        max_output_chars: int = MAX_OUTPUT_CHARS,
        *,
        workspace: str = WORKSPACE,
        workspace_path: str = WORKSPACE_PATH,
        archive: Callable[[Task], bytes | None] | None = None,
        path_prefix: Callable[[Task], str] | None = None,
    ):
        """``sandbox``: the one to use (not closed by the tool); default the process-wide terminal sandbox.
        ``timeout``: seconds per command (everything it started is killed then). ``limits``: the session's.

        ``workspace`` / ``workspace_path``: the workspace's directory in the session's ``/tmp`` and the path
        commands see it at (a view link of the sandbox, ``/app`` or SWE-v0's ``/testbed``). ``archive``: a
        tar of the task's initial workspace (a whole repository with its ``.git``, modes and links kept),
        unpacked into it when the session opens, beside ``task.data["files"]``. ``path_prefix``: directories
        put first on the commands' ``PATH`` for a task (its repository's interpreter)."""
        self._sandbox = sandbox
        self.workspace, self.workspace_path = workspace, workspace_path
        self._archive, self._path_prefix = archive, path_prefix
        self.timeout = float(timeout)
        base = limits or TERMINAL_LIMITS
        self.limits = base.model_copy(update={"timeout_s": max(base.timeout_s, self.timeout + _GRACE_S)})
        self.max_output_chars = max_output_chars
        self._task: Task | None = None
        self._session: Any = None
        self._lost: str | None = None  # why this episode's workspace was lost (its session restarted)
        self._lost_infra = False  # ... through the sandbox's doing (else the commands')
        self._lock = threading.Lock()

    @property
    def sandbox(self) -> Sandbox:
        return self._sandbox if self._sandbox is not None else shared_terminal_sandbox()

    @property
    def own_sandbox(self) -> Sandbox | None:
        """The sandbox this tool was given (None: the process-wide terminal sandbox)."""
        return self._sandbox

    # -- episodes

    def bind_task(self, task: Task) -> None:
        self._task = task

    def start_episode(self, episode_id: str) -> None:
        self._close_session()

    def end_episode(self, episode_id: str) -> None:
        self._close_session()

    def close(self) -> None:
        self._close_session()

    def _close_session(self) -> None:
        with self._lock:
            sess, self._session, self._lost, self._lost_infra = self._session, None, None, False
        if sess is not None:
            sess.close()

    def _current_session(self) -> Any:
        with self._lock:
            if self._session is None:
                task = self._task or _EMPTY
                files = {f"{self.workspace}/{k}": v for k, v in workspace_files(task).items()}
                archive = self._archive(task) if self._archive is not None else None
                if archive:
                    files[_ARCHIVE] = archive
                self._session = self.sandbox.session(limits=self.limits, files=files)
            return self._session

    def workspace_paths(self) -> tuple[str, str] | str:
        """(the workspace in the session, the path commands see it at), or why the workspace cannot be set up
        on this sandbox (then every call is an ``infra_error`` saying so, never a silent wrong result)."""
        requires = self._task is not None and bool(self._task.data.get("requires_path"))
        return workspace_paths(self.sandbox, self.workspace, self.workspace_path, requires_path=requires)

    def driver_call(self, call: str, define: str = "") -> str | None:
        """The code that runs ``call`` (driver code over ``ws``, the workspace in the session) in the session,
        after the workspace is ready; ``define``: more driver code to define first (the editor's). None when
        the workspace has no path on this sandbox (``workspace_paths`` says why)."""
        paths = self.workspace_paths()
        if isinstance(paths, str):
            return None
        return f"{SHELL_DEFINE}\n{define}\nws = {paths[0]!r}\n_tg_ready(ws, {_ARCHIVE!r})\n{call}\n"

    # -- calls

    def _code(self, command: str) -> str | None:
        paths = self.workspace_paths()
        if isinstance(paths, str):
            return None
        prefix = self._path_prefix(self._task or _EMPTY) if self._path_prefix is not None else ""
        cap = self.max_output_chars * 2
        call = f"_tg_call({command!r}, ws, {paths[1]!r}, {self.timeout!r}, {cap}, {prefix!r})"
        return self.driver_call(call)

    def run_in_session(self, code: str, timeout: float | None = None) -> ExecResult:
        """Run driver code (from ``driver_call``) in the episode's session, noting a lost workspace."""
        res = self._current_session().run(code, timeout=timeout or self.timeout + _GRACE_S)
        if res.session_reset:
            self._note_loss(res.detail or "the session restarted", res.infra_reset)
        return res

    def _refuse(self, command: str) -> ToolResult | None:
        if "\x00" in command:
            return ToolResult(name=self.name, status="error", output="the command contains a NUL byte")
        if self._code("") is None:
            return self._no_path()
        return None

    def run(self, args: Args) -> ToolResult:
        code = self._prepared(args)
        if isinstance(code, ToolResult):
            return code
        return self._result(self._current_session().run(code, timeout=self.timeout + _GRACE_S))

    async def arun(self, args: Args) -> ToolResult:
        code = self._prepared(args)
        if isinstance(code, ToolResult):
            return code
        return self._result(await self._current_session().arun(code, timeout=self.timeout + _GRACE_S))

    def _prepared(self, args: Args) -> str | ToolResult:
        """The code the session runs for ``args``, or the result that answers instead: a refused command, or
        a workspace with no path the session can use."""
        refused = self._refuse(args.command)
        if refused is not None:
            return refused
        code = self._code(args.command)
        return self._no_path() if code is None else code

    def _no_path(self) -> ToolResult:
        why = self.workspace_paths()
        return ToolResult(name=self.name, status="infra_error", output=f"[sandbox error: {why}]")

    def _note_loss(self, why: str, infra: bool) -> None:
        if self._lost is None or infra:
            self._lost, self._lost_infra = why, infra

    def _result(self, res: ExecResult) -> ToolResult:
        if res.session_reset:
            self._note_loss(res.detail or "the session restarted", res.infra_reset)
        meta: dict[str, Any] = {"exec_status": res.status, "wait_s": round(res.session_wait_s, 3)}
        reply = last_json(res.stdout) if res.status == "ok" else None
        if reply is None and res.status in _SESSION_DIED_OF_ITS_COMMANDS and not res.infra_reset:
            # the session's process tree hit its memory or disk limit, or a command killed or stopped it
            self._note_loss(res.detail or res.status, infra=False)
            output = f"[the shell's session was stopped ({res.status}): {res.detail}]"
            return ToolResult(name=self.name, status="error", output=output, metadata=meta)
        if reply is None or "start_error" in reply:
            infra = res.status == "sandbox_error" or res.infra_reset or reply is None
            why = reply["start_error"] if reply else res.detail or res.stderr[-500:] or res.status
            if infra and res.status == "sandbox_error":
                self._note_loss(why, infra=True)
            note = "; the workspace is lost" if res.session_reset or res.status != "ok" else ""
            return ToolResult(
                name=self.name,
                status="infra_error" if infra else "error",
                output=f"[sandbox error: {why}{note}]",
                metadata=meta,
            )
        text = (
            reply["head"]
            + (f"\n... [{reply['cut']:,} bytes cut] ...\n" if reply["cut"] else "")
            + reply["tail"]
        )
        text = clip_middle(text.rstrip("\n"), self.max_output_chars)
        if reply["timed_out"]:
            status_line = f"[timed out after {self.timeout:g} s; every process it started was killed]"
        else:
            code = reply["exit"]
            status_line = f"[exit code {code}]" if code >= 0 else f"[killed by signal {-code}]"
        note = f"[note: {res.detail}]\n" if res.session_reset else ""
        ok = not reply["timed_out"] and reply["exit"] == 0
        meta["exit_code"] = reply["exit"]
        meta["timed_out"] = bool(reply["timed_out"])
        # where the command's own output is in the text (without the note and the status line), so a caller
        # that wants it alone (the gateway's structured tool result) takes it without reading the text
        meta["output_span"] = [len(note), len(note) + len(text)]
        output = f"{note}{text}\n{status_line}" if text else f"{note}{status_line}"
        status = "infra_error" if res.infra_reset else ("ok" if ok else "error")
        return ToolResult(name=self.name, status=status, output=output, metadata=meta)

    # -- the final workspace

    def snapshot(self) -> Workspace:
        """The episode's workspace as it is now. ``SnapshotError``: it cannot be read, or was lost through the
        sandbox's doing (a verifier error); ``WorkspaceFailure``: the commands lost it or left it too large (a
        failure of the episode)."""
        return Workspace(self._read_back(f"_tg_snapshot(ws, {MAX_SNAPSHOT_BYTES})"))

    def changes(self, limit: int = MAX_SNAPSHOT_BYTES) -> Workspace:
        """What the episode's commands changed in the workspace since it started, ``.git`` aside: changed and
        new entries as in ``snapshot``, removed ones in ``deleted``. Every process the commands left running
        is killed first, so nothing changes the workspace while (or after) it is read. Raises as
        ``snapshot``; changed files over ``limit`` bytes are a ``WorkspaceFailure``."""
        return Workspace(self._read_back(f"_tg_changes(ws, {limit})"))

    def for_verdict(self, what: Literal["snapshot", "changes"] = "snapshot") -> Workspace | Verdict:
        """``snapshot()`` or ``changes()`` for a verifier, or the verdict when the workspace cannot be read:
        lost through the sandbox's doing, a verdict error (untrainable); through the commands' (their session
        died of its limits, or they left too much), a 0 with the reason."""
        try:
            return self.snapshot() if what == "snapshot" else self.changes()
        except SnapshotError as exc:
            return Verdict(reward=0.0, passed=False, error=str(exc))
        except WorkspaceFailure as exc:
            return Verdict(reward=0.0, passed=False, details={"failed": [str(exc)]})

    def _read_back(self, call: str) -> list[list[Any]]:
        """Run a driver call that leaves JSON entries in the session, then read them back in chunks."""
        code = self.driver_call(call)
        if code is None:
            raise SnapshotError(str(self.workspace_paths()))
        session = self._current_session()
        res = self.run_in_session(code, timeout=60.0)
        reply = last_json(res.stdout) if res.status == "ok" else None
        if self._lost and self._lost_infra:
            raise SnapshotError(f"the workspace was lost during the episode: {self._lost}")
        if self._lost:
            raise WorkspaceFailure(f"the commands lost the workspace during the episode: {self._lost}")
        if reply is None or "size" not in reply:
            if reply and "too_large" in reply:
                raise WorkspaceFailure(reply["too_large"])
            why = res.detail or res.stderr[-300:] or res.status
            raise SnapshotError(f"could not read the workspace: {why}")
        parts = []
        for start in range(0, int(reply["size"]), SNAPSHOT_CHUNK):
            part = session.run(f"_tg_chunk({start}, {SNAPSHOT_CHUNK})", timeout=60.0)
            if part.status != "ok" or part.session_reset or part.stdout_truncated:
                raise SnapshotError(f"could not read the workspace: {part.detail or part.status}")
            parts.append(part.stdout.removesuffix("\n"))
        try:
            return json.loads("".join(parts))["entries"]
        except (ValueError, KeyError, TypeError) as exc:
            raise SnapshotError(f"could not read the workspace: {exc}") from exc


_EMPTY = Task(id="", prompt="")
#: statuses of a session call whose session died of what its commands did (not the sandbox's failure)
_SESSION_DIED_OF_ITS_COMMANDS = ("killed", "memory", "output_limit", "timeout")
