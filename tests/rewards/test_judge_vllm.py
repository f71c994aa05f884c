"""The judge's plumbing against a real OpenAI-compatible server: vLLM's, on the tiny model (random weights,
so its replies are noise). Every reply must come out as a counted error verdict, never as scores.

Uses the session's ``vllm_server`` (tests/conftest.py): no second engine is started.
"""

from __future__ import annotations

import pytest

from toolgym.core.task import Task
from toolgym.rewards.judge import GroupJudgeVerifier, JudgeVerifier, clear_memory_cache, reset_endpoints
from toolgym.testing import tiny_model_path

CRITERIA = [{"name": "correct", "description": "The answer names the right city."}]
TASK = Task(id="capital", prompt="What is the capital of France?", answer="Paris")


@pytest.fixture(autouse=True)
def _fresh_judge_state():
    yield
    clear_memory_cache()
    reset_endpoints()


def test_random_replies_are_counted_error_verdicts(vllm_server):
    url = vllm_server.base_url + "/v1"
    judge = JudgeVerifier(CRITERIA, url, str(tiny_model_path()), max_tokens=24, retries=1, backoff=0.01)
    for answer in ("Paris.", "Lyon"):
        verdict = judge.verify(TASK, answer)
        assert verdict.error is not None, verdict  # noise is never a score
        assert verdict.error.startswith(f"judge {tiny_model_path()} at {url}: ")
        assert verdict.error.endswith("(after 2 attempts)")
        assert verdict.reward == 0.0 and not verdict.passed and "scores" not in verdict.details
        assert verdict.details["attempts"] == 2
        # the server answered (a chat completion with usage): the failure is the reply, not the transport
        assert verdict.details["usage"]["prompt_tokens"] > 0
        assert verdict.details["usage"]["completion_tokens"] > 0
    group = GroupJudgeVerifier(CRITERIA, url, str(tiny_model_path()), max_tokens=24, retries=0)
    verdicts = group.verify_group(TASK, ["Paris.", "Lyon"])
    assert [v.details["attempts"] for v in verdicts] == [1, 1]
    assert all(v.error is not None and v.details["group_size"] == 2 for v in verdicts)
