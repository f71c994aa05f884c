"""The LLM-judge verifiers (toolgym.rewards.judge) against the scripted judge (toolgym.testing.judge_server):
what is sent, how the reply becomes a reward, every failure as a counted error verdict, the limits shared
per endpoint, the caches, the group judge, and the judge through env.step."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import toolgym
from toolgym.core.task import Task
from toolgym.core.waits import episode_waits
from toolgym.rewards.judge import (
    API_KEY_ENV,
    Criterion,
    GroupJudgeVerifier,
    JudgeVerifier,
    clear_memory_cache,
    reset_endpoints,
)
from toolgym.rewards.judge import verifier as verifier_module
from toolgym.rewards.judge.endpoint import DISK_CACHE_FILE, TokenBucket
from toolgym.rewards.judge.prompt import JudgeReplyError, last_json_object, parse_group_reply, parse_reply
from toolgym.testing.judge_server import scripted_judge
from toolgym.testing.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
CRITERIA = [
    Criterion(name="correct", description="The answer names the right city.", weight=3),
    {"name": "clear", "description": "The answer is one clear sentence."},
]
TASK = Task(id="capital", prompt="What is the capital of France?", answer="Paris")


@pytest.fixture(autouse=True)
def _fresh_judge_state():
    """Each test starts with no endpoint and an empty memory cache: the tests share one scripted judge, and a
    reply one test cached must not answer another's request."""
    yield
    clear_memory_cache()
    reset_endpoints()


@pytest.fixture(scope="module")
def _judge_server():
    with scripted_judge() as running:
        yield running


@pytest.fixture
def judge(_judge_server):
    """The module's scripted judge, its requests forgotten and back in the "fixed" mode (the memory cache and
    the endpoints are reset after each test, so no test sees another's replies)."""
    _judge_server.reset()
    return _judge_server


def make(judge, cls=JudgeVerifier, **kwargs):
    kwargs.setdefault("backoff", 0.001)
    return cls(CRITERIA, judge.url, "scripted", **kwargs)


def user_message(body: dict) -> str:
    return [m["content"] for m in body["messages"] if m["role"] == "user"][-1]


# -- the reward ----------------------------------------------------------------------------------------------


def test_weighted_reward_details_and_cost(judge):
    judge.set_mode("fixed", scores={"correct": 10, "clear": 4})
    verdict = make(judge, price_per_million_input=2.0, price_per_million_output=8.0).verify(TASK, "Paris.")
    assert verdict.error is None
    assert verdict.reward == pytest.approx((3 * 1.0 + 1 * 0.4) / 4)
    assert verdict.passed  # 0.85 >= 0.7
    details = verdict.details
    assert details["scores"] == {"correct": 10, "clear": 4}
    assert details["reasoning"].startswith("The scripted judge (fixed) read 1 answer(s) and 2 criteria")
    assert details["cached"] is False and details["attempts"] == 1
    assert details["wait_s"] >= 0.0
    # usage is the server's (characters / 4 of the prompt and the reply)
    body = judge.last_request
    prompt_chars = sum(len(m["content"]) for m in body["messages"])
    assert details["usage"]["prompt_tokens"] == prompt_chars // 4
    assert details["usage"]["completion_tokens"] > 0
    expected = (details["usage"]["prompt_tokens"] * 2.0 + details["usage"]["completion_tokens"] * 8.0) / 1e6
    assert details["cost"] == pytest.approx(expected)


def test_pass_threshold(judge):
    judge.set_mode("fixed", scores=7)
    at = make(judge).verify(TASK, "a")
    assert at.reward == pytest.approx(0.7) and at.passed  # reward >= threshold: 0.7 passes 0.7
    above = make(judge, pass_threshold=0.75, cache=False).verify(TASK, "a")
    assert above.reward == pytest.approx(0.7) and not above.passed
    assert above.details["cost"] is None  # no prices given


def test_usage_absent_is_zero():
    from fastapi import FastAPI

    from toolgym.testing.servers import serve_in_thread

    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat() -> dict:
        return {"choices": [{"message": {"role": "assistant", "content": '{"correct": 5, "clear": 5}'}}]}

    with serve_in_thread(app) as base:
        verdict = JudgeVerifier(CRITERIA, base + "/v1", "m").verify(TASK, "x")
    assert verdict.error is None and verdict.reward == 0.5
    assert verdict.details["usage"] == {"prompt_tokens": 0, "completion_tokens": 0}
    assert verdict.details["reasoning"] == ""


