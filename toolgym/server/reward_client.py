"""``RewardClient``: score responses on a ``toolgym serve rewards`` server from a trainer.

A reward a trainer cannot trust is worse than none, so failures are loud:

- transport failures (connection refused, timeouts) and overload/server errors (429, 5xx) are retried
  ``retries`` times with exponential backoff, then raise ``RewardServerError``; ``score_batch`` raises if
  any chunk fails, and never returns a partial list padded with zeros;
- a 4xx answer (an unknown ``type``, a malformed ``verification_info``) raises at once: retrying a wrong
  request cannot help;
- a verifier that could not judge comes back as a ``ScoreResult`` with ``error`` set (the server's verdict),
  for the trainer to drop or flag.

Thread-safe; ``score_batch`` sends chunks of ``batch_size`` items on up to ``max_workers`` connections.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from pydantic import ValidationError

from toolgym.server.reward_api import BatchResult, ScoreResult
from toolgym.util.http import RetryingJsonClient


class RewardServerError(RuntimeError):
    """The server could not score the request (after retries, or because the request was refused)."""


class RewardClient(RetryingJsonClient):
    error = RewardServerError
    retry_non_json = True

    def __init__(
        self,
        url: str,
        *,
        max_workers: int = 8,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 0.5,
        batch_size: int = 64,
        transport: httpx.BaseTransport | None = None,
    ):
        """``transport`` replaces the network (tests, custom proxies); ``timeout`` is per HTTP request."""
        if max_workers < 1 or retries < 0 or batch_size < 1 or timeout <= 0:
            raise ValueError("need max_workers >= 1, retries >= 0, batch_size >= 1 and timeout > 0")
        super().__init__(
            url,
            timeout=timeout,
            retries=retries,
            backoff=backoff,
            max_workers=max_workers,
            transport=transport,
        )
        self.batch_size = batch_size
        self._threads = ThreadPoolExecutor(max_workers, thread_name_prefix="toolgym-reward-client")

    def score(self, response: str, verification_info: Mapping[str, Any] | str) -> ScoreResult:
        """Score one response."""
        body = {"response": response, "verification_info": verification_info}
        return _parse(ScoreResult, self._post("/score", body))

    def score_batch(
        self, responses: Sequence[str], verification_infos: Sequence[Mapping[str, Any] | str]
    ) -> list[ScoreResult]:
        """Score ``responses[i]`` against ``verification_infos[i]``; the results come back in order."""
        if len(responses) != len(verification_infos):
            raise ValueError(f"{len(responses)} responses but {len(verification_infos)} verification_infos")
        items = [{"response": r, "verification_info": v} for r, v in zip(responses, verification_infos)]
        chunks = [items[i : i + self.batch_size] for i in range(0, len(items), self.batch_size)]
        results: list[ScoreResult] = []
        for reply in self._threads.map(lambda chunk: self._post("/score_batch", {"items": chunk}), chunks):
            results.extend(_parse(BatchResult, reply).results)
        return results

    def close(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)
        super().close()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        return self._request("POST", path, body)


def _parse(model: type[Any], body: Any) -> Any:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise RewardServerError(f"the server's reply is not a {model.__name__}: {exc}") from None


__all__ = ["RewardClient", "RewardServerError", "ScoreResult"]
