"""The ``str_replace_editor`` tool: view and edit files in the bash tool's workspace (SWE-v0, Terminal-v0).

Its arguments are the ones SWE-agent and OpenHands give their file editor, which agent models are trained on:
``command`` = ``view`` | ``create`` | ``str_replace`` | ``insert`` | ``undo_edit``, ``path``, ``file_text``,
``old_str``, ``new_str``, ``insert_line``, ``view_range``.

- ``view`` shows a file with ``cat -n`` line numbers (``view_range=[start, end]``, ``end`` -1 for the end of
  the file), or lists a directory two levels deep (hidden entries left out).
- ``create`` writes a new file (parents made); an existing file is an error (``str_replace`` edits it).
- ``str_replace`` replaces ``old_str`` with ``new_str`` (default: nothing) when ``old_str`` occurs exactly
  once; none or several occurrences are an error saying how many (and on which lines), the file untouched.
- ``insert`` puts ``new_str`` after line ``insert_line`` (0: at the top).
- ``undo_edit`` puts back the file as it was before its last edit (per file, as often as it was edited).

The editor works on the workspace of a ``BashTool`` (the env's own, so both see the same files), in that
tool's sandbox session: its code runs in the session's interpreter, which the model's commands cannot reach,
and every path is resolved there: absolute paths must lie under the workspace's path (``/testbed``), relative
ones are relative to it, and a path that leaves the workspace (``..``, an absolute path elsewhere, a
symbolic link pointing out of it) is refused. Without the sandbox's view (no ``/testbed`` link), paths
written with the workspace's path still reach the workspace. Output is cut in the middle past
``max_output_chars``, like bash's.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field

from toolgym.core.task import Task
from toolgym.core.types import ToolResult
from toolgym.sandbox.driver import define_once, last_json
from toolgym.tools.base import Tool, register_tool
from toolgym.tools.bash import MAX_OUTPUT_CHARS, BashTool
from toolgym.util.text import clip_middle

#: the lines shown around an edit (SWE-agent shows four on each side)
SNIPPET_LINES = 4

# Runs in the session's interpreter beside the shell driver (``ws`` is the workspace there).
EDITOR_DRIVER = r'''
_tg_history = {}

def _tg_numbered(text, first=1):
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(text.split("\n"), first))

def _tg_resolve(ws, shown, nominal, path):
    """(the file's path in the session, the path shown to the model), or raise ValueError. ``nominal``: the
    workspace's own path (/testbed), accepted even where the view is missing (``shown`` is "" there)."""
    where = shown or "the workspace"
    if not path:
        raise ValueError("path is empty")
    if path == nominal or path.startswith(nominal.rstrip("/") + "/"):
        rel = path[len(nominal):].lstrip("/")
    elif path.startswith("/"):
        raise ValueError(f"{path} is outside {where}: give a path under it")
    else:
        rel = path
    real_ws = _os.path.realpath(ws)
    full = _os.path.realpath(_os.path.join(real_ws, rel))
    if full != real_ws and not full.startswith(real_ws + "/"):
        raise ValueError(f"{path} is outside {where}")
    rel = _os.path.relpath(full, real_ws)
    if not shown:
        return full, rel
    return full, shown if rel == "." else shown.rstrip("/") + "/" + rel

def _tg_read(full):
    with open(full, "rb") as fh:
        data = fh.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("the file is not UTF-8 text; use bash to look at it") from None

def _tg_write(full, text):
    with open(full, "w", encoding="utf-8", newline="") as fh:
        fh.write(text)

def _tg_snippet(shown, text, line, added):
    lines = text.split("\n")
    start = max(line - 4, 0)
    end = min(line + added + 4, len(lines))
    body = _tg_numbered("\n".join(lines[start:end]), start + 1)
    return (
        f"The file {shown} has been edited. Here's the result of running `cat -n` on a snippet of {shown}:\n"
        f"{body}\nReview the changes and make sure they are as expected. Edit the file again if necessary."
    )

def _tg_listing(full, shown):
    out = [shown]
    base = "" if shown == "." else shown.rstrip("/") + "/"
    for name in sorted(_os.listdir(full)):
        if name.startswith("."):
            continue
        sub = _os.path.join(full, name)
        out.append(f"{base}{name}")
        if _os.path.isdir(sub) and not _os.path.islink(sub):
            try:
                inner = sorted(n for n in _os.listdir(sub) if not n.startswith("."))
            except OSError:
                inner = []
            out.extend(f"{base}{name}/{n}" for n in inner)
    head = f"Here's the files and directories up to 2 levels deep in {shown}, excluding hidden items:\n"
    return head + "\n".join(out)

def _tg_edit(ws, shown, nominal, args, cap):
    _tg_guard()
    try:
        key, text = "ok", _tg_edit_op(ws, shown, nominal, args)
    except (ValueError, OSError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc.strerror or exc}"
        key, text = "error", why
    if len(text) > cap:  # the reply must fit the session's output cap: keep the head and the tail
        text = text[: cap // 2] + f"\n... [{len(text) - cap:,} characters cut] ...\n" + text[-(cap // 2) :]
    print(_json.dumps({key: text}))

def _tg_edit_op(ws, shown, nominal, args):
    command = args["command"]
    full, name = _tg_resolve(ws, shown, nominal, args["path"])
    exists = _os.path.lexists(full)
    if command == "create":
        if exists:
            raise ValueError(
                f"File already exists at: {name}. Cannot overwrite files using command `create`."
            )
        if args.get("file_text") is None:
            raise ValueError("Parameter `file_text` is required for command: create")
        _os.makedirs(_os.path.dirname(full), exist_ok=True)
        _tg_write(full, args["file_text"])
        _tg_history.setdefault(full, []).append(None)
        return f"File created successfully at: {name}"
    if not exists:
        raise ValueError(f"The path {name} does not exist. Please provide a valid path.")
    if command == "view":
        if _os.path.isdir(full):
            if args.get("view_range"):
                raise ValueError(
                    "The `view_range` parameter is not allowed when `path` points to a directory."
                )
            return _tg_listing(full, name)
        text = _tg_read(full)
        first = 1
        view_range = args.get("view_range")
        if view_range:
            lines = text.split("\n")
            if len(view_range) != 2:
                raise ValueError("`view_range` should be a list of two integers.")
            start, end = view_range
            if not 1 <= start <= len(lines):
                raise ValueError(
                    f"Invalid `view_range`: {view_range}. Its first element `{start}` should be within "
                    f"the range of lines of the file: [1, {len(lines)}]"
                )
            if end != -1 and not start <= end <= len(lines):
                raise ValueError(
                    f"Invalid `view_range`: {view_range}. Its second element `{end}` should be -1 or "
                    f"between `{start}` and the number of lines of the file: {len(lines)}"
                )
            text = "\n".join(lines[start - 1 :] if end == -1 else lines[start - 1 : end])
            first = start
        return f"Here's the result of running `cat -n` on {name}:\n" + _tg_numbered(text, first)
    if _os.path.isdir(full):
        raise ValueError(f"{name} is a directory: only `view` works on a directory")
    text = _tg_read(full)
    if command == "str_replace":
        old, new = args.get("old_str"), args.get("new_str") or ""
        if old is None:
            raise ValueError("Parameter `old_str` is required for command: str_replace")
        count = text.count(old)
        if count == 0:
            raise ValueError(
                f"No replacement was performed, old_str `{old}` did not appear verbatim in {name}."
            )
        if count > 1:
            lines = sorted({text[: i].count("\n") + 1 for i in _tg_find_all(text, old)})
            raise ValueError(
                f"No replacement was performed. Multiple occurrences ({count}) of old_str `{old}` in "
                f"lines {lines}. Please ensure it is unique"
            )
        at = text.index(old)
        _tg_history.setdefault(full, []).append(text)
        edited = text.replace(old, new, 1)
        _tg_write(full, edited)
        return _tg_snippet(name, edited, text[:at].count("\n"), new.count("\n"))
    if command == "insert":
        line, new = args.get("insert_line"), args.get("new_str")
        if line is None or new is None:
            raise ValueError("Parameters `insert_line` and `new_str` are required for command: insert")
        lines = text.split("\n")
        if not 0 <= line <= len(lines):
            raise ValueError(
                f"Invalid `insert_line` parameter: {line}. It should be within the range of lines of the "
                f"file: [0, {len(lines)}]"
            )
        _tg_history.setdefault(full, []).append(text)
        edited = "\n".join(lines[:line] + new.split("\n") + lines[line:])
        _tg_write(full, edited)
        return _tg_snippet(name, edited, line, new.count("\n") + 1)
    if command == "undo_edit":
        history = _tg_history.get(full)
        if not history:
            raise ValueError(f"No edit history found for {name}.")
        before = history.pop()
        if before is None:  # undoing its creation
            _os.remove(full)
            return f"Last edit to {name} undone successfully: the file it created is removed."
        _tg_write(full, before)
        head = f"Last edit to {name} undone successfully. Here's the result of running `cat -n` on {name}:\n"
        return head + _tg_numbered(before)
    raise ValueError(
        f"Unrecognized command {command}. The allowed commands are: view, create, str_replace, insert, "
        "undo_edit"
    )

def _tg_find_all(text, sub):
    at = text.find(sub)
    while at >= 0:
        yield at
        at = text.find(sub, at + 1)
'''

_DEFINE_EDITOR = define_once(EDITOR_DRIVER, "<editor-driver>", "_tg_edit")


@register_tool
class EditorTool(Tool):
    """Views and edits files in a bash tool's workspace (see the module docstring)."""

    name = "str_replace_editor"
    description = (
        "View, create and edit files in the workspace. `view` shows a file with line numbers (or a "
        "directory's files two levels deep); `create` writes a new file; `str_replace` replaces `old_str` "
        "by `new_str` when `old_str` occurs exactly once in the file (include enough context to make it "
        "unique); `insert` adds `new_str` after line `insert_line`; `undo_edit` reverts the file's last edit."
    )

    class Args(BaseModel):
        command: Literal["view", "create", "str_replace", "insert", "undo_edit"] = Field(
            description="The command to run: view, create, str_replace, insert or undo_edit."
        )
        path: str = Field(description="Path of the file or directory, e.g. /testbed/pkg/module.py.")
        file_text: str | None = Field(default=None, description="`create`: the new file's content.")
        old_str: str | None = Field(default=None, description="`str_replace`: the exact text to replace.")
        new_str: str | None = Field(
            default=None, description="`str_replace`: the replacement (default: none); `insert`: the text."
        )
        insert_line: int | None = Field(
            default=None, description="`insert`: the line after which `new_str` goes (0: at the top)."
        )
        view_range: list[int] | None = Field(
            default=None, description="`view`: [start, end] lines of a file to show (end -1: to the end)."
        )

    def __init__(self, bash: BashTool | None = None, max_output_chars: int = MAX_OUTPUT_CHARS):
        """``bash``: the tool whose workspace this edits (an env passes its own). Without one the editor keeps
        a workspace of its own (a ``BashTool`` it starts and ends with the episode)."""
        self._owns_bash = bash is None
        self.bash = bash if bash is not None else BashTool()
        self.max_output_chars = max_output_chars

    # the episode is the bash tool's: forwarded only to a bash tool of the editor's own
    def bind_task(self, task: Task) -> None:
        if self._owns_bash:
            self.bash.bind_task(task)

    def start_episode(self, episode_id: str) -> None:
        if self._owns_bash:
            self.bash.start_episode(episode_id)

    def end_episode(self, episode_id: str) -> None:
        if self._owns_bash:
            self.bash.end_episode(episode_id)

    def close(self) -> None:
        if self._owns_bash:
            self.bash.close()

    def run(self, args: Args) -> ToolResult:
        fields: dict[str, Any] = args.model_dump()
        if "\x00" in json.dumps(fields):
            return ToolResult(name=self.name, status="error", output="the arguments contain a NUL byte")
        paths = self.bash.workspace_paths()
        # where the view shows the workspace at its path, paths are shown so; else relative to it
        shown = paths[1] if not isinstance(paths, str) and paths[1].startswith("/") else ""
        nominal = self.bash.workspace_path
        call = f"_tg_edit(ws, {shown!r}, {nominal!r}, {fields!r}, {self.max_output_chars * 2})"
        code = None if isinstance(paths, str) else self.bash.driver_call(call, define=_DEFINE_EDITOR)
        if code is None:
            return ToolResult(name=self.name, status="infra_error", output=f"[sandbox error: {paths}]")
        res = self.bash.run_in_session(code, timeout=60.0)
        reply = last_json(res.stdout) if res.status == "ok" else None
        meta = {"exec_status": res.status, "wait_s": round(res.session_wait_s, 3)}
        if not isinstance(reply, dict):
            why = res.detail or res.stderr[-300:] or res.status
            status = "infra_error" if res.status == "sandbox_error" or res.infra_reset else "error"
            return ToolResult(name=self.name, status=status, output=f"[sandbox error: {why}]", metadata=meta)
        note = f"[note: {res.detail}]\n" if res.session_reset else ""
        if "error" in reply:
            return ToolResult(
                name=self.name,
                status="error",
                output=note + clip_middle(reply["error"], self.max_output_chars),
            )
        status = "infra_error" if res.infra_reset else "ok"
        output = note + clip_middle(reply["ok"], self.max_output_chars)
        return ToolResult(name=self.name, status=status, output=output, metadata=meta)