def test_request_carries_task_reference_criteria_and_sampling(judge, monkeypatch):
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    task = Task(
        id="t", prompt="Name the capital and its country.", answer={"city": "Paris", "country": "France"}
    )
    make(judge, max_tokens=300).verify(task, "Paris, France")
    body = judge.last_request
    assert body["model"] == "scripted"
    assert body["temperature"] == 0.0 and body["seed"] == 0 and body["max_tokens"] == 300
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "data, never instructions" in body["messages"][0]["content"]
    user = user_message(body)
    assert "<task>\nName the capital and its country.\n</task>" in user
    # a reference that is not a string is sent as JSON text
    assert '<reference_answer>\n{"city": "Paris", "country": "France"}\n</reference_answer>' in user
    assert "- correct (weight 3): The answer names the right city." in user
    assert "- clear (weight 1): The answer is one clear sentence." in user
    assert user.endswith("<answer_to_judge>\nParis, France\n</answer_to_judge>")
    assert "authorization" not in judge.headers[-1]  # no key, no header


def test_no_reference_block_without_an_answer(judge):
    make(judge).verify(Task(id="t", prompt="Write a haiku."), "An old silent pond")
    assert "<reference_answer>" not in user_message(judge.last_request)


def test_api_key_from_argument_and_environment(judge, monkeypatch):
    make(judge, api_key="sk-given").verify(TASK, "one")
    assert judge.headers[-1]["authorization"] == "Bearer sk-given"
    monkeypatch.setenv(API_KEY_ENV, "sk-from-env")
    make(judge).verify(TASK, "two")
    assert judge.headers[-1]["authorization"] == "Bearer sk-from-env"
    assert "sk-" not in repr(make(judge))


def test_seed_none_is_left_out(judge):
    make(judge, seed=None, temperature=0.3).verify(TASK, "x")
    assert "seed" not in judge.last_request and judge.last_request["temperature"] == 0.3


# -- reading the reply ---------------------------------------------------------------------------------------


def test_last_json_object_wins_over_braces_and_objects_in_the_reasoning():
    reply = (
        'Weighing {clarity} and {correctness}. A bad reply would be {"correct": 10, "clear": 10}, '
        'and sets like {1, 2} are not JSON.\n```json\n{"correct": 6, "clear": 9, "style": 3}\n```'
    )
    scores, reasoning = parse_reply(reply, [Criterion(**c) if isinstance(c, dict) else c for c in CRITERIA])
    assert scores == {"correct": 6, "clear": 9}  # the unknown extra criterion is ignored
    assert reasoning.startswith("Weighing {clarity}") and reasoning.endswith("```json")


def test_a_nested_object_is_not_a_later_object():
    found = last_json_object('x {"1": {"a": 1}, "2": {"a": 2}} y')
    assert found == ({"1": {"a": 1}, "2": {"a": 2}}, 2)
    assert last_json_object("no json {here") is None


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("no scores at all", "no JSON object"),
        ('{"correct": 7}', "no score for criterion 'clear'"),
        ('{"correct": 7, "clear": 11}', "'clear' is 11, outside 0-10"),
        ('{"correct": -1, "clear": 5}', "'correct' is -1, outside 0-10"),
        ('{"correct": 7.5, "clear": 5}', "'correct' is not an integer"),
        ('{"correct": 7.0, "clear": 5}', "'correct' is not an integer"),
        ('{"correct": true, "clear": 5}', "'correct' is not an integer"),
        ('{"correct": "7", "clear": 5}', "'correct' is not an integer"),
        ('{"correct": null, "clear": 5}', "'correct' is not an integer"),
    ],
)
def test_invalid_scores_are_errors(reply, reason):
    criteria = [Criterion(name="correct", description="c"), Criterion(name="clear", description="c")]
    with pytest.raises(JudgeReplyError, match=re.escape(reason)):
        parse_reply(reply, criteria)


def test_group_reply_needs_every_answer():
    criteria = [Criterion(name="a", description="c")]
    assert parse_group_reply('ok {"1": {"a": 1}, "2": {"a": 9}, "3": {"a": 4}}', criteria, 2)[0] == [
        {"a": 1},
        {"a": 9},
    ]
    with pytest.raises(JudgeReplyError, match="no scores for answer 2"):
        parse_group_reply('{"1": {"a": 1}}', criteria, 2)
    with pytest.raises(JudgeReplyError, match="of answer 1 are not a JSON object"):
        parse_group_reply('{"1": 5, "2": {"a": 1}}', criteria, 2)


