"""LLM-judge rewards for open-ended answers (issue #45): ``JudgeVerifier`` scores an answer against a rubric
of ``Criterion`` with an OpenAI-compatible chat model, ``GroupJudgeVerifier`` judges a group's answers to
one task in one call. See docs/judges.md.

``clear_memory_cache()`` forgets the replies kept in this process's memory (a disk cache keeps its own);
``reset_endpoints()`` forgets every endpoint's shared limits and closes its HTTP client.
"""

from toolgym.rewards.judge.endpoint import clear_memory_cache, reset_endpoints
from toolgym.rewards.judge.prompt import Criterion, JudgeReplyError
from toolgym.rewards.judge.verifier import API_KEY_ENV, GroupJudgeVerifier, JudgeVerifier

__all__ = [
    "API_KEY_ENV",
    "Criterion",
    "GroupJudgeVerifier",
    "JudgeReplyError",
    "JudgeVerifier",
    "clear_memory_cache",
    "reset_endpoints",
]
