"""How toolgym makes HTTP clients: one TLS context per process; the asyncio session every engine client
uses (``async_session``: aiohttp); and the pooled sync client of the remote tools, the reward client and the
judge, with the retrying JSON request loop the first two share (``RetryingJsonClient``).

Which client for which caller was chosen on measurements (docs/benchmarks.md, "Which HTTP client"): calls
made from an event loop, many in flight at once (the engine calls of the gateway, the ``--server`` rollouts
and TRL's async rollout process), go through aiohttp: 0.2 ms of client CPU a request at 64 in flight, where
httpx's async pool, which rescans every connection (a ``poll()`` each) whenever a request starts or ends,
took 4-5 ms, all of it on the one loop every gateway call goes through. Calls made from worker threads (the
judge, the remote tools, the reward client, the retriever) stay on httpx's sync client: 0.4 ms a request
dearer than urllib3 at 16 threads, against calls that wait far longer, and no event loop to hold up.

Building a context loads the CA bundle: ~50 ms of CPU each time. Env constructors make a client each (a
retriever, a remote tool server), and a trainer makes an env per concurrent episode, so 256 envs spent over
10 s on it. An ``ssl.SSLContext`` is safe to share between clients and threads; it is made once, with
httpx's defaults (certifi's bundle, ``SSL_CERT_FILE``/``SSL_CERT_DIR`` when set), on first use.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import threading
import time
from typing import Any, ClassVar, Self

from toolgym.util.retry import backoff_delay, is_retryable_status

_context: ssl.SSLContext | None = None
_lock = threading.Lock()


def pool_limits(max_connections: int | None) -> Any:
    """``httpx.Limits`` for a pool of ``max_connections`` (None: unbounded) that never closes an idle
    connection on its own: no client-side keep-alive expiry and no surplus of idle connections to trim.

    httpcore 1.0.9's pool (encode/httpcore#1110) hands an idle connection to a waiting request, and the
    connection stays idle until that request's thread or task runs; another request's pass over the pool
    meanwhile sees it idle and closes it when its keep-alive expiry (httpx's default: 5 s) has passed, or as
    a surplus idle connection, and if the first request has started by then, it fails with a ``ReadError``
    on a socket closed under it. It takes a busy machine: the gateway's 256-session test failed so in one
    of three loaded CI runs, and in a run on one core beside six busy processes. With neither, the pool
    drops an idle connection only once the server has closed it (its socket reads as closed)."""
    import httpx

    return httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections, keepalive_expiry=None
    )


def shared_ssl_context() -> ssl.SSLContext:
    """The process's TLS context for clients that verify certificates (httpx's default settings)."""
    global _context
    with _lock:
        if _context is None:
            import httpx

            _context = httpx.create_ssl_context()
        return _context


def async_session(*, timeout: float, max_connections: int, headers: dict[str, str] | None = None) -> Any:
    """An ``aiohttp.ClientSession`` on the running loop (a session is bound to the loop it is made on):
    ``max_connections`` pooled connections (requests beyond them wait for one, unbounded), ``timeout``
    seconds for connecting and between reads of one request, the shared TLS context. The caller closes it."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, ssl=shared_ssl_context())
    # connect=None: waiting for a free pooled connection is not a timeout (bursts queue instead of failing)
    limits = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=timeout, sock_read=timeout)
    return aiohttp.ClientSession(connector=connector, timeout=limits, headers=headers or {})


_process_http: tuple[int, Any] | None = None
_process_http_lock = threading.Lock()


def process_client() -> Any:
    """One sync ``httpx.Client`` per process for callers that make many short-lived users of it (a remote
    retriever per env, mini-swe-agent's environment per command): one connection pool, built once, the
    shared TLS context. Each new httpx client reads the proxy settings from the environment and sets up TLS
    (~0.3 ms and ~50 ms). Requests pass their own timeout. A forked child makes its own (connections must
    not be shared across processes)."""
    global _process_http
    with _process_http_lock:
        if _process_http is None or _process_http[0] != os.getpid():
            import httpx

            _process_http = (os.getpid(), httpx.Client(limits=pool_limits(None), verify=shared_ssl_context()))
        return _process_http[1]


def pooled_client(base_url: str, *, timeout: float, max_workers: int, transport: Any = None) -> Any:
    """A sync ``httpx.Client`` for ``base_url`` with a pool of ``max_workers`` connections (one per worker
    thread of the caller) and the shared TLS context."""
    import httpx

    return httpx.Client(
        base_url=base_url,
        timeout=timeout,
        limits=pool_limits(max_workers),
        transport=transport,
        verify=shared_ssl_context(),
    )


class RetryingJsonClient:
    """What the reward client and the tool server's client share (they were two copies of it): a pooled
    connection to one toolgym server, and ``_request``, which sends JSON and returns the decoded reply of the
    first 200. Transport failures, 429 and 5xx are retried ``retries`` times with the shared backoff
    (``toolgym.util.retry``, honouring ``Retry-After``); any other status raises ``error`` at once, and so
    does running out of attempts."""

    #: what a refused or finally failed request raises (each client its own)
    error: ClassVar[type[Exception]] = RuntimeError
    #: a 200 whose body is not JSON: another attempt (True) or ``error`` at once (False)
    retry_non_json: ClassVar[bool] = False

    def __init__(
        self,
        url: str,
        *,
        timeout: float,
        retries: int,
        backoff: float,
        max_workers: int,
        transport: Any = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.retries = retries
        self.backoff = backoff
        self._http = pooled_client(self.url, timeout=timeout, max_workers=max_workers, transport=transport)

    def health(self) -> dict[str, Any]:
        """The server's ``GET /health``."""
        return self._request("GET", "/health", None)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        import httpx

        last, retry_after = "no attempt made", None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, retry_after))
            retry_after = None
            try:
                reply = self._http.request(method, path, json=body)
            except httpx.TransportError as exc:
                last = f"{type(exc).__name__}: {exc}"
                continue
            if reply.status_code == 200:
                try:
                    return reply.json()
                except ValueError:
                    if not self.retry_non_json:
                        raise self.error(f"{method} {self.url}{path}: the reply is not JSON") from None
                    last = "the server sent a body that is not JSON"
                    continue
            detail = _detail(reply)
            if not is_retryable_status(reply.status_code):
                raise self.error(f"{method} {self.url}{path} refused: HTTP {reply.status_code}: {detail}")
            last = f"HTTP {reply.status_code}: {detail}"
            retry_after = reply.headers.get("retry-after")
        raise self.error(f"{method} {self.url}{path} failed after {self.retries + 1} attempts: {last}")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        """The backoff before retry ``attempt``, or the server's ``Retry-After`` (at most 30 s) if longer."""
        delay = backoff_delay(attempt, self.backoff)
        if retry_after is not None:
            with contextlib.suppress(ValueError):  # an HTTP date instead of seconds: keep the backoff
                delay = max(delay, min(float(retry_after), 30.0))
        return delay


def _detail(reply: Any) -> str:
    """The ``detail`` of an error reply (FastAPI's), else its text; at most 500 characters."""
    try:
        return str(reply.json().get("detail", reply.text))[:500]
    except (ValueError, AttributeError):
        return reply.text[:500]