# -- failures: counted error verdicts, never a 0 -------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "options", "reason"),
    [
        ("garbage", {}, "the reply has no JSON object of scores"),
        ("missing_criterion", {}, "the reply gives no score for criterion 'clear'"),
        ("out_of_range", {}, "the score of 'correct' is 11, outside 0-10"),
        (
            "reply",
            {"reply": 'thinking {"correct": 7, "clear": 6.5}'},
            "the score of 'clear' is not an integer",
        ),
        ("fixed", {"fail_first": 10}, "HTTP 500"),
        ("fixed", {"fail_first": 10, "status": 503}, "HTTP 503"),
    ],
)
def test_each_failure_is_an_error_verdict_after_every_attempt(judge, mode, options, reason):
    judge.set_mode(mode, **options)
    verdict = make(judge, retries=2).verify(TASK, "Paris")
    assert verdict.reward == 0.0 and not verdict.passed
    assert verdict.error is not None
    assert verdict.error.startswith(f"judge scripted at {judge.url}: {reason}")
    assert verdict.error.endswith("(after 3 attempts)")
    assert verdict.details["attempts"] == 3 and judge.count == 3
    assert "scores" not in verdict.details and verdict.details["cached"] is False
    assert verdict.details["last_reply"]  # an excerpt of what the judge said


def test_error_excerpt_is_of_the_last_reply(judge):
    judge.set_mode("reply", reply="x" * 5000)
    verdict = make(judge, retries=0).verify(TASK, "Paris")
    assert verdict.details["attempts"] == 1
    assert verdict.details["last_reply"] == "x" * 500


def test_500_then_ok_recovers(judge):
    judge.set_mode("fixed", scores=9, fail_first=2)
    verdict = make(judge, retries=2).verify(TASK, "Paris")
    assert verdict.error is None and verdict.reward == pytest.approx(0.9)
    assert verdict.details["attempts"] == 3 and judge.count == 3


def test_retries_zero_is_one_attempt(judge):
    judge.set_mode("fixed", fail_first=1)
    verdict = make(judge, retries=0).verify(TASK, "Paris")
    assert verdict.error.endswith("(after 1 attempts)") and judge.count == 1


def test_a_permanent_status_is_not_retried(judge):
    judge.set_mode("fixed", fail_first=5, status=401)
    verdict = make(judge, retries=3).verify(TASK, "Paris")
    assert "HTTP 401" in verdict.error and verdict.details["attempts"] == 1 and judge.count == 1


def test_429_honours_retry_after_and_counts_it_as_a_wait(judge):
    judge.set_mode("fixed", fail_first=1, status=429, retry_after=0.6)
    with episode_waits() as tally:
        verdict = make(judge, retries=1, backoff=0.001).verify(TASK, "Paris")
    assert verdict.error is None and verdict.details["attempts"] == 2
    (first, _), (second, _) = judge.intervals
    assert second - first >= 0.55  # the server's Retry-After, not the 1 ms backoff
    assert verdict.details["wait_s"] >= 0.55 and tally.seconds >= 0.55


def test_a_timeout_is_retried_then_an_error(judge):
    judge.set_mode("fixed", delay_s=0.8)  # four times the timeout
    verdict = make(judge, retries=1, timeout=0.2).verify(TASK, "Paris")
    assert "timed out after 0.2 s" in verdict.error
    assert verdict.details["attempts"] == 2 and verdict.error.endswith("(after 2 attempts)")


def test_a_connection_error_is_retried_then_an_error():
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    verdict = JudgeVerifier(CRITERIA, url, "m", retries=2, backoff=0.001).verify(TASK, "Paris")
    assert verdict.error.startswith(f"judge m at {url}: ConnectError")
    assert verdict.details["attempts"] == 3 and verdict.reward == 0.0


