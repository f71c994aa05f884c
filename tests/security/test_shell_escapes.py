"""Hostile shell commands against the bash tool (toolgym/Terminal-v0's tool) in its persistent workspace.

Each test asserts containment; the module's audit then asserts, after every test, that the tool's next call
works, that no process of the terminal sandbox is left beyond the live session interpreter and nothing was
planted on the host (``conftest.planted``). The session itself is a target too: a command must not be able to
end it, outlive the call, or reach the channel its results travel on.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from toolgym.core.task import Task
from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.local import wait_until
from toolgym.sandbox.shared import TERMINAL_LINKS
from toolgym.tools.bash import BashTool

from .conftest import HOST_DIRS, RED_LIMITS, planted

TASK = Task(id="t", prompt="", data={"files": {"data.txt": "payload\n"}})


@pytest.fixture(scope="module")
def tsb(secret):
    with LocalSandbox(limits=RED_LIMITS, workers=2, max_sessions=4, links=TERMINAL_LINKS) as box:
        yield box


@pytest.fixture(scope="module")
def secret():
    from .conftest import FAKE_SECRET

    saved = os.environ.get("OPENAI_API_KEY")
    os.environ["OPENAI_API_KEY"] = FAKE_SECRET
    yield FAKE_SECRET
    if saved is None:
        os.environ.pop("OPENAI_API_KEY", None)
    else:
        os.environ["OPENAI_API_KEY"] = saved


@pytest.fixture
def tool(tsb, marker):
    t = BashTool(sandbox=tsb, timeout=3, limits=RED_LIMITS)
    t.bind_task(TASK)
    t.start_episode("red")
    yield t
    # the session is closed whatever the checks find: a test that fails here must not hold its sandbox
    # session, or every later test waits for a slot (max_sessions) and fails with it
    try:
        after = sh(t, "cat data.txt; echo next call works")
        assert after.status == "ok" and after.output.endswith("next call works\n[exit code 0]"), after
        # a wait, not a speed bound: on a loaded machine the kernel reaps a fork bomb's debris slowly
        assert wait_until(lambda: not tsb.stray_processes(), timeout=60), tsb.stray_processes()
        (session,) = tsb.session_pids()
        assert _descendants(session) == [], "a process of the commands outlived its call"
    finally:
        t.close()
    assert not planted(marker), planted(marker)


def _descendants(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return fh.read().split()
    except OSError:
        return []


def sh(tool: BashTool, command: str):
    return tool.run(BashTool.Args(command=command))


def test_writing_outside_the_workspace(tool, marker):
    targets = " ".join(d for d in HOST_DIRS)
    res = sh(
        tool, f"for d in {targets}; do echo x > $d/{marker} 2>/dev/null && echo WROTE $d; done; echo end"
    )
    # /tmp and /dev/shm are the session's own tmpfs (the workspace lives in it), never the host's
    own = ("WROTE /tmp", "WROTE /dev/shm")
    assert [line for line in res.output.splitlines() if line.startswith("WROTE") and line not in own] == []
    res = sh(tool, f"echo x > /app/../../{marker}; echo x > ../{marker}; cp data.txt /usr/{marker}; echo $?")
    assert "Read-only file system" in res.output or "Permission denied" in res.output
    assert sh(tool, f"touch /usr/bin/{marker} /etc/{marker} 2>&1 | wc -l").output == "2\n[exit code 0]"


def test_reading_host_files_and_secrets(tool, secret):
    project = Path(__file__).resolve().parents[2]
    res = sh(
        tool,
        f"cat /etc/shadow; ls {project}/toolgym {project}/pyproject.toml; cat /root/.bash_history; "
        "env; cat /proc/1/environ /proc/$PPID/environ | tr '\\0' '\\n'",
    )
    assert secret not in res.output
    assert "root:x:" not in res.output and "[build-system]" not in res.output
    # each read fails, hidden (no such file) or refused (permission denied) as the setup allows: which one
    # depends on the machine (a host with /root/.bash_history refuses where another has none)
    for path in ("/etc/shadow", "/root/.bash_history"):
        assert f"cat: {path}: " in res.output, res.output
    assert "__init__.py" not in res.output and "envs" not in res.output.split()


def test_network(tool):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    try:
        res = sh(
            tool,
            f"(echo hi > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED-LOCAL; "
            "(echo hi > /dev/tcp/1.1.1.1/80) 2>/dev/null && echo CONNECTED-OUT; "
            "getent hosts example.com || echo no-dns; "
            "python3 -c 'import urllib.request as u; u.urlopen(\"http://example.com\", timeout=2)' 2>&1 "
            "| tail -1",
        )
        assert "CONNECTED" not in res.output and "no-dns" in res.output
        assert "URLError" in res.output, res.output
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()


def test_fork_bomb(tool, red_limits):
    res = sh(tool, ":(){ :|:& };: ; sleep 1; echo survived")
    assert res.status == "error" or "Resource temporarily unavailable" in res.output
    # more processes than the cap: fork fails (bash retries until the timeout); the audit finds none left
    res = sh(
        tool, f"for i in $(seq {red_limits.processes * 4}); do sleep 30 & done 2>&1 | tail -1; echo done"
    )
    assert "Resource temporarily unavailable" in res.output or "timed out" in res.output


def test_background_processes_do_not_outlive_the_call(tool, tsb):
    # durations no other process on the machine sleeps: without a pid namespace pgrep sees every process of
    # the host (other tests' sleeps included), so the count must name this test's own
    base = 30_000 + os.getpid() % 60_000
    res = sh(
        tool,
        f"sleep {base}0 & disown; (setsid sleep {base}1 &); nohup sleep {base}2 >/dev/null 2>&1 & "
        f"( trap '' TERM HUP; exec sleep {base}3 ) & "
        "python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        f"        time.sleep({base}4)' ; echo started",
    )
    assert res.output == "started\n[exit code 0]"
    counts = sh(tool, f"pgrep -fc 'sleep {base}[0-3]'; pgrep -fc 'time[.]sleep[(]{base}4'").output
    assert counts.startswith("0\n0\n"), counts
    (session,) = tsb.session_pids()
    assert _descendants(session) == []


def test_a_process_writing_to_a_file_after_the_call_is_stopped(tool):
    sh(tool, "(while true; do date +%s%N >> ticker; sleep 0.01; done) & sleep 0.1")
    size = sh(tool, "wc -c < ticker").output
    assert sh(tool, "sleep 0.3; wc -c < ticker").output == size  # nothing writes between calls


def test_raising_limits_back_fails(tool, red_limits):
    res = sh(
        tool,
        "ulimit -u unlimited; echo u=$?; ulimit -n 65536; echo n=$?; ulimit -t unlimited; echo t=$?; "
        "ulimit -v unlimited; echo v=$?; ulimit -u; ulimit -Hu",
    )
    lines = res.output.splitlines()
    for flag in ("u", "n", "t", "v"):
        assert f"{flag}=1" in lines, res.output
    soft, hard = lines[-3:-1]
    # soft == hard; without a uid of its own the cap counts the user's other processes on top
    assert soft == hard and int(soft) >= red_limits.processes, res.output


def test_symlinks_out_of_the_workspace(tool, marker, tsb):
    res = sh(
        tool,
        f"ln -s / rootlink; ln -s /etc etclink; ln -s /proc/1/root p1; ln -s /etc/shadow shadow; "
        f"echo x > etclink/{marker}; echo x > rootlink/usr/{marker}; cat shadow; ls p1/ >/dev/null; "
        f"ls rootlink/{Path(__file__).resolve().parents[2].name} 2>&1 | head -1; echo end",
    )
    assert "root:" not in res.output and res.output.rstrip().endswith("end\n[exit code 0]".rstrip())
    ws = tool.snapshot()  # links are read as links: the snapshot never reads what they point at
    assert ws.links == {"rootlink": "/", "etclink": "/etc", "p1": "/proc/1/root", "shadow": "/etc/shadow"}
    assert set(ws.files) == {"data.txt"}


def test_the_session_cannot_be_killed_or_its_channel_reached(tool, tsb):
    sh(tool, "echo kept > k")
    res = sh(
        tool,
        "ls -l /proc/$PPID/fd/ 2>&1 | head -2; echo forged > /proc/$PPID/fd/1; "
        "cat /proc/$PPID/mem 2>&1 | head -c 80; kill -9 1; kill -9 $PPID; kill -STOP $PPID; kill -9 -1",
    )
    assert res.status != "infra_error" and "forged" not in res.output
    alive = sh(tool, "cat k; echo alive")
    if "pid_namespace" in tsb.isolation.active:  # the session is pid 1 of its namespace: signals miss it
        assert alive.output == "kept\nalive\n[exit code 0]"
    else:  # no pid namespace: the commands can end their own session; that is their failure, not ours
        assert res.status == "error" and "session was stopped" in res.output
        assert alive.status == "ok" and "No such file" in alive.output and "note:" in alive.output


def test_filling_the_disk_and_flooding_output(tool, tsb):
    res = sh(tool, "head -c 100M /dev/zero > big; ls -la big | awk '{print $5}'; rm -f big")
    assert "File size limit exceeded" in res.output and "\n8388608\n" in res.output  # RLIMIT_FSIZE: 8 MiB
    res = sh(tool, "for i in 1 2 3 4 5 6; do head -c 7M /dev/zero > f$i || break; done 2>&1; sleep 1")
    if "fs_view" in tsb.isolation.active:
        assert "No space left on device" in res.output  # the session's tmpfs: 32 MiB
    else:  # a directory on the host, watched: the session is stopped, the commands' failure
        assert res.status == "error" and "session was stopped" in res.output
    sh(tool, "rm -f f*")
    res = sh(tool, "yes | head -c 50M")
    assert res.status == "ok" and len(res.output) < 20_000 and "cut" in res.output
