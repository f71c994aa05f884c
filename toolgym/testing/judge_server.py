"""A scripted OpenAI-compatible judge for tests, examples and benchmarks of the LLM-judge verifiers
(``toolgym.rewards.judge``): ``POST /v1/chat/completions`` answered by rules, not a model.

::

    with scripted_judge(mode="reference_overlap") as judge:
        verifier = JudgeVerifier(criteria, judge.url, "scripted")
        ...
        judge.set_mode("garbage")
        assert judge.count == 1 and "answer_to_judge" in judge.last_request["messages"][1]["content"]

How it reads a request: it takes the last ``user`` message (the judge prompt of
``toolgym.rewards.judge.prompt``), the criteria's names from the ``- <name> (weight ...)`` lines of its
``<criteria>`` block, the reference from ``<reference_answer>``, and the answers from its
``<answer_to_judge>`` blocks. A prompt whose answers are numbered (``<answer_to_judge index="1">``, ...)
is a group prompt: the reply's JSON then maps each answer's number to its scores; otherwise it maps the
criteria to the scores of the one answer. Every reply is a line of reasoning, then the JSON object, and
carries ``usage`` (characters / 4 of the prompt and of the reply).

Modes (``set_mode(mode, **options)``; options not given go back to their defaults):

- ``fixed``: every criterion of every answer scores ``scores`` (an int, default 8, or a dict criterion ->
  int; a criterion missing from the dict scores 8);
- ``reference_overlap``: a criterion scores 10 when every word of the reference answer appears in the
  judged answer, else 2. Words are the lowercase ``\\w+`` runs (``re.findall(r"\\w+", text.lower())``), so
  case, punctuation and order do not matter, and an answer with more words still matches; a prompt with no
  reference scores 2;
- ``garbage``: a reply with no JSON object;
- ``missing_criterion``: as ``fixed``, without the last criterion (of every answer);
- ``out_of_range``: as ``fixed``, the first criterion scoring 11;
- ``missing_answer``: a group reply without the last answer's scores (a pointwise reply as ``fixed``);
- ``reply``: the text ``reply`` as it is (e.g. several JSON objects).

Options for any mode: ``fail_first=N`` answers the next N requests with HTTP ``status`` (default 500; with
``retry_after``, a ``Retry-After`` header: e.g. ``status=429, retry_after=1``) before the mode's replies;
``delay_s`` sleeps that long before each reply (a slow judge). ``judge.requests`` holds every request body
received (failed ones too), ``judge.headers`` their headers (lowercase names), ``judge.count`` their number,
``judge.max_active`` the most requests in flight at once and ``judge.intervals`` each request's (start, end)
``time.monotonic()``.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from toolgym.rewards.judge.prompt import ANSWER_TAG
from toolgym.testing.servers import serve_in_thread

MODES = (
    "fixed",
    "reference_overlap",
    "garbage",
    "missing_criterion",
    "out_of_range",
    "missing_answer",
    "reply",
)
DEFAULT_SCORE = 8
_CRITERIA = re.compile(r"<criteria>\n(.*?)\n</criteria>", re.DOTALL)
_CRITERION = re.compile(r"^- ([A-Za-z0-9_-]+) \(weight ", re.MULTILINE)
_REFERENCE = re.compile(r"<reference_answer>\n(.*?)\n</reference_answer>", re.DOTALL)
_ANSWER = re.compile(rf'<{ANSWER_TAG}(?: index="(\d+)")?>\n(.*?)\n</{ANSWER_TAG}>', re.DOTALL)


def words(text: str) -> set[str]:
    """The words ``reference_overlap`` compares: lowercase ``\\w+`` runs."""
    return set(re.findall(r"\w+", text.lower()))


class JudgeController:
    """The scripted judge's mode and what it received (thread-safe: tests read it while the server runs)."""

    def __init__(self, mode: str = "fixed", **options: Any):
        self._lock = threading.Lock()
        self.reset(mode, **options)

    def reset(
        self,
        mode: str = "fixed",
        **options: Any,
    ) -> None:
        """Forget every request and start over in ``mode`` (a server shared by several tests), once the
        requests still in flight (a slow reply whose client gave up) are done, so none is counted after."""
        deadline = time.monotonic() + 30.0
        while getattr(self, "active", 0) > 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        with self._lock:
            self.requests: list[dict[str, Any]] = []
            self.headers: list[dict[str, str]] = []
            self.intervals: list[tuple[float, float]] = []
            self.active = 0
            self.max_active = 0
        self.set_mode(mode, **options)

    def set_mode(
        self,
        mode: str,
        *,
        scores: int | dict[str, int] = DEFAULT_SCORE,
        fail_first: int = 0,
        status: int = 500,
        retry_after: float | None = None,
        delay_s: float = 0.0,
        reply: str = "",
    ) -> None:
        """Switch mode (see the module docstring); the failure count starts again from ``fail_first``."""
        if mode not in MODES:
            raise ValueError(f"unknown scripted judge mode {mode!r}; one of {', '.join(MODES)}")
        with self._lock:
            self.mode, self.scores, self.fail_left, self.status = mode, scores, fail_first, status
            self.retry_after, self.delay_s, self.reply = retry_after, delay_s, reply

    @property
    def count(self) -> int:
        return len(self.requests)

    @property
    def last_request(self) -> dict[str, Any]:
        return self.requests[-1]

    def _score(self, name: str) -> int:
        if isinstance(self.scores, dict):
            return self.scores.get(name, DEFAULT_SCORE)
        return self.scores

    def _answer_scores(self, criteria: list[str], answer: str, reference: str | None) -> dict[str, Any]:
        if self.mode == "reference_overlap":
            score = 10 if reference is not None and words(reference) <= words(answer) else 2
            scores: dict[str, Any] = {name: score for name in criteria}
        else:
            scores = {name: self._score(name) for name in criteria}
        if self.mode == "missing_criterion" and criteria:
            scores.pop(criteria[-1])
        if self.mode == "out_of_range" and criteria:
            scores[criteria[0]] = 11
        return scores

    def reply_text(self, body: dict[str, Any]) -> str:
        """The reply to a request body in the current mode."""
        if self.mode == "reply":
            return self.reply
        if self.mode == "garbage":
            return "I think the answer is quite good, maybe a seven or so. No scores today."
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        prompt = str(users[-1].get("content", "")) if users else ""
        block = _CRITERIA.search(prompt)
        criteria = _CRITERION.findall(block.group(1)) if block else []
        found = _REFERENCE.search(prompt)
        reference = found.group(1) if found else None
        answers = _ANSWER.findall(prompt)
        reasoning = (
            f"The scripted judge ({self.mode}) read {len(answers)} answer(s) and {len(criteria)} criteria."
        )
        if any(index for index, _ in answers):  # a group prompt
            verdicts = {index: self._answer_scores(criteria, text, reference) for index, text in answers}
            if self.mode == "missing_answer" and verdicts:
                verdicts.pop(answers[-1][0])
            return f"{reasoning}\n{json.dumps(verdicts)}"
        answer = answers[0][1] if answers else ""
        return f"{reasoning}\n{json.dumps(self._answer_scores(criteria, answer, reference))}"

    def app(self) -> FastAPI:
        """The FastAPI app, answering by this controller."""
        app = FastAPI()
        ids = iter(range(1 << 62))

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "toolgym"}]}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            started = time.monotonic()
            body = await request.json()
            with self._lock:
                self.requests.append(body)
                self.headers.append(dict(request.headers))
                self.active += 1
                self.max_active = max(self.max_active, self.active)
                failing = self.fail_left > 0
                self.fail_left -= failing
                status, retry_after, delay = self.status, self.retry_after, self.delay_s
            try:
                if delay:
                    await asyncio.sleep(delay)
                if failing:
                    headers = {"Retry-After": f"{retry_after:g}"} if retry_after is not None else None
                    return JSONResponse({"error": {"message": "scripted failure"}}, status, headers=headers)
                with self._lock:
                    text = self.reply_text(body)
                prompt_chars = sum(len(str(m.get("content", ""))) for m in body.get("messages", []))
                usage = {"prompt_tokens": prompt_chars // 4, "completion_tokens": max(len(text) // 4, 1)}
                usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
                return {
                    "id": f"chatcmpl-{next(ids)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": usage,
                }
            finally:
                with self._lock:
                    self.active -= 1
                    self.intervals.append((started, time.monotonic()))

        return app


class ScriptedJudge:
    """A running scripted judge: ``url`` (the API root, ending in ``/v1``) and its ``controller``'s state."""

    def __init__(self, url: str, controller: JudgeController):
        self.url = url
        self.controller = controller

    def set_mode(self, mode: str, **options: Any) -> None:
        self.controller.set_mode(mode, **options)

    def reset(self, mode: str = "fixed", **options: Any) -> None:
        """Forget every request and start over in ``mode``: one server serves a module's tests."""
        self.controller.reset(mode, **options)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.controller.requests

    @property
    def count(self) -> int:
        return self.controller.count

    @property
    def last_request(self) -> dict[str, Any]:
        return self.controller.last_request

    @property
    def headers(self) -> list[dict[str, str]]:
        return self.controller.headers

    @property
    def max_active(self) -> int:
        return self.controller.max_active

    @property
    def intervals(self) -> list[tuple[float, float]]:
        return self.controller.intervals


@contextmanager
def scripted_judge(mode: str = "fixed", **options: Any) -> Iterator[ScriptedJudge]:
    """Serve a scripted judge on a free loopback port for the ``with`` block (see the module docstring)."""
    controller = JudgeController(mode, **options)
    with serve_in_thread(controller.app()) as base:
        yield ScriptedJudge(base + "/v1", controller)
