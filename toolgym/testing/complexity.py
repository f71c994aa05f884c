"""A complexity check instead of a wall-clock bound: how much more ten times the input costs.

A test that asserts "this took < 1 s" fails on a slower or busier machine and passes a quadratic algorithm on
a fast one. ``cost_ratio`` compares the same code on an input and on one ten times larger, in one run on one
machine: linear work costs ~10x, quadratic ~100x, so ``assert cost_ratio(...) <= 20`` catches the blow-up
and nothing else. Env authors can use it for their own parsers and tools.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from typing import Any


def cost_ratio(fn: Callable[[Any], Any], small: Any, big: Any, *, rounds: int = 9) -> float:
    """The time ``fn(big)`` takes over the time ``fn(small)`` takes, ``big`` being ten times ``small``: ~10
    for linear work, ~100 for quadratic. Measured as this thread's CPU time (time spent preempted on a busy
    machine does not count), with the garbage collector paused (and left as it was after) and each input run
    once untimed first; the best of up to ``rounds`` tries, stopping at the first that shows at most 20x. (A
    neighbour process thrashing the shared caches slows the big input more than the small one: with 5 tries
    a linear parser once showed 22x in CI, two core suites running side by side; quadratic work shows ~100x
    every try.)"""
    best_big = best_small = math.inf
    # no collection while measuring, and none forced before: a full collection walks every live object, which
    # in a process that has imported torch or vLLM (0.29 s, 400k objects) costs far more than the parse being
    # measured (forced once per try, it made a 95-case parser test take 110 s in the suite instead of 12)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            fn(big)
            t0 = time.thread_time()
            fn(big)
            t1 = time.thread_time()
            fn(small)
            t2 = time.thread_time()
            for _ in range(10):  # ten runs: enough time to measure, and as much input as one big run
                fn(small)
            t3 = time.thread_time()
            best_big, best_small = min(best_big, t1 - t0), min(best_small, (t3 - t2) / 10)
            if best_big <= 20 * best_small:
                break
    finally:
        if collecting:
            gc.enable()
    return best_big / max(best_small, 1e-9)
