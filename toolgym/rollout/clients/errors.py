"""The one error type LLM clients raise.

A rollout must never train on a silently empty or partial generation, so every backend turns its failures
(unreachable server, exhausted retries, a rejected request, a response without logprobs, a closed client)
into a :class:`ClientError` that says what went wrong; the episode runner decides whether to retry the
episode or fail the batch.
"""

from __future__ import annotations

__all__ = ["ClientError"]


class ClientError(RuntimeError):
    """A generation request failed; ``status_code`` is the HTTP status when a server answered with one.

    ``retryable`` tells callers whether trying again later might succeed (a server error or a timeout, as
    opposed to a request the server rejected as invalid).
    """

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = False) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable
