"""WorkerPool: results, soft and hard deadlines, crashes, and that a hung worker never blocks later calls."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from toolgym.rewards.worker_pool import PoolUnavailable, WorkerCrashed, WorkerPool, WorkerTimeout

TARGETS = "toolgym.testing.worker_pool_targets"


@pytest.fixture
def pool_factory():
    pools: list[WorkerPool] = []

    def make(function: str, size: int = 1, **kwargs) -> WorkerPool:
        pool = WorkerPool(f"{TARGETS}:{function}", size=size, **kwargs)
        pools.append(pool)
        assert pool.wait_ready(30), pool.last_start_error
        return pool

    yield make
    for pool in pools:
        pool.close()


def test_results_round_trip(pool_factory):
    pool = pool_factory("echo")
    payload = {"text": "é\n\\boxed{1}", "n": [1, 2.5, None, True]}
    assert pool.call(payload, timeout=5) == payload


def test_a_python_level_timeout_retires_the_worker(pool_factory):
    """The soft alarm may interrupt a worker half-way through updating shared state (a parser's cache, an
    import): that worker never serves again, a fresh one does."""
    # a soft alarm well before the hard deadline, so a busy machine has time to report it
    pool = pool_factory("sleep_then_pid", soft_fraction=0.25)
    first = pool.call(0, timeout=5)
    # the soft alarm, at 0.25 x the timeout passed to this call, ended the 10 s sleep
    with pytest.raises(WorkerTimeout, match=r"^timed out after 0\.5s$"):
        pool.call(10, timeout=2.0)
    assert pool.stats["soft_timeouts"] == 1 and pool.stats["retired"] == 1 and pool.stats["killed"] == 0
    assert pool.call(0, timeout=5) != first
    assert pool.stats["started"] == 2 and not _alive(first)


def test_a_swallowed_soft_timeout_is_still_a_timeout(pool_factory):
    """Code that catches everything cannot turn a late result into a judgement: the alarm fired."""
    pool = pool_factory("swallow", soft_fraction=0.25)
    with pytest.raises(WorkerTimeout, match=r"^timed out after 0\.5s$"):
        pool.call(1.0, timeout=2.0)  # soft alarm at 0.5 s is swallowed; the call returns at 1 s, before 2 s
    assert pool.stats["killed"] == 0 and pool.stats["soft_timeouts"] == 1 and pool.stats["retired"] == 1


def test_a_worker_stuck_in_c_is_killed_at_the_hard_deadline_and_replaced(pool_factory):
    pool = pool_factory("spin_in_c")
    (stuck,) = pool._idle
    with pytest.raises(WorkerTimeout, match=r"^timed out after 1s \(the worker was killed\)$"):
        pool.call(10**9, timeout=1.0)
    assert stuck.proc.poll() is not None and not _alive(stuck.proc.pid)  # killed and reaped: gone
    assert pool.stats["killed"] == 1
    assert len(pool.call(1000, timeout=10)) == 64  # the replacement works
    assert pool.stats["started"] == 2


def test_a_hung_worker_does_not_block_other_calls(pool_factory):
    """With two workers, one stuck for the whole hard timeout, other calls keep flowing through the other."""
    pool = pool_factory("spin_in_c", size=2)
    outcome: list[BaseException] = []

    def hang() -> None:
        try:
            pool.call(10**9, timeout=3.0)
        except WorkerTimeout as exc:
            outcome.append(exc)

    hung = threading.Thread(target=hang)
    hung.start()
    time.sleep(0.2)
    for _ in range(20):
        assert len(pool.call(100, timeout=2.0)) == 64
    assert hung.is_alive()  # all twenty were served while the hung call was still waiting for its deadline
    hung.join()
    assert len(outcome) == 1 and pool.stats["killed"] == 1


def test_errors_and_crashes_are_reported(pool_factory):
    pool = pool_factory("fail")
    with pytest.raises(WorkerCrashed, match="ValueError: boom"):
        pool.call("boom", timeout=5)
    assert pool.stats["killed"] == 0  # an exception is the function's, the worker is fine
    crashing = pool_factory("crash")
    with pytest.raises(WorkerCrashed, match="exited"):
        crashing.call(3, timeout=5)
    assert crashing.stats["killed"] == 1


def test_works_with_descriptors_above_1024(pool_factory):
    """A busy server holds thousands of sockets, so a replacement worker's pipes get high descriptors."""
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        for _ in range(3):  # another thread of this process may free a low descriptor meanwhile: fill it
            pool = pool_factory("echo")
            if pool._idle[0].proc.stdout.fileno() > 1024:
                break
            pool.close()
            held += [os.open(os.devnull, os.O_RDONLY) for _ in range(64)]
        assert pool._idle[0].proc.stdout.fileno() > 1024
        assert pool.call("ok", timeout=5) == "ok"
    finally:
        for fd in held:
            os.close(fd)


def test_a_target_that_cannot_load_makes_the_pool_unavailable():
    pool = WorkerPool("toolgym.no_such_module:fn", size=1)
    with pytest.raises(PoolUnavailable, match="no_such_module"):
        pool.call(1, timeout=1, wait_timeout=30)
    pool.close()


