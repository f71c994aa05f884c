"""Functions for ``toolgym.rewards.worker_pool`` workers to run in tests: each misbehaves in one specific way.

Workers import their target by module path, so these live in the package rather than in a test file.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from typing import Any


def echo(payload: Any) -> Any:
    return payload


def pid(payload: Any) -> int:
    """The worker's process id (to tell workers apart, and to watch one die)."""
    return os.getpid()


def sleep(seconds: float) -> float:
    """Python-level waiting: the worker's soft alarm interrupts it (and the pool then retires the worker)."""
    time.sleep(seconds)
    return seconds


def sleep_then_pid(seconds: float) -> int:
    """``sleep``, then the worker's process id: tells the worker that served a call after a timeout."""
    time.sleep(seconds)
    return os.getpid()


def swallow(seconds: float) -> str:
    """Catches everything, even the soft-timeout exception, as careless library code might."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(BaseException):  # the point of this function
            time.sleep(0.01)
    return "finished"


def spin_in_c(iterations: int) -> str:
    """Minutes inside one C call (PBKDF2) that never returns to Python, so no signal handler can run:
    only killing the process stops it."""
    return hashlib.pbkdf2_hmac("sha256", b"toolgym", b"salt", iterations).hex()


def cpu_work(seconds: float) -> float:
    """Python-level work until this process has used ``seconds`` more CPU time: how long it takes on the
    wall clock depends on how much of a core it gets."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        sum(range(1000))
    return seconds


def fail(message: str) -> None:
    raise ValueError(message)


def crash(code: int) -> None:
    os._exit(code)
