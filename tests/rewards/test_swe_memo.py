"""The SWE judge's memo (``toolgym.rewards.swe_memo``): a tree judged before is not judged again, an error
is never remembered, the size bounds it, concurrent calls for one tree judge it once, and the key tells
every input apart."""

from __future__ import annotations

import threading
import time

import pytest

from toolgym.core.types import Verdict
from toolgym.rewards.swe_memo import SIZE_ENV, VerdictMemo, memo_size, sandbox_token, verdict_key


class Maker:
    """A judge stand-in that counts its runs."""

    def __init__(self, verdict: Verdict, delay: float = 0.0):
        self.verdict, self.delay, self.runs = verdict, delay, 0

    def __call__(self) -> Verdict:
        self.runs += 1
        time.sleep(self.delay)
        return self.verdict


PASS = Verdict(reward=1.0, passed=True, details={"tests_passed": "2/2"})
BROKEN = Verdict(reward=0.0, passed=False, error="the judge failed (sandbox_error)")


def test_a_tree_judged_before_gets_its_verdict_again_as_a_copy():
    memo, make = VerdictMemo(), Maker(PASS)
    first = memo.verdict("k", make)
    again = memo.verdict("k", make)
    assert make.runs == 1 and first == again == PASS and (memo.hits, memo.misses) == (1, 1)
    again.details["tests_passed"] = "changed by a caller"
    assert memo.verdict("k", make).details == {"tests_passed": "2/2"}


def test_an_error_is_never_remembered():
    memo, make = VerdictMemo(), Maker(BROKEN)
    assert memo.verdict("k", make).error and memo.verdict("k", make).error
    assert make.runs == 2 and len(memo) == 0


def test_the_size_bounds_it_least_recently_used_first_out_and_zero_turns_it_off(monkeypatch):
    monkeypatch.setenv(SIZE_ENV, "2")
    memo, make = VerdictMemo(), Maker(PASS)
    for key in ("a", "b", "a", "c"):  # "b" is the least recently used when "c" comes
        memo.verdict(key, make)
    assert make.runs == 3 and len(memo) == 2
    memo.verdict("a", make)
    memo.verdict("b", make)
    assert make.runs == 4
    monkeypatch.setenv(SIZE_ENV, "0")
    memo.verdict("a", make)
    assert make.runs == 5


@pytest.mark.parametrize("value", ["many", "-1", "1.5"])
def test_a_bad_size_is_an_error_that_names_the_variable(monkeypatch, value):
    monkeypatch.setenv(SIZE_ENV, value)
    with pytest.raises(ValueError, match=SIZE_ENV):
        memo_size()


def test_concurrent_calls_for_one_tree_judge_it_once():
    memo, make = VerdictMemo(), Maker(PASS, delay=0.2)
    results: list[Verdict] = []
    threads = [threading.Thread(target=lambda: results.append(memo.verdict("k", make))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert make.runs == 1 and results == [PASS] * 8


def test_a_waiter_judges_itself_when_the_first_call_fails():
    memo = VerdictMemo()
    broken, good = Maker(BROKEN, delay=0.2), Maker(PASS)
    first = threading.Thread(target=lambda: memo.verdict("k", broken))
    first.start()
    while not memo._making:  # the first call is judging
        time.sleep(0.01)
    assert memo.verdict("k", good) == PASS
    first.join()
    assert (broken.runs, good.runs) == (1, 1)


def test_the_key_tells_every_input_apart():
    base = {"archive": b"tree", "changes": [["a.py", "file", 420, "eA=="]], "options": {"timeout": 900.0}}
    variants = [
        {**base, "archive": b"other tree"},
        {**base, "changes": []},
        {**base, "changes": [["a.py", "file", 493, "eA=="]]},
        {**base, "options": {"timeout": 60.0}},
        {**base, "sandbox": [1, ["landlock"]]},
    ]
    keys = {verdict_key(base), *(verdict_key(v) for v in variants)}
    assert len(keys) == 1 + len(variants)
    assert verdict_key(dict(reversed(base.items()))) == verdict_key(base)  # order does not matter


def test_each_sandbox_gets_a_number_of_its_own_even_where_a_freed_one_was():
    class Sandbox:
        pass

    first = Sandbox()
    number = sandbox_token(first)
    assert sandbox_token(first) == number
    del first
    others = [Sandbox() for _ in range(64)]  # (CPython often makes one where the freed one was)
    assert number not in {sandbox_token(s) for s in others}

    class Slotted:
        __slots__ = ()

    assert sandbox_token(Slotted()) is None
