"""The reward server's request and response bodies, shared by the server and ``RewardClient``.

A request is a model ``response`` and a ``verification_info`` — a JSON object, or its JSON text as some
datasets store it — whose ``type`` names a scorer (``toolgym.rewards.scorers``): ``{"type": "math",
"ground_truth": "\\frac{1}{2}"}``. A result is ``{score, passed, details, error}``; ``error`` is set only
when the verifier could not judge (a timeout, a crash), so a trainer never mistakes it for a wrong answer.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MAX_BATCH = 10_000


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    response: str
    verification_info: dict[str, Any]

    @field_validator("verification_info", mode="before")
    @classmethod
    def _decode(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"verification_info is a string but not JSON ({exc.msg})") from None
        return value


class BatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    items: list[ScoreRequest] = Field(max_length=MAX_BATCH)


class ScoreResult(BaseModel):
    score: float
    passed: bool
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class BatchResult(BaseModel):
    results: list[ScoreResult]
