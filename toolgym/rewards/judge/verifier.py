"""LLM-judge verifiers: an OpenAI-compatible chat model scores an answer against a rubric of criteria
(``JudgeVerifier``), or all the answers of a group to one task relative to each other in one call
(``GroupJudgeVerifier``, RULER's idea). What is sent and read is in ``toolgym.rewards.judge.prompt``; the
limits, the HTTP client and the caches each endpoint shares are in ``toolgym.rewards.judge.endpoint``.

The reward is Σ weight·score/10 ÷ Σ weight over the criteria (scores are integers 0-10); ``passed`` is
``reward >= pass_threshold``. A judge that cannot give valid scores (an HTTP error, a timeout, a reply with
no JSON object, a criterion missing, a score that is not an integer in 0-10) is retried ``retries`` more
times and then gives an error verdict (``Verdict.error`` set: trainers leave the episode out of the loss),
never a score of 0.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.core.waits import add_wait
from toolgym.rewards.base import Verifier
from toolgym.rewards.judge.endpoint import MEMORY_CACHE, Limits, cache_key, disk_cache, endpoint_for
from toolgym.rewards.judge.prompt import (
    Criterion,
    JudgeReplyError,
    as_criteria,
    parse_group_reply,
    parse_reply,
    reference_text,
    render_group_messages,
    render_messages,
    weighted_reward,
)
from toolgym.util.retry import backoff_delay, is_retryable_status

#: the environment variable a judge's API key is read from when ``api_key`` is not given
API_KEY_ENV = "TOOLGYM_JUDGE_API_KEY"
#: the longest ``Retry-After`` honoured, in seconds
MAX_RETRY_AFTER_S = 30.0
#: the most of a failed reply kept in an error verdict's ``details["last_reply"]``
REPLY_EXCERPT_CHARS = 500

T = TypeVar("T")


@dataclass
class _Outcome:
    """One judging call: its parsed value (``None`` on failure) and what it cost."""

    value: Any = None
    error: str | None = None
    attempts: int = 0
    cached: bool = False
    wait_s: float = 0.0
    usage: dict[str, int] = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0})
    last_reply: str = ""
    cache_entry: dict[str, Any] = field(default_factory=dict)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    with contextlib.suppress(ValueError):  # an HTTP date instead of seconds: keep the backoff
        seconds = float(value)
        if math.isfinite(seconds) and seconds >= 0:
            return min(seconds, MAX_RETRY_AFTER_S)
    return None


class JudgeVerifier(Verifier):
    """An OpenAI-compatible chat model as the verifier: it scores the answer 0-10 on each criterion.

    ``POST {base_url}/chat/completions`` with ``model``, the rendered ``messages``, ``temperature``,
    ``seed`` and ``max_tokens`` (deterministic by default: temperature 0, seed 0), and
    ``Authorization: Bearer <api_key>`` when there is a key (``api_key``, else the environment variable
    ``TOOLGYM_JUDGE_API_KEY`` at call time). ``base_url`` is the API root, e.g. ``http://host:8000/v1``.

    ``details`` of a verdict: ``scores`` (criterion -> int), ``reasoning`` (the reply before its JSON, cut
    to 2,000 characters), ``usage`` (``prompt_tokens``, ``completion_tokens``, summed over every attempt;
    0 for a cached verdict), ``cost`` (dollars, from ``price_per_million_input`` / ``_output``; ``None``
    without prices), ``cached``, ``attempts`` (HTTP requests sent; 0 for a cached verdict) and ``wait_s``
    (seconds waiting for the endpoint's limits and a 429's ``Retry-After``). An error verdict has
    ``attempts``, ``usage``, ``cost``, ``wait_s`` and ``last_reply`` (an excerpt of the last reply or error
    body).

    Failures are retried ``retries`` more times with ``backoff_delay(attempt, backoff)`` between attempts (a
    429's or 503's ``Retry-After``, at most 30 s, when longer): a timeout, a connection error, a retryable
    status (408, 425, 429, 5xx but 501/505) and a reply without valid scores; any other status (400, 401,
    404...) is permanent and fails at once. ``verify`` never raises.

    ``max_concurrency``, ``requests_per_minute`` and ``tokens_per_minute`` are per endpoint and per process:
    every verifier naming the same ``(base_url, model)`` shares them, and the first one created sets them
    (see ``toolgym.rewards.judge.endpoint``). ``cache`` keeps valid replies in memory (per process, shared)
    and, with ``cache_dir``, on disk across runs; only valid replies are kept, never errors.
    """

    name = "judge"

    def __init__(
        self,
        criteria: Sequence[Criterion | dict[str, Any]],
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
        max_concurrency: int = 16,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        cache: bool = True,
        cache_dir: str | Path | None = None,
        temperature: float = 0.0,
        seed: int | None = 0,
        max_tokens: int = 1024,
        pass_threshold: float = 0.7,
        price_per_million_input: float | None = None,
        price_per_million_output: float | None = None,
    ):
        self.criteria = as_criteria(criteria)
        if not base_url or not isinstance(base_url, str):
            raise ValueError("base_url is the judge's OpenAI-compatible API root, e.g. http://host:8000/v1")
        if not model:
            raise ValueError("model is the judge model's name as its server knows it")
        if retries < 0 or max_concurrency < 1 or max_tokens < 1 or not timeout > 0 or backoff < 0:
            raise ValueError(
                "retries >= 0, max_concurrency >= 1, max_tokens >= 1, timeout > 0 and backoff >= 0, got "
                f"{retries}, {max_concurrency}, {max_tokens}, {timeout}, {backoff}"
            )
        for what, rate in (
            ("requests_per_minute", requests_per_minute),
            ("tokens_per_minute", tokens_per_minute),
        ):
            if rate is not None and not rate > 0:
                raise ValueError(f"{what} is > 0 (or None for no limit), got {rate}")
        if not 0.0 <= pass_threshold <= 1.0:
            raise ValueError(f"pass_threshold is a reward in [0, 1], got {pass_threshold}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.limits = Limits(max_concurrency, requests_per_minute, tokens_per_minute)
        self.cache = cache
        self.cache_dir = Path(cache_dir) if cache_dir is not None and cache else None
        self.temperature = temperature
        self.seed = seed
        self.max_tokens = max_tokens
        self.pass_threshold = pass_threshold
        self.price_per_million_input = price_per_million_input
        self.price_per_million_output = price_per_million_output

    def __repr__(self) -> str:
        names = ", ".join(c.name for c in self.criteria)
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, criteria=[{names}])"

    # -- the verifier -------------------------------------------------------------------------------------

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        try:
            return self._verify_one(task, answer)
        except Exception as exc:  # never raises: a bug here is an error verdict, not a crash of env.step
            return self._error_verdict(_Outcome(error=f"{type(exc).__name__}: {exc}"), {})

    def _verify_one(self, task: Task, answer: str) -> Verdict:
        messages = render_messages(task.prompt, reference_text(task.answer), self.criteria, str(answer))
        outcome = self._call(messages, lambda reply: parse_reply(reply, self.criteria))
        if outcome.error is not None:
            return self._error_verdict(outcome, {})
        scores, reasoning = outcome.value
        return self._verdict(scores, reasoning, outcome, self._cost(outcome.usage), {})

    def _verdict(
        self,
        scores: dict[str, int],
        reasoning: str,
        outcome: _Outcome,
        cost: float | None,
        extra: dict[str, Any],
    ) -> Verdict:
        reward = round(weighted_reward(scores, self.criteria), 12)
        details = {
            "scores": scores,
            "reasoning": reasoning,
            "usage": dict(outcome.usage),
            "cost": cost,
            "cached": outcome.cached,
            "attempts": outcome.attempts,
            "wait_s": round(outcome.wait_s, 4),
            **extra,
        }
        return Verdict(reward=reward, passed=reward >= self.pass_threshold, details=details)

    def _error_verdict(self, outcome: _Outcome, extra: dict[str, Any]) -> Verdict:
        error = f"judge {self.model} at {self.base_url}: {outcome.error} (after {outcome.attempts} attempts)"
        details = {
            "attempts": outcome.attempts,
            "last_reply": outcome.last_reply,
            "usage": dict(outcome.usage),
            "cost": self._cost(outcome.usage),
            "cached": False,
            "wait_s": round(outcome.wait_s, 4),
            **extra,
        }
        return Verdict(reward=0.0, passed=False, details=details, error=error)

    def _cost(self, usage: Mapping[str, int]) -> float | None:
        if self.price_per_million_input is None and self.price_per_million_output is None:
            return None
        cost = usage["prompt_tokens"] * (self.price_per_million_input or 0.0)
        cost += usage["completion_tokens"] * (self.price_per_million_output or 0.0)
        return cost / 1e6

    # -- one call to the judge ----------------------------------------------------------------------------

    def _body(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        return body

    def _call(self, messages: list[dict[str, str]], parse: Callable[[str], T]) -> _Outcome:
        """Send ``messages`` (or read their cached reply) and ``parse`` the reply's text; retry failures."""
        body = self._body(messages)
        key = cache_key(self.base_url, body) if self.cache else None
        disk = disk_cache(self.cache_dir) if self.cache_dir is not None else None
        if key is not None:
            hit = MEMORY_CACHE.get(key)
            if hit is None and disk is not None:
                hit = disk.get(key)
                if hit is not None:
                    MEMORY_CACHE.put(key, hit)
            if hit is not None:
                with contextlib.suppress(JudgeReplyError, KeyError, TypeError):
                    return _Outcome(value=parse(hit["text"]), cached=True)

        endpoint = endpoint_for(self.base_url, self.model, self.limits, self.timeout)
        estimate = sum(len(m["content"]) for m in messages) / 4 + self.max_tokens
        api_key = self._api_key if self._api_key is not None else os.environ.get(API_KEY_ENV)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        outcome = _Outcome()
        retry_after: float | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                delay = backoff_delay(attempt, self.backoff)
                if retry_after is not None and retry_after >= delay:  # the server's wait is for capacity
                    delay = retry_after
                    outcome.wait_s += delay
                    add_wait(delay)
                time.sleep(delay)
            waited = endpoint.acquire(estimate)
            outcome.wait_s += waited
            add_wait(waited)
            outcome.attempts += 1
            used: float | None = None
            try:
                used, retryable, retry_after = self._attempt(endpoint.http, body, headers, parse, outcome)
            finally:
                endpoint.release(estimate, used)
            if outcome.error is None:
                if key is not None:
                    MEMORY_CACHE.put(key, outcome.cache_entry)
                    if disk is not None:
                        disk.put(key, outcome.cache_entry)
                return outcome
            if not retryable:
                break
        return outcome

    def _attempt(
        self,
        http: Any,
        body: dict[str, Any],
        headers: dict[str, str],
        parse: Callable[[str], T],
        out: _Outcome,
    ) -> tuple[float | None, bool, float | None]:
        """One request. Fills ``out`` (``value`` and ``cache_entry``, or ``error`` and ``last_reply``; the
        usage); returns the tokens it used (``None``: unknown), whether a failure is worth another attempt,
        and the server's ``Retry-After``."""
        import httpx

        out.error = None
        try:
            response = http.post("/chat/completions", json=body, headers=headers, timeout=self.timeout)
        except httpx.TimeoutException as exc:
            out.error = f"timed out after {self.timeout:g} s ({type(exc).__name__})"
            return None, True, None
        except httpx.HTTPError as exc:
            out.error = f"{type(exc).__name__}: {exc}"
            return None, True, None
        if response.status_code != 200:
            out.last_reply = response.text[:REPLY_EXCERPT_CHARS]
            out.error = f"HTTP {response.status_code}: {out.last_reply[:200]}"
            retry_after = _retry_after(response.headers.get("retry-after"))
            return None, is_retryable_status(response.status_code), retry_after
        try:
            reply = response.json()
            text = reply["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            out.last_reply = response.text[:REPLY_EXCERPT_CHARS]
            out.error = "the reply is not a chat completion with choices[0].message.content"
            return None, True, None
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        spent = {
            "prompt_tokens": _int(usage.get("prompt_tokens")),
            "completion_tokens": _int(usage.get("completion_tokens")),
        }
        for name, tokens in spent.items():
            out.usage[name] += tokens
        used = float(sum(spent.values())) or None
        if not isinstance(text, str):
            out.last_reply = response.text[:REPLY_EXCERPT_CHARS]
            out.error = "the reply's message has no text content"
            return used, True, None
        try:
            out.value = parse(text)
        except JudgeReplyError as exc:
            out.last_reply = text[:REPLY_EXCERPT_CHARS]
            out.error = str(exc)
            return used, True, None
        out.last_reply = ""
        out.cache_entry = {"text": text, "usage": spent}
        return used, True, None


class GroupJudgeVerifier(JudgeVerifier):
    """All the answers of a group (one task) judged in one call, relative to each other (RULER's idea).

    The prompt numbers the answers from 1, each delimited as data; the judge replies with its reasoning then
    one JSON object ``{"1": {criterion: score, ...}, "2": {...}, ...}``. Each answer's verdict is computed
    as ``JudgeVerifier``'s, with ``details`` also ``group_size`` and ``rank`` (1 for the best reward; equal
    rewards share the better rank). ``usage`` is the whole call's, ``cost`` this answer's share of it (so
    the costs of a group add up to the call's). Any failure (an answer's scores missing or invalid, an HTTP
    error) makes every verdict of the group an error verdict. A group of one is judged pointwise, so
    ``verify(task, answer) == verify_group(task, [answer])[0]``. Group calls share the endpoint's limits and
    the caches with pointwise ones.
    """

    name = "group_judge"

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        return self.verify_group(task, [answer], [trajectory])[0]

    def verify_group(
        self,
        task: Task,
        answers: Sequence[str],
        trajectories: Sequence[Trajectory | None] | None = None,
    ) -> list[Verdict]:
        """One verdict per answer, in order (an empty group gives an empty list)."""
        answers = [str(a) for a in answers]
        if trajectories is not None and len(trajectories) != len(answers):
            raise ValueError(f"{len(trajectories)} trajectories for {len(answers)} answers")
        size = len(answers)
        if size == 0:
            return []
        extra = {"group_size": size}
        try:
            if size == 1:
                verdict = self._verify_one(task, answers[0])
                details = {**verdict.details, **extra}
                if verdict.error is None:
                    details["rank"] = 1
                return [verdict.model_copy(update={"details": details})]
            return self._verify_many(task, answers)
        except Exception as exc:  # never raises, as verify
            error = self._error_verdict(_Outcome(error=f"{type(exc).__name__}: {exc}"), extra)
            return [error] * size

    def _verify_many(self, task: Task, answers: list[str]) -> list[Verdict]:
        size = len(answers)
        messages = render_group_messages(task.prompt, reference_text(task.answer), self.criteria, answers)
        outcome = self._call(messages, lambda reply: parse_group_reply(reply, self.criteria, size))
        if outcome.error is not None:
            return [self._error_verdict(outcome, {"group_size": size})] * size
        all_scores, reasoning = outcome.value
        cost = self._cost(outcome.usage)
        share = None if cost is None else cost / size
        rewards = [round(weighted_reward(s, self.criteria), 12) for s in all_scores]
        return [
            self._verdict(
                scores,
                reasoning,
                outcome,
                share,
                {"group_size": size, "rank": 1 + sum(r > reward for r in rewards)},
            )
            for scores, reward in zip(all_scores, rewards, strict=True)
        ]
