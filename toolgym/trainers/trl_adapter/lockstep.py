"""Generation through TRL's vLLM backend (``trainer.vllm_generation``), in rounds every rank takes together.

TRL's ``VLLMGeneration.generate(prompts, images, num_generations)`` is a collective in server mode and with
colocated tensor parallelism, so multi-turn episodes generate through
:class:`~toolgym.rollout.clients.lockstep.LockstepClient` (its docstring says how the rounds work). Here is
what ties it to TRL: :func:`trl_batch_generate`, one ``generate`` call with the per-turn cap and the union of
the envs' stop strings, and :func:`accelerate_exchange`, the ranks' counts via accelerate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from toolgym.rollout.clients.lockstep import BatchGenerate, Exchange


def trl_batch_generate(generation: Any, *, max_tokens: int, stop: Sequence[str]) -> BatchGenerate:
    """``batch_generate`` over TRL's ``VLLMGeneration``: one ``generate(prompts, None, 1)`` call with the
    per-turn cap as ``max_completion_length`` and toolgym's stop settings added to ``generation_kwargs``
    (both restored after the call), returning the sampled token's logprob at each position."""
    extra: dict[str, Any] = {"include_stop_str_in_output": True, "skip_special_tokens": False}

    def batch_generate(prompts: list[list[int]]) -> tuple[list[list[int]], list[list[float]] | None]:
        saved = generation.max_completion_length, generation.generation_kwargs
        kwargs = {**(saved[1] or {}), **extra}
        stops = list(dict.fromkeys([*(kwargs.get("stop") or []), *stop]))
        if stops:
            kwargs["stop"] = stops
        generation.max_completion_length, generation.generation_kwargs = max_tokens, kwargs
        try:
            _, completions, logprobs, logprob_ids = generation.generate(prompts, None, 1)
        finally:
            generation.max_completion_length, generation.generation_kwargs = saved
        completions = [list(c) for c in completions]
        if logprobs is None:
            return completions, None
        return completions, [
            _sampled_logprobs(ids, lps, None if logprob_ids is None else logprob_ids[i])
            for i, (ids, lps) in enumerate(zip(completions, logprobs, strict=True))
        ]

    return batch_generate


def _sampled_logprobs(
    ids: list[int], logprobs: list[list[Any]], ranked_ids: list[list[int]] | None
) -> list[float]:
    """The sampled token's logprob at each position: TRL returns the top ``k`` (sampled token included) per
    position, by rank, with ``None`` where vLLM had NaN."""
    out = []
    for t, token in enumerate(ids):
        row = logprobs[t]
        j = ranked_ids[t].index(token) if ranked_ids is not None and token in ranked_ids[t] else 0
        value = row[j] if isinstance(row, list | tuple) else row
        out.append(math.nan if value is None else float(value))
    return out


def accelerate_exchange(accelerator: Any) -> Exchange | None:
    """Every rank's count, via accelerate's ``gather_object``; ``None`` on a single process."""
    if accelerator.num_processes == 1:
        return None
    from accelerate.utils import gather_object

    return lambda n: [int(x) for x in gather_object([n])]


__all__ = ["accelerate_exchange", "trl_batch_generate"]
