"""verl's LLM server handle as a toolgym ``LLMClient``: the episode runner generates through verl's own vLLM
servers (load-balanced, sticky per episode, weights synced by the trainer) without knowing about verl.

verl's ``LLMServerClient.generate(request_id, *, prompt_ids, sampling_params, **kw)`` returns a
``TokenOutput`` (``token_ids``, ``log_probs`` or ``None``, ``stop_reason`` ``completed``/``aborted``). Its
vLLM server builds ``SamplingParams(max_tokens=..., **sampling_params)`` after turning ``logprobs`` (a bool)
into vLLM's ``0``/``None``, so the fields are the ones toolgym's in-process vLLM client sends
(``vllm_sampling_kwargs``: stop strings kept in the output, special tokens matched), with ``logprobs`` as a
bool. verl reports stop and length alike as ``completed``: a turn that used all of ``max_tokens`` is
``length``, any other ``stop``.

Each output names the trainer step of the weights that sampled it (``extra_fields.global_steps``), and every
token gets it (``Generation.policy_versions``). In fully-asynchronous training a weight update aborts the
requests in flight; with ``partial_rollout`` the generation resumes under the new weights from where it
stopped. verl's ``FullyAsyncLLMServerClient`` resumes inside its ``generate`` and hands back one merged
output, which hides where the weights changed; so this client makes one attempt at a time (the base
class's ``generate``) and resumes itself, the same way (the prompt plus what was sampled so far, the rest
of the token budget), keeping each piece's version and logprobs. This module imports verl only to tell
that server client apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.vllm_inproc import vllm_sampling_kwargs

#: seconds between an aborted attempt and its resumption (verl's own resume loop waits as long): the weight
#: update that aborted it is under way, and the server holds new requests until it is done
RESUME_DELAY_S = 1.0


class VerlServerClient:
    """Generate through a verl ``LLMServerClient`` (``server``), one episode's turns under one request id.

    Args:
        server: verl's server handle (``AgentLoopBase.server_manager``).
        logprobs: ask for the sampled tokens' logprobs (verl's ``rollout.calculate_log_probs``).
        priority: verl's per-sample scheduling priority, passed through.
        resume_aborted: a generation aborted by a weight update resumes under the new weights
            (``async_training.partial_rollout``); False: the turn ends ``abort`` and the episode fails,
            counted, never trained on.

    ``min_global_steps``/``max_global_steps`` record the trainer steps of the weights that generated this
    episode's turns (verl's servers report them; fully-async training uses them for staleness), and each
    ``Generation`` has them per token.
    """

    def __init__(
        self, server: Any, *, logprobs: bool = True, priority: int = 0, resume_aborted: bool = False
    ):
        self.server = server
        self.logprobs = bool(logprobs)
        self.priority = int(priority)
        self.resume_aborted = bool(resume_aborted)
        self.min_global_steps: Any = None
        self.max_global_steps: Any = None
        #: attempts that a weight update aborted and this client resumed
        self.resumed = 0
        self._attempt = one_attempt(server)

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        params = vllm_sampling_kwargs(sampling)
        params["logprobs"] = self.logprobs
        extra = {"priority": self.priority} if self.priority else {}
        token_ids: list[int] = []
        logprobs: list[float] | None = []
        versions: list[int] | None = []
        while True:
            try:
                out = await self._attempt(
                    request_id,
                    prompt_ids=[*prompt_ids, *token_ids],
                    sampling_params={**params, "max_tokens": sampling.max_tokens - len(token_ids)},
                    **extra,
                )
            except Exception as exc:
                raise ClientError(f"verl's LLM server failed: {type(exc).__name__}: {exc}") from exc
            fields = getattr(out, "extra_fields", None) or {}
            self._note_steps(fields)
            new = [int(t) for t in out.token_ids]
            token_ids += new
            if out.log_probs is not None and logprobs is not None:
                logprobs += [float(lp) for lp in out.log_probs]
            elif new:
                logprobs = None
            version = fields.get("global_steps")
            versions = (
                None if versions is None or version is None else [*versions, *[int(version)] * len(new)]
            )
            aborted = out.stop_reason in ("aborted", "abort")
            if not aborted or len(token_ids) >= sampling.max_tokens:
                break
            if not self.resume_aborted:
                return Generation(token_ids=token_ids, logprobs=None, finish_reason="abort")
            self.resumed += 1
            await asyncio.sleep(RESUME_DELAY_S)
        if self.logprobs and logprobs is None:
            raise ClientError("verl's LLM server returned no logprobs although they were asked for")
        finish = "length" if len(token_ids) >= sampling.max_tokens else "stop"
        if not self.logprobs:
            logprobs = None
        return Generation(
            token_ids=token_ids, logprobs=logprobs, finish_reason=finish, policy_versions=versions
        )

    def _note_steps(self, fields: dict[str, Any]) -> None:
        low = fields.get("min_global_steps", fields.get("global_steps"))
        high = fields.get("max_global_steps", fields.get("global_steps"))
        if low is not None and (self.min_global_steps is None or low < self.min_global_steps):
            self.min_global_steps = low
        if high is not None and (self.max_global_steps is None or high > self.max_global_steps):
            self.max_global_steps = high

    async def close(self) -> None:
        """verl owns the servers; nothing to release."""


def one_attempt(server: Any) -> Callable[..., Awaitable[Any]]:
    """``server.generate``, or for verl's ``FullyAsyncLLMServerClient`` its base class's (one attempt: that
    class's own resumes and merges, see the module docstring)."""
    try:
        from verl.workers.rollout.llm_server import FullyAsyncLLMServerClient, LLMServerClient
    except ImportError:  # a stand-in server in a test without verl
        return server.generate
    if isinstance(server, FullyAsyncLLMServerClient):
        return lambda request_id, **kw: LLMServerClient.generate(server, request_id, **kw)
    return server.generate


__all__ = ["RESUME_DELAY_S", "VerlServerClient", "one_attempt"]
