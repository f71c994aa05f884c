"""verl's LLM server handle as a toolgym ``LLMClient``: the episode runner generates through verl's own vLLM
servers (load-balanced, sticky per episode, weights synced by the trainer) without knowing about verl.

verl's ``LLMServerClient.generate(request_id, *, prompt_ids, sampling_params, **kw)`` returns a
``TokenOutput`` (``token_ids``, ``log_probs`` or ``None``, ``stop_reason`` ``completed``/``aborted``). Its
vLLM server builds ``SamplingParams(max_tokens=..., **sampling_params)`` after turning ``logprobs`` (a bool)
into vLLM's ``0``/``None``, so the fields are the ones toolgym's in-process vLLM client sends
(``vllm_sampling_kwargs``: stop strings kept in the output, special tokens matched), with ``logprobs`` as a
bool. verl reports stop and length alike as ``completed``: a turn that used all of ``max_tokens`` is
``length``, any other ``stop``. This module does not import verl.
"""

from __future__ import annotations

from typing import Any

from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.vllm_inproc import vllm_sampling_kwargs


class VerlServerClient:
    """Generate through a verl ``LLMServerClient`` (``server``), one episode's turns under one request id.

    Args:
        server: verl's server handle (``AgentLoopBase.server_manager``).
        logprobs: ask for the sampled tokens' logprobs (verl's ``rollout.calculate_log_probs``).
        priority: verl's per-sample scheduling priority, passed through.

    ``min_global_steps``/``max_global_steps`` record the trainer steps of the weights that generated this
    episode's turns (verl's servers report them; fully-async training uses them for staleness).
    """

    def __init__(self, server: Any, *, logprobs: bool = True, priority: int = 0):
        self.server = server
        self.logprobs = bool(logprobs)
        self.priority = int(priority)
        self.min_global_steps: Any = None
        self.max_global_steps: Any = None

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        params = vllm_sampling_kwargs(sampling)
        params["logprobs"] = self.logprobs
        extra = {"priority": self.priority} if self.priority else {}
        try:
            out = await self.server.generate(
                request_id, prompt_ids=list(prompt_ids), sampling_params=params, **extra
            )
        except Exception as exc:
            raise ClientError(f"verl's LLM server failed: {type(exc).__name__}: {exc}") from exc
        self._note_steps(getattr(out, "extra_fields", None) or {})
        token_ids = [int(t) for t in out.token_ids]
        if out.stop_reason == "aborted":
            return Generation(token_ids=token_ids, logprobs=None, finish_reason="abort")
        logprobs = None if out.log_probs is None else [float(lp) for lp in out.log_probs]
        if self.logprobs and logprobs is None:
            raise ClientError("verl's LLM server returned no logprobs although they were asked for")
        finish = "length" if len(token_ids) >= sampling.max_tokens else "stop"
        return Generation(token_ids=token_ids, logprobs=logprobs, finish_reason=finish)

    def _note_steps(self, fields: dict[str, Any]) -> None:
        low, high = fields.get("min_global_steps"), fields.get("max_global_steps")
        if low is not None and (self.min_global_steps is None or low < self.min_global_steps):
            self.min_global_steps = low
        if high is not None and (self.max_global_steps is None or high > self.max_global_steps):
            self.max_global_steps = high

    async def close(self) -> None:
        """verl owns the servers; nothing to release."""


__all__ = ["VerlServerClient"]
