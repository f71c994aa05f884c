"""The bash tool: a per-episode workspace that persists across calls and not across episodes, merged and
capped output with the exit code, timeouts that kill the whole tree and leave the workspace, and loud
refusals where the sandbox cannot hold the workspace."""

from __future__ import annotations

import asyncio

import pytest

from toolgym.core.task import Task
from toolgym.core.types import ToolCall
from toolgym.sandbox import IsolationReport, LocalSandbox
from toolgym.sandbox.limits import MiB
from toolgym.sandbox.local import wait_until
from toolgym.sandbox.shared import TERMINAL_LINKS
from toolgym.tools.base import make_tool
from toolgym.tools.bash import TERMINAL_LIMITS, BashTool, SnapshotError, WorkspaceFailure

TASK = Task(id="t", prompt="", data={"files": {"notes.txt": "alpha\nbeta\n", "src/a.py": "print(1)\n"}})


@pytest.fixture(scope="module")
def sb():
    with LocalSandbox(workers=2, links=TERMINAL_LINKS, max_sessions=8) as box:
        yield box


@pytest.fixture
def tool(sb):
    t = BashTool(sandbox=sb, timeout=3)
    t.bind_task(TASK)
    t.start_episode("e1")
    yield t
    t.close()


def sh(tool: BashTool, command: str):
    return tool.run(BashTool.Args(command=command))


def test_registered_by_name():
    assert isinstance(make_tool("bash"), BashTool)


def test_files_persist_within_an_episode_and_not_across(tool):
    first = sh(tool, "cat notes.txt; echo gamma >> notes.txt; mkdir out && echo 42 > out/x; rm src/a.py")
    assert first.status == "ok" and first.output == "alpha\nbeta\n[exit code 0]"
    again = sh(tool, "cat notes.txt out/x; ls src | wc -l")
    assert again.output == "alpha\nbeta\ngamma\n42\n0\n[exit code 0]"
    tool.end_episode("e1")
    tool.bind_task(TASK)
    tool.start_episode("e2")  # a fresh copy of the task's files, nothing of the last episode
    fresh = sh(tool, "cat notes.txt; ls; ls out 2>&1")
    assert fresh.status == "error"
    assert fresh.output.startswith("alpha\nbeta\nnotes.txt\nsrc\nls: cannot access 'out'")
    assert fresh.output.endswith("[exit code 2]")


def test_the_workspace_is_at_app_and_each_call_starts_there(tool):
    assert sh(tool, "pwd; cd src; pwd").output == "/app\n/app/src\n[exit code 0]"
    assert sh(tool, "pwd; cat /app/notes.txt | wc -l").output == "/app\n2\n[exit code 0]"


def test_output_is_merged_and_the_exit_code_shown(tool):
    res = sh(tool, "echo out; echo err >&2; exit 7")
    assert res.status == "error" and res.output == "out\nerr\n[exit code 7]"
    assert res.metadata["exit_code"] == 7
    assert sh(tool, "true").output == "[exit code 0]"
    assert sh(tool, "kill -SEGV $$").output == "[killed by signal 11]"


def test_long_output_keeps_head_and_tail(sb):
    tool = BashTool(sandbox=sb, max_output_chars=2000)
    try:
        res = sh(tool, "seq 1 200000")
        assert res.output.startswith("1\n2\n3\n") and res.output.endswith("199999\n200000\n[exit code 0]")
        assert "cut]" in res.output and len(res.output) < 2100
    finally:
        tool.close()


def test_a_timeout_kills_the_tree_and_keeps_the_workspace(tool, sb):
    sh(tool, "echo kept > k")
    res = sh(tool, "echo started; (sleep 600 &); sleep 600")
    assert res.status == "error"
    assert res.output == "started\n[timed out after 3 s; every process it started was killed]"
    after = sh(tool, "cat k; pgrep -c sleep")
    assert after.output == "kept\n0\n[exit code 1]"  # pgrep finds nothing
    assert not sb.stray_processes()


def test_background_processes_do_not_outlive_the_call(tool, sb):
    res = sh(tool, "sleep 600 & (setsid sleep 601 &) ; nohup sleep 602 >/dev/null 2>&1 & echo started")
    assert res.output == "started\n[exit code 0]"
    left = sh(tool, "ps -eo comm= | sort | uniq -c | awk '$2==\"sleep\"' | wc -l")
    assert left.output == "0\n[exit code 0]"
    (session_pid,) = sb.session_pids()
    assert wait_until(lambda: not _host_children(session_pid))


