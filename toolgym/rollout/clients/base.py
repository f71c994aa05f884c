"""The LLM client protocol: token ids in, token ids and logprobs out.

Every backend (in-process vLLM, an OpenAI-compatible HTTP server, Hugging Face transformers) implements
``async generate(prompt_ids, sampling, request_id) -> Generation``. Generated tokens are returned exactly as
the engine sampled them, with their logprobs, and are never re-tokenized from text: that is what makes the
trajectories faithful for PPO/GRPO.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Sampling(BaseModel):
    """Sampling settings shared by every backend (a subset every engine supports the same way)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tokens: int = Field(256, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    repetition_penalty: float = Field(1.0, gt=0.0)
    #: strings that end the turn; the stop string is kept in the output (the parser needs the closing tag)
    stop: tuple[str, ...] = ()
    seed: int | None = None
    #: engine-specific sampling fields passed through as they are (vLLM ``SamplingParams`` names, e.g.
    #: ``min_p``, ``presence_penalty``); a backend that cannot honour one raises ``ClientError``
    extra: dict[str, Any] = Field(default_factory=dict)


FinishReason = Literal["stop", "length", "abort", "error"]


class Generation(BaseModel):
    """One completion: the sampled ids, one logprob per id, and why it ended.

    ``finish_reason`` is ``stop`` for an EOS token or a stop string (``stop_text`` then says which string) and
    ``length`` when ``max_tokens`` ran out. ``logprobs`` is ``None`` only when the engine was asked not to
    compute them (verl with ``calculate_log_probs=False``); otherwise there is exactly one per token.

    ``policy_versions`` is, per token, the version of the weights that sampled it (verl's trainer step), for
    an engine whose weights change during a run and that says which it used (verl's servers); ``None``
    otherwise. A generation that a weight update interrupted and that resumed under the new weights
    (asynchronous training's partial rollouts) holds two versions, each token's logprob from the weights that
    sampled it.
    """

    model_config = ConfigDict(frozen=True)

    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: FinishReason
    stop_text: str | None = None
    policy_versions: list[int] | None = None

    @model_validator(mode="after")
    def _one_logprob_per_token(self) -> Generation:
        for name in ("logprobs", "policy_versions"):
            values = getattr(self, name)
            if values is not None and len(values) != len(self.token_ids):
                raise ValueError(
                    f"{len(self.token_ids)} token ids but {len(values)} {name}: need one per token"
                )
        return self


@runtime_checkable
class LLMClient(Protocol):
    """``request_id`` names the episode (a session), not the call: the runner passes the same id on every
    turn, so a router can send an episode's turns to one server and reuse its prefix cache. A client whose
    engine needs a unique id per request derives one from it."""

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation: ...

    async def close(self) -> None: ...
