import random

import pytest

from toolgym.util.retry import backoff_delay, is_retryable_status


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_transient_statuses_are_retried(status):
    assert is_retryable_status(status)


@pytest.mark.parametrize("status", [200, 400, 401, 404, 413, 422, 501, 505])
def test_the_requests_fault_and_permanent_errors_are_not(status):
    assert not is_retryable_status(status)


def test_backoff_doubles_is_capped_and_jittered():
    rng = random.Random(0)
    delays = [backoff_delay(a, 0.5, cap=3.0, rng=rng) for a in range(1, 7) for _ in range(50)]
    by_attempt = [delays[i * 50 : (i + 1) * 50] for i in range(6)]
    for attempt, ds in enumerate(by_attempt, 1):
        full = min(3.0, 0.5 * 2 ** (attempt - 1))
        assert all(full * 0.5 <= d <= full for d in ds)
        assert len(set(ds)) > 1  # jitter: workers do not retry in lockstep
