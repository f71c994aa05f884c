"""How toolgym makes HTTP clients: one TLS context per process, and the pooled client of the remote tools
and the reward client.

Building a context loads the CA bundle: ~50 ms of CPU each time. Env constructors make a client each (a
retriever, a remote tool server), and a trainer makes an env per concurrent episode, so 256 envs spent over
10 s on it. An ``ssl.SSLContext`` is safe to share between clients and threads; it is made once, with
httpx's defaults (certifi's bundle, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set), on first use.
"""

from __future__ import annotations

import ssl
import threading
from typing import Any

_context: ssl.SSLContext | None = None
_lock = threading.Lock()


def shared_ssl_context() -> ssl.SSLContext:
    """The process's TLS context for clients that verify certificates (httpx's default settings)."""
    global _context
    with _lock:
        if _context is None:
            import httpx

            _context = httpx.create_ssl_context()
        return _context


def pooled_client(base_url: str, *, timeout: float, max_workers: int, transport: Any = None) -> Any:
    """A sync ``httpx.Client`` for ``base_url`` with a pool of ``max_workers`` connections (one per worker
    thread of the caller) and the shared TLS context."""
    import httpx

    limits = httpx.Limits(max_connections=max_workers, max_keepalive_connections=max_workers)
    return httpx.Client(
        base_url=base_url, timeout=timeout, limits=limits, transport=transport, verify=shared_ssl_context()
    )
