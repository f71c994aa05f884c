"""What every judge verifier of one endpoint shares in a process: its limits, its HTTP client and the caches.

An endpoint is a ``(base_url, model)`` pair. The first verifier that names it creates its ``Endpoint`` in a
module-level registry, with that verifier's limits; every later verifier naming the same pair shares it, and
**the first instance's limits win** (a later instance asking for different limits gets a warning, not its
limits: one process must not send more than the first caller allowed). ``reset_endpoints()`` forgets them.

Limits, all thread-safe (``env.step`` runs verifiers from many threads at once):

- ``max_concurrency``: requests in flight at once (a semaphore);
- ``requests_per_minute`` / ``tokens_per_minute``: token buckets that refill continuously and hold at most
  one second's worth (at least one request, or one call's tokens), so requests are spread evenly and no 60 s
  window sees more than the limit. A call reserves its tokens before it is sent (an estimate: the prompt's
  characters / 4 + ``max_tokens``) and settles with the real ``usage`` after it.

The seconds a call waits for these limits are returned to the verifier, which adds them to the episode's
tally (``toolgym.core.waits.add_wait``) and to ``details["wait_s"]``.

Caches: valid replies are kept in memory (one LRU of ``MEMORY_CACHE_SIZE`` replies per process, shared by
every endpoint; ``clear_memory_cache()`` empties it) and, for a verifier with ``cache_dir``, in
``<cache_dir>/judge_cache.sqlite3`` (one table, key -> reply JSON; WAL mode and a busy timeout, so several
threads and processes share it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolgym.util.http import pooled_client

log = logging.getLogger(__name__)

MEMORY_CACHE_SIZE = 10_000
DISK_CACHE_FILE = "judge_cache.sqlite3"
#: a bucket holds this many seconds' worth of its rate (at least one unit, one call's tokens)
BURST_S = 1.0


@dataclass(frozen=True)
class Limits:
    max_concurrency: int = 16
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None


class TokenBucket:
    """A rate of ``per_minute`` units, holding ``BURST_S`` seconds' worth. ``reserve`` takes units now (the
    level may go below zero: the debt is what later callers wait for) and says how long the caller must wait
    before it may go; ``settle`` gives back (or takes) the difference between a reservation and the truth."""

    def __init__(self, per_minute: float):
        if not per_minute > 0:
            raise ValueError(f"a rate limit is > 0 per minute, got {per_minute}")
        self.rate = per_minute / 60.0
        self.capacity = max(self.rate * BURST_S, 1.0)
        self.level = self.capacity
        self._stamp = time.monotonic()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now

    def reserve(self, amount: float) -> float:
        with self._lock:
            self._refill()
            need = min(amount, self.capacity)  # a call bigger than the bucket waits for a full one
            delay = max(0.0, (need - self.level) / self.rate)
            self.level -= amount
            return delay

    def settle(self, reserved: float, actual: float) -> None:
        with self._lock:
            self._refill()
            self.level = min(self.capacity, self.level + reserved - actual)


class Endpoint:
    """The shared state of one ``(base_url, model)``: limits, one pooled ``httpx.Client``."""

    def __init__(self, base_url: str, model: str, limits: Limits, timeout: float):
        self.base_url = base_url
        self.model = model
        self.limits = limits
        self._slots = threading.BoundedSemaphore(limits.max_concurrency)
        self._requests = TokenBucket(limits.requests_per_minute) if limits.requests_per_minute else None
        self._tokens = TokenBucket(limits.tokens_per_minute) if limits.tokens_per_minute else None
        # the pool holds a connection per slot (at least 16, so a burst of retries does not queue on it)
        self.http = pooled_client(base_url, timeout=timeout, max_workers=max(limits.max_concurrency, 16))

    def acquire(self, estimated_tokens: float) -> float:
        """Wait for a request slot and the rate limits; return the seconds waited. Pair with ``release``."""
        started = time.monotonic()
        delay = self._requests.reserve(1) if self._requests else 0.0
        if self._tokens:
            delay = max(delay, self._tokens.reserve(estimated_tokens))
        if delay > 0:
            time.sleep(delay)
        self._slots.acquire()
        return time.monotonic() - started

    def release(self, estimated_tokens: float, used_tokens: float | None) -> None:
        """Give the slot back and settle the token reservation (``None``: the tokens are unknown, keep the
        estimate)."""
        self._slots.release()
        if self._tokens and used_tokens is not None:
            self._tokens.settle(estimated_tokens, used_tokens)

    def close(self) -> None:
        self.http.close()


_registry: dict[tuple[str, str], Endpoint] = {}
_registry_lock = threading.Lock()


def endpoint_for(base_url: str, model: str, limits: Limits, timeout: float) -> Endpoint:
    """The process's ``Endpoint`` for ``(base_url, model)``, created with ``limits`` by the first caller."""
    key = (base_url, model)
    with _registry_lock:
        found = _registry.get(key)
        if found is None:
            found = _registry[key] = Endpoint(base_url, model, limits, timeout)
        elif found.limits != limits:
            log.warning(
                "judge %s at %s: another verifier set this endpoint's limits first (%s); these (%s) are "
                "ignored: the first instance's limits win",
                model,
                base_url,
                found.limits,
                limits,
            )
        return found


