"""Env instances for many concurrent episodes: the pool the episode host (``toolgym.rollout.host``) leases
from.

An env runs one episode at a time, and building one can be costly (a search index, a sandbox session pool),
so episodes borrow instances from an :class:`EnvPool` and give them back. Instances are keyed by env id *and*
kwargs: a verl batch can mix ``Math-v0`` rows with different ``max_turns``. A pool made with a ``factory``
(an env built by ``toolgym.make_env`` and never registered) makes every instance with it instead.

Every leased env is a live episode, and may hold a sandbox session (the python tool's interpreter): so each
lease reserves one session slot of the process-wide sandbox until the env comes back
(``toolgym.sandbox.reserve_sessions``). The sandbox's capacity thus follows the concurrency the caller runs
(the collector's ``concurrency``, the trainers' ``max_concurrent_episodes``, the OpenEnv server's
``max_sessions``) and a live episode's interpreter is never evicted to make room for another's.
"""

from __future__ import annotations

import json
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import gymnasium as gym

from toolgym.sandbox.capacity import Reservation
from toolgym.sandbox.shared import reserve_sessions


def env_key(env_id: str, kwargs: Mapping[str, Any] | None = None) -> str:
    """One string per (env id, kwargs), the same whatever the kwargs' order."""
    return env_id + json.dumps(dict(kwargs or {}), sort_keys=True, default=str)


class EnvPool:
    """Env instances per (id, kwargs), reused across episodes; safe to use from several threads.

    ``lease`` (a context manager) or ``acquire``/``release`` hand out an instance no other episode holds.
    ``max_idle`` bounds the instances kept per key once returned (extra ones are closed). With ``factory``,
    every instance is ``factory()`` and the env id names it only.
    """

    def __init__(self, max_idle: int | None = None, factory: Callable[[], gym.Env] | None = None):
        self.max_idle = max_idle
        self.factory = factory
        self._free: dict[str, list[gym.Env]] = defaultdict(list)
        self._envs: dict[int, gym.Env] = {}  # every env this pool made and has not closed, by id()
        self._keys: dict[int, str] = {}  # id(env) -> its key
        self._leases: dict[int, Reservation] = {}  # id(env) -> its session slot reservation, while leased
        self._lock = threading.Lock()
        self._closed = False

    def acquire(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> gym.Env:
        key = env_key(env_id, kwargs)
        with self._lock:
            if self._closed:
                raise RuntimeError("the env pool is closed")
            env = self._free[key].pop() if self._free[key] else None
        if env is None:
            # outside the lock: building an env can take seconds
            env = self.factory() if self.factory is not None else gym.make(env_id, **dict(kwargs or {}))
        with self._lock:
            self._keys[id(env)] = key
            self._envs[id(env)] = env
            self._leases[id(env)] = reserve_sessions(1)
        return env

    def release(self, env: gym.Env) -> None:
        with self._lock:
            lease = self._leases.pop(id(env), None)
            if lease is not None:
                lease.release()
            if self._closed:  # close() already closed it
                return
            key = self._keys.get(id(env))
            if key is None:
                raise ValueError("this env was not made by this pool")
            keep = self.max_idle is None or len(self._free[key]) < self.max_idle
            if keep:
                self._free[key].append(env)
            else:
                del self._keys[id(env)], self._envs[id(env)]
        if not keep:
            env.close()

    @contextmanager
    def lease(self, env_id: str, kwargs: Mapping[str, Any] | None = None) -> Iterator[gym.Env]:
        env = self.acquire(env_id, kwargs)
        try:
            yield env
        finally:
            self.release(env)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            envs = list(self._envs.values())
            self._envs.clear()
            self._keys.clear()
            self._free.clear()
            for lease in self._leases.values():
                lease.release()
            self._leases.clear()
        for env in envs:
            env.close()

    def __len__(self) -> int:
        """Env instances alive (leased or idle)."""
        return len(self._envs)


__all__ = ["EnvPool", "env_key"]
