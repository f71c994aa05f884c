"""Seconds an episode waited for shared capacity (a sandbox session slot), counted per episode.

The wait happens deep below the env (``Session.run`` in the sandbox) while the episode runner owns the
trajectory. A context variable joins the two without threading a counter through every tool and env: the
runner opens a tally for its episode (``episode_waits``), runs ``env.step`` with its context (in a worker
thread too, via ``contextvars.copy_context``), and whoever waits calls ``add_wait``. Outside an episode a
wait is counted nowhere but in the sandbox's own stats.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar


class WaitTally:
    """The waits of one episode."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.count = 0


_tally: ContextVar[WaitTally | None] = ContextVar("toolgym_episode_waits", default=None)


@contextlib.contextmanager
def episode_waits() -> Iterator[WaitTally]:
    """Count the waits of the code run in this context (and in contexts copied from it) until exit."""
    tally = WaitTally()
    token = _tally.set(tally)
    try:
        yield tally
    finally:
        _tally.reset(token)


def add_wait(seconds: float) -> None:
    """Record a wait of ``seconds`` against the current episode, if any (tiny waits are not waits)."""
    tally = _tally.get()
    if tally is not None and seconds > 0.001:
        tally.seconds += seconds
        tally.count += 1