def reset_endpoints() -> None:
    """Close every endpoint's client and forget the endpoints (their limits with them): the next verifier
    of an endpoint creates it again. For tests, and a process that changes its judges' limits."""
    with _registry_lock:
        endpoints = list(_registry.values())
        _registry.clear()
    for endpoint in endpoints:
        endpoint.close()


# -- caches --------------------------------------------------------------------------------------------------


def cache_key(base_url: str, body: dict[str, Any]) -> str:
    """The key of a request: the endpoint and the whole body (model, messages, sampling settings)."""
    text = json.dumps([base_url, body], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class MemoryCache:
    """A thread-safe LRU of ``size`` replies."""

    def __init__(self, size: int = MEMORY_CACHE_SIZE):
        self.size = size
        self._items: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: str, value: dict[str, Any]) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __len__(self) -> int:
        return len(self._items)


MEMORY_CACHE = MemoryCache()


def clear_memory_cache() -> None:
    """Forget every reply kept in this process's memory (the disk caches keep theirs)."""
    MEMORY_CACHE.clear()


class DiskCache:
    """Replies in ``<directory>/judge_cache.sqlite3``, shared by threads (one connection behind a lock) and
    processes (WAL mode, a 30 s busy timeout)."""

    def __init__(self, directory: str | Path):
        path = Path(directory).expanduser()
        path.mkdir(parents=True, exist_ok=True)
        self.path = path / DISK_CACHE_FILE
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=30.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA busy_timeout = 30000")
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS judgements (key TEXT PRIMARY KEY, reply TEXT NOT NULL)")

    def get(self, key: str) -> dict[str, Any] | None:
        """The reply kept under ``key``, or None (also when the file cannot be read: a cache never fails a
        verdict)."""
        try:
            with self._lock:
                row = self._db.execute("SELECT reply FROM judgements WHERE key = ?", (key,)).fetchone()
        except sqlite3.Error as exc:
            log.warning("judge disk cache %s: cannot read: %s", self.path, exc)
            return None
        if row is None:
            return None
        try:
            value = json.loads(row[0])
        except ValueError:
            return None
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Keep ``value`` under ``key`` (a failed write is logged, never raised)."""
        text = json.dumps(value, ensure_ascii=False)
        try:
            with self._lock:
                self._db.execute("INSERT OR REPLACE INTO judgements (key, reply) VALUES (?, ?)", (key, text))
        except sqlite3.Error as exc:
            log.warning("judge disk cache %s: cannot write: %s", self.path, exc)

    def __len__(self) -> int:
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM judgements").fetchone()[0])


_disk: dict[Path, DiskCache] = {}
_disk_lock = threading.Lock()


def disk_cache(directory: str | Path) -> DiskCache:
    """The process's ``DiskCache`` for ``directory`` (one connection per file)."""
    key = Path(directory).expanduser().resolve()
    with _disk_lock:
        found = _disk.get(key)
        if found is None:
            found = _disk[key] = DiskCache(key)
        return found
