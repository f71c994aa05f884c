"""``cost_ratio`` tells linear work from quadratic work, in one run: the check every linear-time test relies
on (with the collector paused while it measures, not forced to run)."""

import gc

from toolgym.testing.complexity import cost_ratio


def linear(text: str) -> int:
    return text.count("a")


def quadratic(text: str) -> int:
    return sum(text[:i].count("a") for i in range(0, len(text), 10))


def test_linear_work_costs_about_ten_times_and_quadratic_about_a_hundred():
    assert cost_ratio(linear, "ab" * 50_000, "ab" * 500_000) <= 20
    assert cost_ratio(quadratic, "ab" * 1_000, "ab" * 10_000) > 40


def test_the_collector_is_paused_while_measuring_and_left_as_it_was_after():
    seen = []
    assert cost_ratio(lambda n: seen.append(gc.isenabled()), 1, 10) >= 0
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        cost_ratio(linear, "ab", "ab" * 10)
        assert not gc.isenabled(), "a caller's paused collector stays paused"
    finally:
        gc.enable()