def test_many_threads_share_a_small_pool(pool_factory):
    # each call holds its worker a moment and the threads start together, so calls overlap and both workers
    # serve: with instant calls on a loaded machine the threads ran one after another, and the pool (which
    # hands out the worker released last) served all 200 from one (a CI run of the core suite, 11-28)
    pool = pool_factory("sleep_then_pid", size=2)
    with_threads: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(8)

    def work():
        start.wait()
        for _ in range(25):
            pid = pool.call(0.01, timeout=5)
            with lock:
                with_threads.append(pid)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(with_threads) == 200 and len(set(with_threads)) == 2
    assert pool.stats["calls"] == 200


def test_bad_arguments():
    with pytest.raises(ValueError):
        WorkerPool(f"{TARGETS}:echo", size=0)
    pool = WorkerPool(f"{TARGETS}:echo", size=1)
    with pytest.raises(ValueError):
        pool.call(1, timeout=0)
    pool.close()
    with pytest.raises(PoolUnavailable, match="closed"):
        pool.call(1, timeout=1)


ORPHAN = textwrap.dedent(
    """
    import os, sys, threading, time
    from toolgym.rewards.worker_pool import WorkerPool
    pool = WorkerPool("toolgym.testing.worker_pool_targets:spin_in_c", size=1)
    assert pool.wait_ready(30)
    print(pool._idle[0].proc.pid, flush=True)
    threading.Thread(target=pool.call, args=(10**9,), kwargs={"timeout": 1.0}, daemon=True).start()
    time.sleep(0.3)
    os._exit(0)  # the caller dies mid-call: nobody is left to kill the worker
    """
)


def test_an_orphaned_worker_is_ended_by_its_cpu_limit():
    """The worker's RLIMIT_CPU is its CPU time so far plus the call's 1 s, rounded up, plus 2 s: it ends after
    at most that much CPU, however long that takes on a busy machine."""
    out = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.split()[0])
    hang_guard = time.monotonic() + 600  # only for a worker that no longer gets any CPU at all
    while _alive(pid) and time.monotonic() < hang_guard:
        used = _cpu_seconds(pid)
        assert used is None or used < 30, f"the orphaned worker is still running after {used:.0f} s of CPU"
        time.sleep(0.2)
    assert not _alive(pid), "the orphaned worker is still running"


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return os.path.exists(f"/proc/{pid}")


def test_a_warmup_runs_once_in_each_worker_before_it_is_ready():
    """The warm-up payload runs while the worker starts (off every call's deadline); one that fails is a
    start error naming it, not a worker that serves calls."""
    broken = WorkerPool(f"{TARGETS}:fail", size=1, warmup="the warm-up failed")
    try:
        assert not broken.wait_ready(30)
        assert "the warm-up failed" in (broken.last_start_error or "")
    finally:
        broken.close()
    pool = WorkerPool(f"{TARGETS}:sleep_then_pid", size=1, warmup=0)
    try:
        assert pool.wait_ready(30) and pool.call(0, timeout=5) > 0
    finally:
        pool.close()


def test_on_the_cpu_clock_a_worker_kept_off_the_cpu_is_not_timed_out_and_on_the_wall_clock_it_is(
    pool_factory,
):
    """A loaded machine, made certain: the worker is stopped (SIGSTOP) for twice its call's bound in the
    middle of 0.3 s of work. Counting its CPU time, the call returns its result; counting the wall clock (the
    pool's default), the same call is a timeout. (math-verify's pool counts CPU time: its verdicts must not
    depend on the load.)"""

    def stopped_for_a_while(pool: WorkerPool) -> float:
        (worker,) = pool._idle
        result: list = []
        caller = threading.Thread(target=lambda: result.append(_outcome(pool, 0.3, 1.0)))
        caller.start()
        time.sleep(0.1)
        os.kill(worker.proc.pid, signal.SIGSTOP)
        time.sleep(2.0)
        with contextlib.suppress(ProcessLookupError):  # on the wall clock its caller killed it meanwhile
            os.kill(worker.proc.pid, signal.SIGCONT)
        caller.join()
        return result[0]

    assert stopped_for_a_while(pool_factory("cpu_work", clock="cpu")) == 0.3
    timed_out = stopped_for_a_while(pool_factory("cpu_work"))
    assert isinstance(timed_out, WorkerTimeout), timed_out


def _outcome(pool: WorkerPool, payload, timeout: float):
    try:
        return pool.call(payload, timeout=timeout)
    except WorkerTimeout as exc:
        return exc


def test_on_the_cpu_clock_work_past_the_bound_times_out_in_python_and_in_c(pool_factory):
    spinning = pool_factory("cpu_work", clock="cpu")
    with pytest.raises(WorkerTimeout, match=r"^timed out after 0\.8s of CPU time$"):
        spinning.call(30.0, timeout=1.0)
    assert spinning.stats["soft_timeouts"] == 1
    stuck = pool_factory("spin_in_c", clock="cpu")
    with pytest.raises(WorkerTimeout, match=r"^timed out after 1s of CPU time \(the worker was killed\)$"):
        stuck.call(10**9, timeout=1.0)
    assert stuck.stats["killed"] == 1


def test_on_the_cpu_clock_a_call_that_only_waits_is_ended_on_the_wall_clock(pool_factory):
    pool = pool_factory("sleep", clock="cpu")
    with pytest.raises(WorkerTimeout, match=r"^timed out after 2s on the wall clock, using little CPU$"):
        pool.call(600.0, timeout=0.25)  # soft: 0.2 s of CPU, or 10 x that on the wall clock
    with pytest.raises(ValueError, match="clock must be one of"):
        WorkerPool(f"{TARGETS}:echo", clock="gpu")
