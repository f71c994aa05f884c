"""How many session interpreters a sandbox keeps live at once, and who waits when every slot is taken.

A session holds one trajectory's interpreter state. Evicting a live one to make room (least recently used,
as toolgym once did) destroys state a running episode is about to use: with episodes taking turns round-robin,
as batched rollouts do, 80 episodes on 64 slots lost every state, and the model was blamed for the NameError.
So a slot is never taken from a live session. Instead:

- **Capacity follows the callers.** Whoever runs N episodes at once reserves N slots for as long as it runs
  them (``reserve(n)``): the collector its ``concurrency``, the verl agent loop its
  ``max_concurrent_episodes``, the OpenEnv server its ``max_sessions``. The capacity is the sum of the live
  reservations, and never below a floor (``DEFAULT_SESSIONS``) for code that makes envs by hand. A fixed
  capacity (``LocalSandbox(max_sessions=N)``, or ``TOOLGYM_SANDBOX_SESSIONS`` for the process-wide sandbox)
  ignores reservations: that is the explicit cap.
- **Over capacity, a new session waits** (``wait_s``, the wait is reported with the call) for an episode to
  end and free its slot, then fails as a sandbox error: infrastructure, never the model's error.
- **Idle slots are reclaimed.** A session not used for ``idle_s`` (an episode abandoned without closing its
  env) gives its slot to a waiter; if that episode ever comes back, its lost state is reported as the
  sandbox's doing.

Short-lived sessions whose caller bounds how many exist at once (the code verifier's, four at a time) take no
slot (``transient``), so a verifier never waits behind the episodes it is scoring.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import Protocol

#: the capacity when nobody reserved any (envs made by hand, one-off runs)
DEFAULT_SESSIONS = 64
#: the most session interpreters one sandbox can hold: each gets a uid of its own (see ``LocalSandbox``)
MAX_SESSIONS = 1024
DEFAULT_WAIT_S = 60.0
DEFAULT_IDLE_S = 600.0


class NoSessionSlot(RuntimeError):
    """Every slot stayed held by a live session for the whole wait (``waited_s``)."""

    def __init__(self, message: str, waited_s: float) -> None:
        super().__init__(message)
        self.waited_s = waited_s


class SlotHolder(Protocol):
    """What the slot table needs of a session: to be evicted when idle (if it is not busy right now)."""

    def try_evict_idle(self, why: str) -> bool: ...


def check_capacity(n: int, what: str = "max_sessions") -> int:
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_SESSIONS:
        raise ValueError(f"{what} must be a whole number from 1 to {MAX_SESSIONS}, got {n!r}")
    return n


class Reservation:
    """``n`` slots reserved until ``release()`` (or the end of a ``with`` block); releasing twice is a no-op.
    Without ``slots`` (a backend with no session cap, such as e2b) it reserves nothing."""

    def __init__(self, slots: SessionSlots | None, n: int) -> None:
        self._slots = slots
        self.n = n
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            if self._slots is not None:
                self._slots._unreserve(self.n)

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class SessionSlots:
    """The slot table of one sandbox (see the module docstring). Thread-safe; waits work from threads and
    from any asyncio loop."""

    def __init__(
        self,
        fixed: int | None = None,
        *,
        floor: int = DEFAULT_SESSIONS,
        wait_s: float = DEFAULT_WAIT_S,
        idle_s: float = DEFAULT_IDLE_S,
    ) -> None:
        self.fixed = None if fixed is None else check_capacity(fixed)
        self.floor = check_capacity(floor, "floor")
        if wait_s < 0 or idle_s <= 0:
            raise ValueError(f"wait_s must be >= 0 and idle_s > 0, got {wait_s} and {idle_s}")
        self.wait_s = float(wait_s)
        self.idle_s = float(idle_s)
        self._reserved = 0
        self._held: OrderedDict[SlotHolder, float] = OrderedDict()  # holder -> last use, least recent first
        self._cond = threading.Condition(threading.RLock())
        self.stats = {"waits": 0, "wait_s": 0.0, "refused": 0, "reclaimed_idle": 0, "peak": 0}

    # ---------------------------------------------------------------- capacity

    @property
    def capacity(self) -> int:
        if self.fixed is not None:
            return self.fixed
        return min(MAX_SESSIONS, max(self.floor, self._reserved))

    def reserve(self, n: int) -> Reservation:
        """Add ``n`` slots to the capacity until the reservation is released (a fixed capacity ignores it)."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"reserve a whole number of sessions >= 1, got {n!r}")
        with self._cond:
            self._reserved += n
            self._cond.notify_all()
        return Reservation(self, n)

    def _unreserve(self, n: int) -> None:
        with self._cond:
            self._reserved -= n

    @property
    def held(self) -> int:
        with self._cond:
            return len(self._held)

    def holds(self, holder: SlotHolder) -> bool:
        with self._cond:
            return holder in self._held

    # ---------------------------------------------------------------- acquiring

    def try_acquire(self, holder: SlotHolder) -> bool:
        """A slot for ``holder`` now if one is free (or an idle one is reclaimed); True if it holds one."""
        with self._cond:
            if holder in self._held:
                return True
            if len(self._held) >= self.capacity and not self._reclaim_idle():
                return False
            self._held[holder] = time.monotonic()
            self.stats["peak"] = max(self.stats["peak"], len(self._held))
            return True

    def acquire(self, holder: SlotHolder, timeout: float | None = None) -> float:
        """Block until ``holder`` holds a slot; returns the seconds waited. ``NoSessionSlot`` after
        ``timeout`` (default ``wait_s``)."""
        timeout = self.wait_s if timeout is None else timeout
        start = time.monotonic()
        with self._cond:
            while not self.try_acquire(holder):
                remaining = start + timeout - time.monotonic()
                if remaining <= 0:
                    raise self._refuse(time.monotonic() - start)
                self._cond.wait(min(remaining, 1.0))  # wakes on a release, and to look for idle slots
        return self._waited(start)

    async def acquire_async(self, holder: SlotHolder, timeout: float | None = None) -> float:
        """``acquire`` for asyncio: polls (backing off to 0.1 s) instead of holding a thread per waiter."""
        timeout = self.wait_s if timeout is None else timeout
        start = time.monotonic()
        delay = 0.005
        while not self.try_acquire(holder):
            if time.monotonic() - start >= timeout:
                raise self._refuse(time.monotonic() - start)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)
        return self._waited(start)

    def _waited(self, start: float) -> float:
        waited = time.monotonic() - start
        if waited > 0.001:
            with self._cond:
                self.stats["waits"] += 1
                self.stats["wait_s"] += waited
        return waited

    def _refuse(self, waited: float) -> NoSessionSlot:
        with self._cond:
            self.stats["refused"] += 1
            held, capacity = len(self._held), self.capacity
        how = "max_sessions is fixed" if self.fixed is not None else "reserved by the callers' concurrency"
        return NoSessionSlot(
            f"no session slot came free in {waited:.0f} s: {held} live sessions hold all {capacity} ({how}); "
            "run fewer episodes at once or give the sandbox more sessions (LocalSandbox(max_sessions=N), "
            "TOOLGYM_SANDBOX_SESSIONS for the shared one)",
            waited,
        )

    def _reclaim_idle(self) -> bool:
        """Evict the least recently used session idle over ``idle_s`` (and not busy); True if one was."""
        now = time.monotonic()
        for holder, last in list(self._held.items()):
            if now - last < self.idle_s:
                return False  # ordered by last use: every later one is more recent
            if holder.try_evict_idle(f"its slot was given to another session after {now - last:.0f} s idle"):
                self._held.pop(holder, None)  # the eviction released it already (a reentrant lock)
                self.stats["reclaimed_idle"] += 1
                return True
        return False

    # ---------------------------------------------------------------- using and freeing

    def touch(self, holder: SlotHolder) -> None:
        with self._cond:
            if holder in self._held:
                self._held[holder] = time.monotonic()
                self._held.move_to_end(holder)

    def release(self, holder: SlotHolder) -> None:
        with self._cond:
            if self._held.pop(holder, None) is not None:
                self._cond.notify_all()

    def snapshot(self) -> dict[str, float]:
        """Capacity, use and wait counters (for ``toolgym doctor`` and server metrics)."""
        with self._cond:
            held, reserved = len(self._held), self._reserved
            return {"capacity": self.capacity, "held": held, "reserved": reserved, **self.stats}