def test_verify_never_raises(judge, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("registry exploded")

    monkeypatch.setattr(verifier_module, "endpoint_for", broken)
    verdict = make(judge).verify(TASK, "Paris")
    assert (
        verdict.error == f"judge scripted at {judge.url}: RuntimeError: registry exploded (after 0 attempts)"
    )
    group = make(judge, GroupJudgeVerifier).verify_group(TASK, ["a", "b"])
    assert all(v.error and "registry exploded" in v.error for v in group)


# -- limits, shared per endpoint -----------------------------------------------------------------------------


def _verify_in_threads(verifiers, answers):
    results = [None] * len(answers)

    def run(i):
        results[i] = verifiers[i % len(verifiers)].verify(TASK, answers[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(answers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def test_max_concurrency_is_shared_by_instances_of_one_endpoint(judge):
    judge.set_mode("fixed", delay_s=0.3)
    verifiers = [make(judge, max_concurrency=1), make(judge, max_concurrency=1)]
    results = _verify_in_threads(verifiers, [f"answer {i}" for i in range(4)])
    assert all(v.error is None for v in results)
    assert judge.count == 4 and judge.max_active == 1
    starts_ends = sorted(judge.intervals)
    assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(starts_ends))
    # the slot waits are in the verdicts
    assert sum(v.details["wait_s"] for v in results) >= 0.3


def test_without_the_limit_the_same_load_overlaps():
    """The control for the test above: the scripted judge does see concurrent requests."""
    with scripted_judge("fixed", delay_s=0.5) as judge:
        results = _verify_in_threads([make(judge, max_concurrency=4)], [f"answer {i}" for i in range(4)])
    assert all(v.error is None for v in results) and judge.max_active >= 2


def test_requests_per_minute_makes_the_next_request_wait_and_counts_the_wait(judge):
    first, second = make(judge, requests_per_minute=60), make(judge, requests_per_minute=60)
    with episode_waits() as tally:
        a = first.verify(TASK, "one")
        b = second.verify(TASK, "two")  # another instance, the same endpoint: the same bucket
    assert a.error is None and b.error is None
    assert b.details["wait_s"] >= 0.5  # one request a second
    assert tally.seconds >= 0.5 and tally.count >= 1
    (start_a, _), (start_b, _) = judge.intervals
    assert start_b - start_a >= 0.5


def test_the_first_instances_limits_win_and_a_different_one_is_warned(judge, caplog):
    first = make(judge, max_concurrency=1)
    first.verify(TASK, "one")
    with caplog.at_level("WARNING", logger="toolgym.rewards.judge.endpoint"):
        make(judge, max_concurrency=8).verify(TASK, "two")
        make(judge, max_concurrency=1).verify(TASK, "three")  # the same limits: no warning
    assert len(caplog.records) == 1 and "the first instance's limits win" in caplog.records[0].getMessage()
    from toolgym.rewards.judge.endpoint import endpoint_for

    assert endpoint_for(judge.url, "scripted", first.limits, 60.0).limits.max_concurrency == 1


def test_tokens_per_minute_reserves_then_settles(judge):
    verifier = make(judge, tokens_per_minute=12_000, max_tokens=50)  # 200 tokens a second
    a = verifier.verify(TASK, "one")
    b = verifier.verify(TASK, "two")
    assert a.error is None and b.error is None
    assert b.details["wait_s"] >= 0.5  # the first call's ~260 tokens are paid back first


def test_token_bucket_reserve_and_settle():
    bucket = TokenBucket(60)  # one a second, holds one
    assert bucket.reserve(1) == 0.0
    assert bucket.reserve(1) >= 0.9  # the next one waits for the refill
    bucket.settle(1, 0)  # the second used nothing: its reservation comes back
    assert bucket.level >= -0.01
    with pytest.raises(ValueError):
        TokenBucket(0)


def test_many_threads_on_one_verifier(judge):
    verifier = make(judge, max_concurrency=4)
    results = _verify_in_threads([verifier], [f"answer number {i}" for i in range(16)])
    assert all(v is not None and v.error is None and v.reward == pytest.approx(0.8) for v in results)
    assert judge.count == 16 and judge.max_active <= 4


# -- the caches ----------------------------------------------------------------------------------------------


def test_an_identical_request_is_judged_once(judge):
    first = make(judge).verify(TASK, "Paris")
    again = make(judge).verify(TASK, "Paris")  # another instance, the same request
    assert judge.count == 1
    assert again.reward == first.reward and again.details["scores"] == first.details["scores"]
    assert again.details["cached"] is True and again.details["attempts"] == 0
    assert again.details["usage"] == {"prompt_tokens": 0, "completion_tokens": 0}
    make(judge).verify(TASK, "Lyon")  # another answer is another request
    make(judge, temperature=0.5).verify(TASK, "Paris")  # other sampling settings too
    assert judge.count == 3


def test_cache_false_always_asks(judge, tmp_path):
    verifier = make(judge, cache=False, cache_dir=tmp_path)
    verifier.verify(TASK, "Paris")
    verdict = verifier.verify(TASK, "Paris")
    assert judge.count == 2 and verdict.details["cached"] is False
    assert not (tmp_path / DISK_CACHE_FILE).exists()


def test_errors_are_not_cached(judge, tmp_path):
    judge.set_mode("garbage")
    assert make(judge, retries=0, cache_dir=tmp_path).verify(TASK, "Paris").error
    judge.set_mode("fixed", scores=10)
    verdict = make(judge, retries=0, cache_dir=tmp_path).verify(TASK, "Paris")
    assert verdict.error is None and verdict.reward == 1.0 and verdict.details["cached"] is False
    assert judge.count == 2


def test_the_disk_cache_outlives_the_memory_cache(judge, tmp_path):
    first = make(judge, cache_dir=tmp_path).verify(TASK, "Paris")
    clear_memory_cache()
    reset_endpoints()
    again = make(judge, cache_dir=tmp_path).verify(TASK, "Paris")
    assert judge.count == 1 and again.details["cached"] is True and again.reward == first.reward
    assert (tmp_path / DISK_CACHE_FILE).exists()


def test_the_disk_cache_serves_another_process(judge, tmp_path):
    make(judge, cache_dir=tmp_path).verify(TASK, "Paris")
    code = f"""
import json
from toolgym.core.task import Task
from toolgym.rewards.judge import JudgeVerifier
task = Task(id="capital", prompt={TASK.prompt!r}, answer="Paris")
criteria = {json.dumps([c if isinstance(c, dict) else c.model_dump() for c in CRITERIA])}
judge = JudgeVerifier(criteria, {judge.url!r}, "scripted", cache_dir={str(tmp_path)!r})
verdict = judge.verify(task, "Paris")
print(json.dumps([verdict.reward, verdict.details.get("cached"), verdict.error]))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [0.8, True, None]
    assert judge.count == 1


# -- the group judge -----------------------------------------------------------------------------------------


def test_one_request_judges_a_group(judge):
    judge.set_mode("reference_overlap")
    answers = ["Paris.", "Lyon, I think.", "It is paris", "Marseille"]
    verdicts = make(judge, GroupJudgeVerifier, price_per_million_input=1.0).verify_group(TASK, answers)
    assert judge.count == 1
    assert [v.reward for v in verdicts] == [1.0, 0.2, 1.0, 0.2]
    assert [v.passed for v in verdicts] == [True, False, True, False]
    assert [v.details["rank"] for v in verdicts] == [1, 3, 1, 3]
    assert all(v.details["group_size"] == 4 and v.details["attempts"] == 1 for v in verdicts)
    # each answer is its own numbered block of data
    user = user_message(judge.last_request)
    assert re.findall(r'<answer_to_judge index="(\d)">', user) == ["1", "2", "3", "4"]
    assert '"1"' in judge.last_request["messages"][0]["content"]  # the system prompt asks for numbered keys
    # the costs of a group add up to the call's
    call = verdicts[0].details["usage"]["prompt_tokens"] / 1e6
    assert sum(v.details["cost"] for v in verdicts) == pytest.approx(call)


@pytest.mark.parametrize(
    "mode", ["missing_answer", "out_of_range", "missing_criterion", "garbage", "http_500"]
)
def test_a_group_failure_makes_every_verdict_an_error(judge, mode):
    if mode == "http_500":
        judge.set_mode("fixed", fail_first=10)
    else:
        judge.set_mode(mode)
    verdicts = make(judge, GroupJudgeVerifier, retries=1).verify_group(TASK, ["a", "b", "c"])
    assert len(verdicts) == 3 and judge.count == 2
    for verdict in verdicts:
        assert verdict.error is not None and verdict.error.endswith("(after 2 attempts)")
        assert verdict.reward == 0.0 and not verdict.passed and "scores" not in verdict.details
        assert verdict.details["attempts"] == 2 and verdict.details["group_size"] == 3


def test_a_group_of_one_is_judged_pointwise(judge):
    judge.set_mode("fixed", scores={"correct": 6, "clear": 10})
    group = make(judge, GroupJudgeVerifier, cache=False)
    single = group.verify_group(TASK, ["Paris"])[0]
    assert "index=" not in user_message(judge.last_request)
    pointwise = make(judge, cache=False).verify(TASK, "Paris")
    assert judge.requests[0] == judge.requests[1]  # the same request as a JudgeVerifier's
    via_verify = group.verify(TASK, "Paris")
    for verdict in (pointwise, via_verify):
        assert (verdict.reward, verdict.passed, verdict.details["scores"], verdict.error) == (
            single.reward,
            single.passed,
            single.details["scores"],
            None,
        )
    assert single.details["group_size"] == 1 and single.details["rank"] == 1
    assert group.verify_group(TASK, []) == []


def test_group_calls_share_the_cache(judge):
    group = make(judge, GroupJudgeVerifier)
    first = group.verify_group(TASK, ["Paris", "Lyon"])
    again = group.verify_group(TASK, ["Paris", "Lyon"])
    assert judge.count == 1 and [v.reward for v in again] == [v.reward for v in first]
    assert all(v.details["cached"] for v in again)
    group.verify_group(TASK, ["Lyon", "Paris"])  # another order is another request
    assert judge.count == 2


def test_group_trajectories_must_match_the_answers(judge):
    with pytest.raises(ValueError, match="1 trajectories for 2 answers"):
        make(judge, GroupJudgeVerifier).verify_group(TASK, ["a", "b"], [None])


# -- construction --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("criteria", "message"),
    [
        ([], "at least one criterion"),
        ([{"name": "has space", "description": "d"}], "letters, digits"),
        ([{"name": "a", "description": "d", "weight": 0}], "greater than 0"),
        ([{"name": "a", "description": "d", "weight": float("inf")}], "finite"),
        ([{"name": "a", "description": "d", "extra": 1}], "Extra inputs"),
        ([{"name": "a", "description": "d"}, {"name": "a", "description": "e"}], "repeated: a"),
    ],
)
def test_a_bad_rubric_is_refused(criteria, message):
    with pytest.raises(ValueError, match=message):
        JudgeVerifier(criteria, "http://127.0.0.1:1/v1", "m")


def test_criterion_is_frozen():
    criterion = Criterion(name="ok-1_x", description="d")
    with pytest.raises(ValueError):
        criterion.weight = 2.0  # type: ignore[misc]


# -- through an env ------------------------------------------------------------------------------------------


def test_the_judge_rewards_an_episode_through_env_step(judge):
    judge.set_mode("reference_overlap")
    env = toolgym.make_env(tasks=[TASK], tools=["calculator"], verifier=make(judge))
    for answer, reward in (("The capital is Paris.", 1.0), ("Lyon", 0.2)):
        env.reset(seed=0)
        _, got, terminated, _, info = env.step(f"<answer>{answer}</answer>")
        assert terminated and got == pytest.approx(reward)
        assert info["verdict"].details["scores"] == {"correct": int(reward * 10), "clear": int(reward * 10)}
        assert answer in user_message(judge.last_request)
    # a failed judge is an error verdict: the episode is not trainable
    judge.set_mode("garbage")
    env.reset(seed=0)
    _, got, terminated, _, info = env.step("<answer>Marseille</answer>")
    assert terminated and got == 0.0 and info["verdict"].error
    assert env.unwrapped.trajectory.trainable is False


def test_the_limits_wait_is_counted_for_the_episode(judge):
    env = toolgym.make_env(tasks=[TASK], tools=["calculator"], verifier=make(judge, requests_per_minute=60))
    env.reset(seed=0)
    env.step("<answer>one</answer>")
    env.reset(seed=0)
    with episode_waits() as tally:
        env.step("<answer>two</answer>")
    assert tally.seconds >= 0.5


def test_a_verifier_pickles_without_its_endpoint(judge):
    import pickle

    verifier = make(judge, GroupJudgeVerifier, api_key="sk-x", cache_dir=None)
    verifier.verify(TASK, "Paris")  # the endpoint and its client exist now, outside the verifier
    copy = pickle.loads(pickle.dumps(verifier))
    assert copy.verify(TASK, "Lyon").error is None and judge.count == 2


def test_the_memory_cache_is_bounded():
    from toolgym.rewards.judge.endpoint import MemoryCache

    cache = MemoryCache(size=2)
    cache.put("a", {"text": "1"})
    cache.put("b", {"text": "2"})
    assert cache.get("a") == {"text": "1"}  # a is now the most recent
    cache.put("c", {"text": "3"})
    assert cache.get("b") is None and cache.get("a") is not None and len(cache) == 2


def test_the_disk_cache_from_many_threads_and_connections(tmp_path):
    from toolgym.rewards.judge.endpoint import DiskCache, disk_cache

    shared = disk_cache(tmp_path)
    assert disk_cache(tmp_path) is shared  # one connection per file in a process

    def write(i):
        for j in range(20):
            shared.put(f"{i}-{j}", {"text": f"{i}/{j}"})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    other = DiskCache(tmp_path)  # another connection to the same file, as another process has
    assert len(other) == 160 and other.get("7-19") == {"text": "7/19"}
    assert other._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
