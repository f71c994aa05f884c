"""One sandbox per process, shared by every python tool and code verifier in it.

Each ``LocalSandbox`` starts fork servers (one per worker); giving every env its own would multiply processes
and memory for no gain, and ``arun``'s bounded concurrency only protects the machine if everyone queues at the
same pool.
"""

from __future__ import annotations

import atexit
import os
import threading

from toolgym.sandbox.local import LocalSandbox

_shared: tuple[int, LocalSandbox] | None = None
_shared_lock = threading.Lock()


def shared_sandbox() -> LocalSandbox:
    """The process-wide sandbox (``workers=2``), created on first use and closed at interpreter exit.

    A forked child (a data-loader or rollout worker) gets its own: fork servers answer only the process
    that started them.
    """
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            sb = LocalSandbox(workers=2)
            atexit.register(sb.close)
            _shared = (os.getpid(), sb)
        return _shared[1]


def close_shared_sandbox() -> None:
    """Close the shared sandbox now (the next ``shared_sandbox()`` starts a new one)."""
    global _shared
    with _shared_lock:
        if _shared is not None and _shared[0] == os.getpid():
            _shared[1].close()
        _shared = None
