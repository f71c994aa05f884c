"""Stateful sessions: state persists without replaying history, resets are announced (and say when the loss
was the sandbox's doing), and a live session is never evicted for room: capacity, waits, idle slots."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest

from toolgym.sandbox import LocalSandbox, SessionSlots
from toolgym.sandbox.capacity import DEFAULT_SESSIONS, MAX_SESSIONS
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


def test_a_live_session_is_never_evicted_for_room(make_sandbox):
    """Over capacity a new session waits, then its call is a sandbox error (infra); the live ones keep
    their state whatever the order of calls (round-robin used to evict the one about to be used)."""
    with make_sandbox(max_sessions=3, session_wait_s=0.3) as box:
        live = [box.session() for _ in range(3)]
        for i, sess in enumerate(live):
            assert sess.run(f"v = {i}").ok
        late = box.session()
        refused = late.run("v = 3")
        assert refused.status == "sandbox_error" and "no session slot came free" in refused.detail
        assert refused.session_wait_s >= 0.3 and box.slots.stats["refused"] == 1
        for _round in range(2):
            assert [sess.run("print(v)").stdout for sess in live] == ["0\n", "1\n", "2\n"]
        live[1].close()  # an episode ends: its slot is free
        assert late.run("v = 3").ok and late.run("print(v)").stdout == "3\n"
        assert box.live_sessions == 3
        for sess in (live[0], live[2], late):
            sess.close()
        assert box.live_sessions == 0 and box.slots.held == 0


def test_a_waiting_session_takes_the_slot_an_ending_episode_frees(make_sandbox):
    with make_sandbox(max_sessions=1, session_wait_s=30) as box:
        first, second = box.session(), box.session()
        first.run("a = 1")
        result = {}
        waiter = threading.Thread(target=lambda: result.update(res=second.run("print('in')")))
        waiter.start()
        time.sleep(0.2)  # the waiter is blocked on the full table
        assert waiter.is_alive() and first.run("print(a)").stdout == "1\n"
        first.close()
        waiter.join(30)
        res = result["res"]
        assert res.ok and res.stdout == "in\n" and res.session_wait_s >= 0.2
        assert box.slots.stats["waits"] == 1
        second.close()


def test_async_waiters_hold_no_sandbox_worker(make_sandbox):
    """An ``arun`` waiting for a slot must not sit on one of the ``workers``: the sessions that hold the
    slots keep running (on one worker here), so the episode that frees a slot can get there."""
    with make_sandbox(workers=1, max_sessions=1, session_wait_s=30) as box:

        async def main():
            holder, waiter = box.session(), box.session()
            await holder.arun("x = 5")
            waiting = asyncio.create_task(waiter.arun("print('late')"))
            await asyncio.sleep(0.2)
            assert not waiting.done()
            assert (await holder.arun("print(x)")).stdout == "5\n"  # the one worker is free
            holder.close()
            res = await waiting
            waiter.close()
            return res

        res = asyncio.run(main())
        assert res.ok and res.stdout == "late\n" and res.session_wait_s >= 0.2


def test_an_idle_session_gives_its_slot_away_and_its_loss_is_infra(make_sandbox):
    with make_sandbox(max_sessions=1, session_wait_s=5, session_idle_s=0.2) as box:
        abandoned, newcomer = box.session(), box.session()
        abandoned.run("v = 1")
        time.sleep(0.3)
        assert newcomer.run("print('room')").stdout == "room\n"
        assert box.slots.stats["reclaimed_idle"] == 1
        newcomer.close()
        back = abandoned.run("print(v)")
        assert back.session_reset and back.infra_reset and "idle" in back.detail
        assert "NameError" in back.stderr
        abandoned.close()


def test_a_sandbox_restart_is_an_infra_loss(fresh_sb):
    sess = fresh_sb.session()
    sess.run("v = 1")
    fresh_sb.restart_workers()
    res = sess.run("print('after')")
    assert res.ok and res.session_reset and res.infra_reset and "restarted" in res.detail
    assert not sess.run("print('again')").infra_reset  # reported once
    sess.close()


def test_transient_sessions_take_no_slot(make_sandbox):
    with make_sandbox(max_sessions=1, session_wait_s=0.1) as box:
        episode = box.session()
        episode.run("v = 1")
        verifier = box.session(transient=True)  # the code verifier's: bounded by its caller
        assert verifier.run("print(2)").stdout == "2\n" and box.live_sessions == 2
        assert box.slots.held == 1
        verifier.close()
        episode.close()


def test_capacity_follows_reservations_unless_fixed():
    slots = SessionSlots()
    assert slots.capacity == DEFAULT_SESSIONS
    with slots.reserve(100), slots.reserve(56):
        assert slots.capacity == 156
    assert slots.capacity == DEFAULT_SESSIONS
    big = slots.reserve(5000)
    assert slots.capacity == MAX_SESSIONS
    big.release()
    big.release()  # twice: a no-op
    assert slots.capacity == DEFAULT_SESSIONS
    fixed = SessionSlots(8)
    with fixed.reserve(100):
        assert fixed.capacity == 8
    for bad in (0, 5000, 2.0, True):
        with pytest.raises(ValueError, match="max_sessions"):
            SessionSlots(bad)
    with pytest.raises(ValueError, match="give max_sessions or slots"):
        LocalSandbox(max_sessions=2, slots=slots)


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
