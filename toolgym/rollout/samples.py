"""From a played episode to a trainer's batch row, and from a trainer's sampling settings to toolgym's: the
rules every trainer adapter follows, written once.

Every adapter (verl's agent loop, TRL's rollout function, OpenRLHF's executor) gets a token-level
``Trajectory`` from the runner and must hand its trainer the same things under the same rules: which tokens
the loss sees, what an untrainable episode becomes, what fills an empty prompt or response, which reward. And
each receives its trainer's sampling settings in its own shape (a dict, a ``SamplingParams``, attributes of a
trainer) that map to one :class:`~toolgym.rollout.clients.base.Sampling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolgym.core.types import Trajectory
from toolgym.rollout.clients.base import Sampling


@dataclass(frozen=True)
class TrainerSample:
    """One episode as a trainer's batch row: the prompt and response token ids, the loss mask (1 exactly on
    the tokens the policy sampled), their logprobs, the reward (``None`` for an untrainable episode), and
    per response token the weights' version that sampled it (``Trajectory.policy_versions``; -1 where
    nothing was sampled, ``None`` when the engine did not say)."""

    prompt_ids: list[int]
    response_ids: list[int]
    mask: list[int]
    logprobs: list[float] | None
    reward: float | None
    trainable: bool
    policy_versions: list[int] | None = None


def trainer_sample(
    traj: Trajectory,
    *,
    filler_id: int,
    exclude_infra_errors: bool,
    max_prompt_tokens: int | None = None,
) -> TrainerSample:
    """What every trainer's batch needs from a Trajectory, with the same rules everywhere:

    - an untrainable episode (it failed, its verifier did, or with ``exclude_infra_errors`` a tool call
      failed through our fault: ``Trajectory.trainable_for``) keeps its tokens with an all-zero mask and
      ``reward=None`` (a trainer gives it 0, or marks it unscorable);
    - only a failed over-long prompt is longer than ``max_prompt_tokens``: it is cut from the left, so the
      batch keeps its shape;
    - an empty prompt or response (the reset itself failed) becomes one ``filler_id`` token with mask 0, as
      trainers index the last token.
    """
    prompt = list(traj.prompt_ids)
    if max_prompt_tokens is not None and len(prompt) > max_prompt_tokens:
        prompt = prompt[-max_prompt_tokens:]
    trainable = traj.trainable_for(exclude_infra_errors)
    response = list(traj.response_ids)
    mask = traj.training_mask_for(exclude_infra_errors)
    logprobs = list(traj.logprobs) if traj.logprobs is not None else None
    versions = list(traj.policy_versions) if traj.policy_versions is not None else None
    if not response:
        response, mask = [filler_id], [0]
        logprobs = [0.0] if logprobs is not None else None
        versions = None
    return TrainerSample(
        prompt_ids=prompt or [filler_id],
        response_ids=response,
        mask=mask,
        logprobs=logprobs,
        reward=float(traj.reward) if trainable else None,
        trainable=trainable,
        policy_versions=versions,
    )


def filler_token_id(tokenizer: Any) -> int:
    """The token a batch row gets where an episode has none: the pad token, else EOS."""
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


#: sampling fields beyond the four every trainer has, passed through to vLLM when a trainer sets them
_EXTRA_SAMPLING = ("min_p", "min_tokens", "presence_penalty", "frequency_penalty")


def sampling_from(params: Any) -> Sampling:
    """A trainer's sampling settings as toolgym's :class:`Sampling`, read from a mapping (verl's
    ``sampling_params``) or an object's attributes (OpenRLHF's ``SamplingParams``, TRL's trainer).
    ``top_k`` of 0, -1 or ``None`` means no cut-off; an unset ``top_p`` or ``repetition_penalty`` means none;
    ``min_p``, ``min_tokens`` and the presence/frequency penalties pass through when set."""

    def get(name: str, default: Any = None) -> Any:
        if isinstance(params, Mapping):
            return params.get(name, default)
        return getattr(params, name, default)

    top_k = get("top_k")
    temperature = get("temperature")
    extra = {name: get(name) for name in _EXTRA_SAMPLING if get(name)}
    return Sampling(
        temperature=1.0 if temperature is None else float(temperature),
        top_p=float(get("top_p") or 1.0),
        top_k=-1 if top_k is None or int(top_k) <= 0 else int(top_k),
        repetition_penalty=float(get("repetition_penalty") or 1.0),
        extra=extra,
    )


__all__ = ["TrainerSample", "filler_token_id", "sampling_from", "trainer_sample"]
