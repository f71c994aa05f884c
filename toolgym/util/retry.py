"""The retry policy every HTTP client in toolgym shares (retriever, reward server, OpenAI-compatible LLMs).

Which answers are worth another attempt, and how long to wait before it: exponential backoff with jitter, so
that many rollout workers hitting one overloaded service do not retry in lockstep. Each client keeps its own
loop (sync or async, its own error type); the policy is here once.
"""

from __future__ import annotations

import random

#: answers that say "later", not "never": request timeout, too early, too many requests, and the transient
#: server errors (501 Not Implemented and 505 are permanent, so they are not here)
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


def is_retryable_status(status: int) -> bool:
    """Worth another attempt; any other error status is the request's fault or permanent."""
    return status in RETRYABLE_STATUS


def backoff_delay(attempt: int, base: float, cap: float = 30.0, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1 for the first retry): ``base * 2**(attempt-1)``, at most
    ``cap``, scaled by a random factor in [0.5, 1]."""
    jitter = (rng or random).uniform(0.5, 1.0)
    return min(cap, base * 2 ** (attempt - 1)) * jitter