def _host_children(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return fh.read().split()
    except OSError:
        return []


def test_the_command_cannot_kill_its_session(tool):
    sh(tool, "echo kept > k")
    sh(tool, "kill -9 1 $PPID; kill -KILL -1")
    res = sh(tool, "cat k")
    assert res.status == "ok" and res.output == "kept\n[exit code 0]"


def test_snapshot_reads_files_modes_and_links_as_data(tool):
    sh(tool, "chmod 600 notes.txt; ln -s /etc/passwd pw; mkdir -p d/e; printf 'x' > d/e/f; chmod +x src/a.py")
    ws = tool.snapshot()
    assert ws.files["notes.txt"] == b"alpha\nbeta\n" and ws.modes["notes.txt"] == 0o600
    assert ws.links == {"pw": "/etc/passwd"} and "pw" not in ws.files  # never followed
    assert ws.files["d/e/f"] == b"x" and {"d", "d/e", "src"} <= ws.dirs
    assert ws.modes["src/a.py"] & 0o100


def test_nul_bytes_are_the_models_error(tool):
    res = sh(tool, "echo a\x00b")
    assert res.status == "error" and "NUL" in res.output
    assert sh(tool, "echo fine").status == "ok"


def test_async_calls(tool):
    res = asyncio.run(tool.acall(ToolCall(name="bash", arguments={"command": "echo hi > h; cat h"})))
    assert res.output == "hi\n[exit code 0]"


def test_a_lost_session_is_an_infra_error_and_the_snapshot_refuses(tool):
    sh(tool, "echo x > y")
    tool._session.evict("test: the sandbox restarted", infra=True)
    res = sh(tool, "cat y 2>&1")  # the next call runs on a fresh copy and says the state was lost
    assert res.status == "infra_error" and "note:" in res.output and "No such file" in res.output
    with pytest.raises(SnapshotError, match="lost"):  # the final workspace is not the episode's own
        tool.snapshot()
    tool._session.evict("test: again", infra=True)
    with pytest.raises(SnapshotError, match="lost"):
        tool.snapshot()


def test_without_the_read_only_view_the_tool_works_or_refuses_loudly():
    """fs_view off (a container without CAP_SYS_ADMIN): a task that names /app is refused with the reason;
    otherwise the workspace is the session's own directory, or (where children read files as uid 0 because
    the interpreter lies under a closed directory, as on a root test machine with pyenv in /root) refused."""
    with LocalSandbox(workers=1, disable=("fs_view",), links=TERMINAL_LINKS, max_sessions=2) as box:
        assert "fs_view" not in box.isolation.active
        tool = BashTool(sandbox=box, timeout=3)
        try:
            tool.bind_task(TASK.model_copy(update={"data": {**TASK.data, "requires_path": True}}))
            tool.start_episode("a")
            refused = sh(tool, "pwd")
            assert refused.status == "infra_error" and "sandbox error" in refused.output
            tool.bind_task(TASK)
            tool.start_episode("b")
            res = sh(tool, "echo more >> notes.txt; cat notes.txt")
            if "file access as uid 0" in box.isolation.details.get("unprivileged_user", ""):
                assert res.status == "infra_error" and "could not write the workspace" in res.output
                with pytest.raises(SnapshotError):
                    tool.snapshot()
            else:
                assert res.output == "alpha\nbeta\nmore\n[exit code 0]"
                assert tool.snapshot().files["notes.txt"] == b"alpha\nbeta\nmore\n"
        finally:
            tool.close()


def test_another_backend_is_refused_not_shared():
    """e2b's sessions share one working directory in one microVM: the tool refuses it rather than let two
    episodes see each other's workspace."""

    class Remote:
        isolation = IsolationReport(backend="e2b", active=("microvm",))

    tool = BashTool(sandbox=Remote())  # type: ignore[arg-type]
    res = sh(tool, "ls")
    assert res.status == "infra_error" and "local sandbox only" in res.output
    with pytest.raises(SnapshotError, match="local sandbox only"):
        tool.snapshot()


def test_a_session_its_commands_blew_up_is_their_failure_not_ours(sb):
    """The process tree over the session's memory limit: the fork server stops the session. The call is an
    ``error`` (the model's), the workspace is gone, and judging it is a failure, not a verifier error."""
    tool = BashTool(
        sandbox=sb, timeout=20, limits=TERMINAL_LIMITS.model_copy(update={"memory_bytes": 256 * MiB})
    )
    tool.bind_task(TASK)
    try:
        sh(tool, "echo kept > k")
        hog = "python3 -c 'import time; b = bytearray(200 * 1024 * 1024); time.sleep(20)'"
        res = sh(tool, f"{hog} & {hog} & {hog} & wait")
        assert res.status == "error" and "session was stopped" in res.output
        after = sh(tool, "cat k 2>&1; cat notes.txt")  # a fresh copy of the task's files, and a note
        assert after.status == "ok" and "note:" in after.output and "No such file" in after.output
        with pytest.raises(WorkspaceFailure, match="the commands lost the workspace"):
            tool.snapshot()
    finally:
        tool.close()
