"""A client for Search-R1's retriever service: ``POST /retrieve``.

Request ``{"queries": [...], "topk": k, "return_scores": bool}``; reply ``{"result": [[hit, ...], ...]}``, one
list per query, where a hit is ``{"document": {"id", "contents"}, "score": s}`` when scores were asked for
and the bare document otherwise. Search-R1's own servers (e5 + faiss, BM25 via pyserini) and
``toolgym serve retriever`` speak it, so one GPU retriever can serve a whole cluster of rollout workers.

Failures are expected at scale (a restarting server, an overloaded GPU), so the client retries what may pass —
connection errors, timeouts, HTTP 429 and 5xx — with exponential backoff and jitter, and raises
``RetrieverError`` once the attempts are spent or at once for what will not pass (other 4xx, a malformed
reply). The search tool turns that error into an ``infra_error`` observation; nothing here returns an empty
result in place of a failure.

Hits keep the server's order: the client cannot know the corpus order, so it neither re-ranks nor breaks
ties. ``toolgym serve retriever`` ranks with ``BM25Index`` (equal scores in corpus order), so its replies are
the same on every machine; a service that ranks ties by its own sort kernels (faiss over many threads, say)
is only as reproducible as it is.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from toolgym.search.base import Hit, RetrieverError
from toolgym.util.http import process_client
from toolgym.util.retry import backoff_delay, is_retryable_status


class _Retryable(Exception):
    """An attempt failed in a way that may pass on its own."""


class RemoteRetriever:
    """``Retriever`` over HTTP.

    Args:
        url: the service, either its base (``http://host:8000``) or the full ``…/retrieve`` address.
        timeout: seconds allowed for one attempt (connect and read).
        retries: extra attempts after the first for a retryable failure.
        backoff: the first wait between attempts, doubled after each, at most ``max_backoff``; each wait is
            scaled by a random factor in [0.5, 1] so that many workers do not retry in lockstep.
        return_scores: ask for scores (Search-R1 servers then wrap each document with its score).
    """

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 8.0,
        return_scores: bool = True,
        client: httpx.Client | None = None,
    ):
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.url = retrieve_url(url)
        self.timeout = float(timeout)
        self.retries = int(retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.return_scores = return_scores
        self._client = client or process_client()
        self._owns_client = False  # a given client is the caller's; the process-wide one outlives this

    #: how the client waits between attempts (tests replace it to record the waits)
    _sleep = staticmethod(time.sleep)

    def __repr__(self) -> str:
        return f"RemoteRetriever({self.url!r})"

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        if not queries:
            return []
        payload = {"queries": list(queries), "topk": int(topk), "return_scores": self.return_scores}
        attempts = self.retries + 1
        last = ""
        for attempt in range(1, attempts + 1):
            try:
                body = self._post(payload)
            except _Retryable as exc:
                last = str(exc)
                if attempt < attempts:
                    self._sleep(self._delay(attempt))
                continue
            except RetrieverError as exc:
                exc.attempts = attempt
                raise
            return _parse_reply(body, len(queries), self.url, attempt)
        raise RetrieverError(f"retriever {self.url} failed after {attempts} attempts: {last}", attempts)

    def close(self) -> None:
        """Nothing to release: the HTTP client is the caller's or the process's (connections are pooled)."""

    def _post(self, payload: dict[str, Any]) -> Any:
        try:
            response = self._client.post(self.url, json=payload, timeout=self.timeout)
        except httpx.TimeoutException:
            raise _Retryable(f"no reply within {self.timeout:g} s") from None
        except httpx.TransportError as exc:
            raise _Retryable(f"cannot reach it ({type(exc).__name__}: {exc})") from None
        if is_retryable_status(response.status_code):
            raise _Retryable(f"HTTP {response.status_code}: {_excerpt(response.text)}")
        if response.status_code != 200:
            status = f"HTTP {response.status_code}: {_excerpt(response.text)}"
            raise RetrieverError(f"retriever {self.url} refused the request: {status}")
        try:
            return response.json()
        except ValueError:
            raise RetrieverError(
                f"retriever {self.url} replied with non-JSON: {_excerpt(response.text)}"
            ) from None

    def _delay(self, attempt: int) -> float:
        return backoff_delay(attempt, self.backoff, self.max_backoff)


def retrieve_url(url: str) -> str:
    """``http://host:8000`` → ``http://host:8000/retrieve``; a full ``…/retrieve`` address is kept."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"a retriever URL looks like http://host:8000/retrieve, got {url!r}")
    path = parts.path if parts.path not in ("", "/") else "/retrieve"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _parse_reply(body: Any, expected: int, url: str, attempts: int) -> list[list[Hit]]:
    """Hits from a reply, or ``RetrieverError`` naming what is wrong with it (never a guessed empty list)."""

    def malformed(why: str) -> RetrieverError:
        return RetrieverError(f"retriever {url} sent a malformed reply: {why}", attempts)

    result = body.get("result") if isinstance(body, dict) else None
    if not isinstance(result, list):
        raise malformed(f'expected {{"result": [...]}}, got {_excerpt(str(body))}')
    if len(result) != expected:
        raise malformed(f"{len(result)} result lists for {expected} queries")
    hits: list[list[Hit]] = []
    for per_query in result:
        if not isinstance(per_query, list):
            raise malformed(f"a result is {type(per_query).__name__}, not a list of documents")
        try:
            hits.append([_hit(item) for item in per_query])
        except (TypeError, ValueError) as exc:
            raise malformed(str(exc)) from None
    return hits


def _hit(item: Any) -> Hit:
    """``{"document": {...}, "score": s}`` (scores asked for) or the bare document."""
    doc = item.get("document", item) if isinstance(item, dict) else item
    if not isinstance(doc, dict):
        raise TypeError(f"a document is {type(doc).__name__}, not an object")
    return Hit.from_document(doc, item.get("score"))


def _excerpt(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
