"""The small frozen records that flow through an episode (docs/architecture.md, "One episode, end to end").

They are pydantic models so they validate at the boundaries (tool arguments from model text, task files,
server bodies) and serialize to JSON for logs and rollouts without extra code.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ToolCall(_Frozen):
    """One tool invocation the parser understood: a tool name and its (still unvalidated) arguments."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


ToolStatus = Literal["ok", "error", "infra_error"]


class ToolResult(_Frozen):
    """What a tool returned. Tools never raise: failures are results.

    ``status`` separates the model's mistakes (``error``: bad arguments, an exception in its code) from
    infrastructure failures (``infra_error``: sandbox down, retriever unreachable), so a trainer can drop
    or flag episodes that failed through no fault of the policy instead of silently scoring them 0.
    Results carry no timings, so an env's ``info`` stays deterministic for a given seed and action;
    the episode runner measures tool latency around ``env.step``.
    """

    name: str
    status: ToolStatus = "ok"
    output: str = ""
    call_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class ParsedAction(_Frozen):
    """What a parser understood from one model turn.

    Exactly one kind: ``tool_calls`` (one or more calls to run), ``answer`` (the final answer, which ends
    the episode and is verified) or ``invalid`` (``reason`` says why; the env shows it to the model).
    """

    kind: Literal["tool_calls", "answer", "invalid"]
    tool_calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    reason: str | None = None

    @classmethod
    def calls(cls, *calls: ToolCall) -> ParsedAction:
        return cls(kind="tool_calls", tool_calls=tuple(calls))

    @classmethod
    def final(cls, answer: str) -> ParsedAction:
        return cls(kind="answer", answer=answer)

    @classmethod
    def invalid(cls, reason: str) -> ParsedAction:
        return cls(kind="invalid", reason=reason)


class Verdict(_Frozen):
    """A verifier's judgement of one episode.

    ``error`` is set when the verifier itself failed (timeout, crash): the reward is then not a judgement
    of the policy, and trainers can tell the two apart.
    """

    reward: float
    passed: bool
    details: dict[str, Any] = Field(default_factory=dict)
    error: str | None = None


class Turn(_Frozen):
    """One step of an episode as text: the model's action, what it parsed to, what the tools returned."""

    action: str
    parsed: ParsedAction
    tool_results: tuple[ToolResult, ...] = ()
    observation: str = ""
    reward: float = 0.0


class Trajectory(BaseModel):
    """An episode. The env fills the text level (``messages``, ``turns``, ``verdict``); the episode runner
    (``toolgym.rollout``) adds the token level: ``response_ids`` holds every token after the prompt, the
    generated ones exactly as sampled (mask 1, with their logprobs) and template/observation ones with mask 0
    (logprob 0). ``logprobs`` is ``None`` when the engine was asked not to compute them.

    An episode that failed (engine or env error, prompt over its cap) has ``error`` set, ``stop_reason``
    ``error``, its prompt and whatever was generated, and an all-zero mask; ``trainable`` is False for it and
    for an episode whose verifier failed, so a trainer never learns from a reward that judged nothing.
    """

    task_id: str
    env_id: str = ""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    turns: list[Turn] = Field(default_factory=list)
    verdict: Verdict | None = None
    reward: float = 0.0
    #: answer | max_turns | length (token budget) | error
    stop_reason: str | None = None
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    response_mask: list[int] = Field(default_factory=list)
    logprobs: list[float] | None = Field(default_factory=list)
    #: per response token, the version of the weights that sampled it (verl's trainer step), -1 on the tokens
    #: the policy did not sample (mask 0); ``None`` when the engine does not say (one policy for the whole
    #: run). An episode that a weight update interrupted (asynchronous training) holds several versions, and
    #: each sampled token's logprob is the one its own version gave it
    policy_versions: list[int] | None = None
    #: GRPO bookkeeping: samples of one task share ``group`` and differ in ``sample``
    group: str | None = None
    sample: int = 0
    #: seconds spent generating and in env.step (tools, verifier)
    generation_s: float = 0.0
    env_s: float = 0.0
    #: of ``env_s``, seconds spent waiting for shared capacity (a sandbox session slot; ``core.waits``)
    wait_s: float = 0.0
    #: seconds of each ``env.step`` (the turn's tools, or the verifier), one per turn: a viewer's tool latency
    step_s: list[float] = Field(default_factory=list)
    #: the tokenizer the ids belong to (its ``name_or_path``), so a viewer can decode them later
    tokenizer: str | None = None
    error: str | None = None

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def turn_rewards(self) -> list[float]:
        return [t.reward for t in self.turns]

    @property
    def tool_calls(self) -> int:
        return sum(len(t.tool_results) for t in self.turns)

    @property
    def tool_errors(self) -> int:
        return sum(not r.ok for t in self.turns for r in t.tool_results)

    @property
    def infra_errors(self) -> int:
        """Tool calls that failed through our fault (sandbox down, retriever unreachable), not the model's."""
        return sum(r.status == "infra_error" for t in self.turns for r in t.tool_results)

    @property
    def generated_tokens(self) -> int:
        return sum(self.response_mask)

    @property
    def policy_version_range(self) -> tuple[int, int] | None:
        """The oldest and newest versions of the weights that sampled this episode's tokens (``None`` when
        unknown or nothing was sampled): two different ones mean a weight update interrupted the episode."""
        sampled = [v for v in self.policy_versions or () if v >= 0]
        return (min(sampled), max(sampled)) if sampled else None

    # serialized, so a JSONL reader sees it without recomputing (mypy does not take a decorator over
    # @property; pydantic's docs use this ignore)
    @computed_field  # type: ignore[prop-decorator]
    @property
    def trainable(self) -> bool:
        """False when the reward judges nothing: the episode failed, or its verifier did."""
        return self.error is None and not (self.verdict is not None and self.verdict.error)

    def trainable_for(self, exclude_infra_errors: bool = False) -> bool:
        """``trainable``, and with ``exclude_infra_errors`` also no tool call failed through our fault (a
        sandbox that lost the episode's state or had no slot for it, a retriever that was down): the reward
        of such an episode says more about the infrastructure than about the policy. The trainer adapters'
        ``exclude_infra_errors`` option (on by default) uses this."""
        return self.trainable and not (exclude_infra_errors and self.infra_errors)

    @property
    def training_mask(self) -> list[int]:
        """The mask a trainer's loss should use: ``response_mask``, or all zeros when not ``trainable``."""
        return self.training_mask_for()

    def training_mask_for(self, exclude_infra_errors: bool = False) -> list[int]:
        """``training_mask``, all zeros also when ``exclude_infra_errors`` and a tool call failed through our
        fault (see ``trainable_for``)."""
        keep = self.trainable_for(exclude_infra_errors)
        return list(self.response_mask) if keep else [0] * len(self.response_ids)

    def stats(self) -> dict[str, float]:
        """Per-episode numbers for a trainer's logs, the same keys for every episode."""
        return {
            "passed": float(bool(self.verdict and self.verdict.passed)),
            "trainable": float(self.trainable),
            "turns": float(self.num_turns),
            "tool_calls": float(self.tool_calls),
            "tool_errors": float(self.tool_errors),
            "infra_errors": float(self.infra_errors),
            "wait_s": float(self.wait_s),
            "error": float(self.error is not None),
            "verifier_error": float(bool(self.verdict is not None and self.verdict.error)),
        }
