"""One sandbox per process, shared by every python tool and code verifier in it.

Each ``LocalSandbox`` starts fork servers (one per worker); giving every env its own would multiply processes
and memory for no gain, and ``arun``'s bounded concurrency only protects the machine if everyone queues at the
same pool.

Its session capacity follows the callers (``toolgym.sandbox.capacity``): whoever runs N episodes at once in
this process calls ``reserve_sessions(N)`` for as long as it runs them (the collector, the verl agent loop,
the OpenEnv server do). The slot table lives here, not in the sandbox, so reservations made before the sandbox
starts (it starts on first use) count, and survive ``close_shared_sandbox()``. ``TOOLGYM_SANDBOX_SESSIONS=N``
fixes the capacity instead (the explicit cap).
"""

from __future__ import annotations

import atexit
import os
import threading

from toolgym.sandbox.capacity import Reservation, SessionSlots, check_capacity
from toolgym.sandbox.local import DEFAULT_PRELOAD, LocalSandbox

SESSIONS_ENV = "TOOLGYM_SANDBOX_SESSIONS"

_shared: tuple[int, LocalSandbox] | None = None
_terminal: tuple[int, LocalSandbox] | None = None
_tests: tuple[int, LocalSandbox] | None = None
#: where a terminal episode's workspace (``app`` in the run's private /tmp), a Harbor test script and its
#: logs, and a SWE episode's repository (``testbed``, SWE-bench's path) appear
TERMINAL_LINKS = {
    "/app": "/tmp/app",
    "/logs": "/tmp/logs",
    "/tests": "/tmp/tests",
    "/testbed": "/tmp/testbed",
}
#: what the bash tool's session driver imports, preloaded in its fork servers (about 10 ms less per episode)
TERMINAL_PRELOAD = (*DEFAULT_PRELOAD, "subprocess", "select", "ctypes")
_slots: tuple[int, SessionSlots] | None = None
_shared_lock = threading.Lock()


def _fixed_capacity() -> int | None:
    raw = os.environ.get(SESSIONS_ENV, "").strip()
    if not raw:
        return None
    try:
        return check_capacity(int(raw), SESSIONS_ENV)
    except ValueError as exc:
        raise ValueError(f"{SESSIONS_ENV}={raw!r}: {exc}") from None


def shared_slots() -> SessionSlots:
    """The process-wide sandbox's slot table (this process's own after a fork)."""
    global _slots
    with _shared_lock:
        if _slots is None or _slots[0] != os.getpid():
            _slots = (os.getpid(), SessionSlots(_fixed_capacity()))
        return _slots[1]


def reserve_sessions(n: int) -> Reservation:
    """Hold ``n`` session slots of the process-wide sandbox while the caller runs ``n`` episodes at once;
    ``release()`` it (or use it as a ``with`` block) when they are done. Starts nothing."""
    return shared_slots().reserve(n)


def shared_sandbox() -> LocalSandbox:
    """The process-wide sandbox (``workers=2``), created on first use and closed at interpreter exit.

    A forked child (a data-loader or rollout worker) gets its own: fork servers answer only the process
    that started them.
    """
    global _shared
    slots = shared_slots()
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            sb = LocalSandbox(workers=2, slots=slots)
            atexit.register(sb.close)
            _shared = (os.getpid(), sb)
        return _shared[1]


def shared_terminal_sandbox() -> LocalSandbox:
    """The process-wide sandbox of the bash tool and Terminal-v0's verifiers: ``shared_sandbox()``'s layers
    and slot table, plus the view links ``TERMINAL_LINKS`` (a session's workspace appears at ``/app``) and
    the driver's modules preloaded (``TERMINAL_PRELOAD``)."""
    global _terminal
    slots = shared_slots()
    with _shared_lock:
        if _terminal is None or _terminal[0] != os.getpid():
            sb = LocalSandbox(workers=2, slots=slots, links=TERMINAL_LINKS, preload=TERMINAL_PRELOAD)
            atexit.register(sb.close)
            _terminal = (os.getpid(), sb)
        return _terminal[1]


def pytest_preload() -> tuple[str, ...]:
    """The terminal sandbox's modules, plus pytest, the plugins installed for it (``pytest11`` entry points)
    and their packages, for ``shared_test_sandbox``."""
    from importlib.metadata import entry_points, packages_distributions

    found = entry_points(group="pytest11")
    plugins = sorted({ep.module for ep in found})
    # the packages of the plugins' distributions: a plugin may import its package only when first used (the
    # hypothesis plugin at the end of every run), which pytest then compiles anew with its asserts rewritten
    dists = {ep.dist.name for ep in found if ep.dist is not None}
    tops = {name for name, owners in packages_distributions().items() if dists.intersection(owners)}
    packages = sorted(({name.split(".")[0] for name in plugins} | tops) - set(plugins))
    core = (
        "pytest",
        "_pytest.main",
        "_pytest.runner",
        "_pytest.python",
        "_pytest.terminal",
        "_pytest.skipping",
    )
    return (*TERMINAL_PRELOAD, "tarfile", "hmac", "faulthandler", *core, *plugins, *packages)


def shared_test_sandbox() -> LocalSandbox:
    """The process-wide sandbox test runs fork from (SWE-v0's judge, the miner): ``shared_terminal_sandbox``'s
    layers, slots and view links, with pytest and its plugins imported by its fork servers once
    (``pytest_preload``). A run forks its tests from that warm interpreter instead of starting one: loading
    pytest's plugins (and the packages they import lazily, with their asserts rewritten) was most of a small
    suite's two seconds. A module that cannot be imported is left out (``preload_failed`` says why).

    Each run has a loopback network of its own (``network="loopback"``): suites written for SWE-bench's
    containers serve and fetch on 127.0.0.1 (Django's live-server tests); nothing beyond it is reachable.
    Where the machine allows no network namespace, the runs have no socket and a verdict whose tests opened
    one is an error (``toolgym.rewards.swe.no_network``)."""
    global _tests
    slots = shared_slots()
    with _shared_lock:
        if _tests is None or _tests[0] != os.getpid():
            sb = LocalSandbox(
                workers=2, slots=slots, links=TERMINAL_LINKS, preload=pytest_preload(), network="loopback"
            )
            atexit.register(sb.close)
            _tests = (os.getpid(), sb)
        return _tests[1]


def close_shared_sandbox() -> None:
    """Close the shared sandboxes now (the next ``shared_sandbox()`` starts a new one)."""
    global _shared, _terminal, _tests
    with _shared_lock:
        for held in (_shared, _terminal, _tests):
            if held is not None and held[0] == os.getpid():
                held[1].close()
        _shared = _terminal = _tests = None
