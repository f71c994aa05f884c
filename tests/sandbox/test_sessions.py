"""Stateful sessions: state persists without replaying history, resets are announced, LRU eviction."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from toolgym.sandbox.local import wait_until

pytestmark = pytest.mark.usefixtures("no_strays")


def test_state_persists_across_calls(sb):
    with sb.session() as sess:
        assert sess.run("x = 1\nimport math").status == "ok"
        res = sess.run("x += 1\nprint(x, math.pi > 3)")
        assert res.status == "ok" and res.stdout == "2 True\n"
        assert not res.session_reset


def test_history_is_not_replayed(sb):
    with sb.session() as sess:
        sess.run("print('side effect')\ncounter = 0")
        res = sess.run("counter += 1\nprint(counter)")
        assert res.stdout == "1\n"  # the first snippet's print did not run again


def test_per_call_output_and_errors(sb):
    with sb.session() as sess:
        res = sess.run("def f():\n    return 1 / 0\nf()")
        assert res.status == "error" and "ZeroDivisionError" in res.stderr
        assert "<cell 1>" in res.stderr and "return 1 / 0" in res.stderr
        ok = sess.run("print('still here')")
        assert ok.status == "ok" and ok.stdout == "still here\n" and ok.stderr == ""
        assert sess.run("import sys; sys.exit(4)").exit_code == 4
        assert sess.run("print(f.__name__)").stdout == "f\n"  # SystemExit did not end the session


def test_session_stdin(sb):
    with sb.session() as sess:
        assert sess.run("print(input()[::-1])", stdin="abc").stdout == "cba\n"


def test_session_files(sb):
    with sb.session(files={"data.csv": "a,b\n1,2\n"}) as sess:
        assert sess.run("print(open('data.csv').read().splitlines()[1])").stdout == "1,2\n"


def test_timeout_kills_session_and_next_call_says_reset(sb):
    with sb.session() as sess:
        sess.run("important = 42")
        res = sess.run("import time\nprint('partial', flush=True)\ntime.sleep(30)", timeout=0.5)
        assert res.status == "timeout" and res.stdout == "partial\n" and "state is lost" in res.detail
        assert res.detail.startswith("wall-clock limit of 0.5 s exceeded")  # this call's limit, not the 5 s
        nxt = sess.run("print(important)")
        assert nxt.session_reset and "reset" in nxt.detail
        assert nxt.status == "error" and "NameError" in nxt.stderr
        again = sess.run("important = 1\nprint(important)")
        assert again.status == "ok" and not again.session_reset


def test_crash_is_reported_and_session_recovers(sb):
    with sb.session() as sess:
        res = sess.run("import os; os._exit(9)")
        assert res.status == "killed" and "died" in res.detail
        nxt = sess.run("print('fresh')")
        assert nxt.ok and nxt.session_reset and nxt.stdout == "fresh\n"


def test_session_output_flood(sb):
    limits = sb.limits.model_copy(update={"max_output_total_bytes": 1 << 20})
    with sb.session(limits=limits) as sess:
        res = sess.run("import sys\nwhile True: sys.stdout.write('q' * 4096)")
        assert res.status == "output_limit" and res.stdout_truncated


def test_session_memory_error_keeps_state(sb):
    with sb.session() as sess:
        sess.run("keep = 'yes'")
        res = sess.run("x = bytearray(900 * 1024 * 1024)")
        assert res.status == "memory"
        assert sess.run("print(keep)").stdout == "yes\n"


def test_process_killed_between_calls_is_detected(sb):
    with sb.session() as sess:
        sess.run("a = 1")
        (pid,) = [p for p in sb.session_pids() if p == sess._proc.host_pid]
        os.kill(pid, signal.SIGKILL)
        assert wait_until(sess._proc.exited)
        res = sess.run("print('after')")
        assert res.ok and res.session_reset and "between calls" in res.detail


def test_lru_eviction(fresh_sb):
    sessions = [fresh_sb.session() for _ in range(4)]  # max_sessions=3
    for i, sess in enumerate(sessions[:3]):
        assert sess.run(f"v = {i}").ok
    assert fresh_sb.live_sessions == 3
    assert sessions[0].run("print(v)").stdout == "0\n"  # touch 0: now 1 is least recently used
    sessions[3].run("v = 3")  # needs room: evicts session 1
    assert fresh_sb.live_sessions == 3
    evicted = sessions[1].run("print(v)")
    assert evicted.session_reset and "evicted" in evicted.detail and "NameError" in evicted.stderr
    # bringing 1 back evicted the then least recently used (2); 0 and 3 kept their state
    assert sessions[0].run("print(v)").stdout == "0\n"
    assert sessions[3].run("print(v)").stdout == "3\n"
    for sess in sessions:
        sess.close()
    assert fresh_sb.live_sessions == 0
    assert wait_until(lambda: not fresh_sb.stray_processes())


def test_closed_session_refuses_and_sandbox_close_kills_sessions(fresh_sb):
    sess = fresh_sb.session()
    sess.run("import subprocess; subprocess.Popen(['sleep', '60'])")
    pids = fresh_sb.session_pids()
    assert len(pids) == 1
    sess.close()
    with pytest.raises(RuntimeError):
        sess.run("1")
    other = fresh_sb.session()
    other.run("x = 1")
    fresh_sb.close()
    assert wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in pids))
    assert fresh_sb.live_sessions == 0


def test_async_sessions(sb):
    async def main():
        sessions = [sb.session() for _ in range(4)]
        await asyncio.gather(*(s.arun(f"n = {i}") for i, s in enumerate(sessions)))
        results = await asyncio.gather(*(s.arun("print(n * 10)") for s in sessions))
        for s in sessions:
            s.close()
        return [r.stdout for r in results]

    assert asyncio.run(main()) == ["0\n", "10\n", "20\n", "30\n"]


def test_endless_background_writer_does_not_hang_the_caller(sb):
    with sb.session() as sess:
        res = sess.run(
            "import sys, threading\n"
            "def spam():\n    while True:\n        sys.stdout.write('x' * 1000)\n"
            "threading.Thread(target=spam, daemon=True).start()\nprint('started')"
        )
        # the call ends with the program's own outcome: waiting for the writer would end in "timeout"
        assert res.status in ("ok", "output_limit"), res.detail
        nxt = sess.run("print('next')")
        assert nxt.status in ("ok", "output_limit")


def test_session_memory_over_many_processes_kills_the_session(sb):
    limits = sb.limits.model_copy(update={"memory_bytes": 300 * 1024**2})
    with sb.session(limits=limits) as sess:
        sess.run(
            "import os, time\n"
            "for _ in range(4):\n"
            "    if os.fork() == 0:\n"
            "        block = bytearray(200 * 1024 * 1024)\n"
            "        time.sleep(60)"
        )
        (pid,) = sb.session_pids()
        assert wait_until(lambda: not os.path.exists(f"/proc/{pid}"), timeout=10)
        res = sess.run("print('after')")
        assert res.ok and res.session_reset
