"""Run an ASGI app (FastAPI) on a free loopback port in a background thread, for tests and examples.

The socket is bound before the server starts, so the port is known and cannot be taken by someone else in
between; leaving the ``with`` block stops the server and joins its thread.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal


def free_port() -> int:
    """A TCP port free on the loopback interface now, for a server started in another process (which binds it
    itself: another process could take it in between, unlike ``serve_in_thread``'s bound socket)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serve_in_thread(
    app: Any, startup_timeout: float = 10.0, lifespan: Literal["auto", "on", "off"] = "off"
) -> Iterator[str]:
    """Serve ``app`` on ``127.0.0.1:<free port>``; yields the base URL (``http://127.0.0.1:PORT``).
    ``lifespan="on"`` runs the app's startup and shutdown hooks (e.g. OpenEnv's idle-session reaper)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"serve:{port}"
    )
    thread.start()
    try:
        deadline = time.monotonic() + startup_timeout
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the test server on port {port} did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
