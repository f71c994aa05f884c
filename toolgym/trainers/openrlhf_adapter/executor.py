"""``ToolgymAgentExecutor``: OpenRLHF's agent executor on toolgym's shared episode runner.

OpenRLHF's vLLM engine actor calls ``await executor.execute(prompt, label, sampling_params, max_length,
hf_tokenizer, llm_engine, images=None)`` once per sample (``n_samples_per_prompt`` times per prompt), with
``llm_engine`` itself, whose ``await generate(prompt_token_ids, sampling_params)`` returns vLLM's final
``RequestOutput``. It turns the returned dict into an ``Experience``: ``observation_tokens`` is the whole
sequence, ``action_ranges`` the ``[start, end)`` spans the policy generated (its action mask),
``rollout_log_probs`` one logprob per observation token (or ``None``), ``reward``/``scores`` the sample's
reward, ``extra_logs`` numbers it logs, and the sequence is cut at ``max_length`` (prompt and response).

The executor:

1. reads the episode key from ``label`` (``export_openrlhf`` writes it): env, kwargs, task and seed, so every
   sample of a prompt plays the same task from the same reset;
2. renders the env's own first prompt with ``hf_tokenizer``'s chat template (the ``prompt`` text OpenRLHF
   rendered from the same messages is not re-tokenized) and gives the episode what is left of
   ``max_length`` as its response budget; a turn gets ``sampling_params.max_tokens`` tokens when set
   (``--rollout.max_new_tokens``), else the budget (``max_tokens_per_turn`` overrides both);
3. plays it with ``toolgym.rollout.run_episode`` through ``llm_engine`` (stop strings kept, one logprob per
   generated token) and maps the runner's mask to ``action_ranges``: exactly the generated tokens, never an
   observation.

An episode that fails (engine, env, a prompt longer than ``max_length``) or whose verifier failed comes back
with no action ranges (OpenRLHF's loss skips fully masked samples), reward 0 and ``extra_logs.trainable=0``.
"""

from __future__ import annotations

from typing import Any, ClassVar
from uuid import uuid4

import gymnasium as gym
from openrlhf.utils.agent import AgentExecutorBase

from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.vllm_inproc import generation_from_output, vllm_sampling_kwargs
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.host import DEFAULT_MAX_CONCURRENT_EPISODES, EpisodeHost
from toolgym.rollout.keys import EpisodeKey
from toolgym.rollout.samples import filler_token_id, sampling_from, trainer_sample

#: how to write samples the executor can play (said by the error a label without an episode key gets)
LABEL_HINT = (
    "write the prompt data with toolgym.trainers.openrlhf_adapter.export_openrlhf and pass "
    "--data.label_key label"
)


class OpenRLHFEngineClient:
    """OpenRLHF's ``llm_engine`` as a toolgym ``LLMClient``: each turn is one ``llm_engine.generate`` call
    with the ``SamplingParams`` toolgym's vLLM clients send (``vllm_sampling_kwargs``)."""

    def __init__(self, llm_engine: Any):
        self.engine = llm_engine

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        from vllm import SamplingParams

        try:
            params = SamplingParams(**vllm_sampling_kwargs(sampling))
        except (TypeError, ValueError) as exc:
            raise ClientError(f"vLLM rejected the sampling settings: {exc}") from exc
        try:
            out = await self.engine.generate(list(prompt_ids), params)
        except Exception as exc:
            raise ClientError(f"OpenRLHF's vLLM engine failed: {type(exc).__name__}: {exc}") from exc
        return generation_from_output(out, f"OpenRLHF's vLLM engine (request {request_id})")

    async def close(self) -> None:
        """OpenRLHF owns the engine."""


class ToolgymAgentExecutor(AgentExecutorBase):
    """Play the episode a sample's ``label`` names (see the module docstring). OpenRLHF instantiates it with
    no arguments, so the settings are class attributes (``agent_func.py``)."""

    #: tokens one model turn may generate (None: ``sampling_params.max_tokens``, else the whole budget)
    max_tokens_per_turn: ClassVar[int | None] = None
    #: episodes one engine plays at once
    max_concurrent_episodes: ClassVar[int] = DEFAULT_MAX_CONCURRENT_EPISODES

    def __init__(self) -> None:
        self.host = EpisodeHost.shared("openrlhf", max_concurrent_episodes=self.max_concurrent_episodes)

    async def execute(
        self,
        prompt: Any,
        label: Any,
        sampling_params: Any,
        max_length: int,
        hf_tokenizer: Any,
        llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:
        if images:
            raise ValueError("toolgym's executor plays text envs; this sample has images")
        key = EpisodeKey.parse(label, how=LABEL_HINT)
        renderer = self.host.renderer(hf_tokenizer)
        host = self.host
        async with host.slots(), host.lease(key.env_id, key.env_kwargs) as env:
            prompt_len = await host.call(_prompt_length, env, key, renderer)
            budget = max(1, max_length - prompt_len)
            per_turn = self.max_tokens_per_turn or getattr(sampling_params, "max_tokens", None) or budget
            config = RolloutConfig(
                max_response_tokens=budget,
                max_tokens_per_turn=min(per_turn, budget),
                max_prompt_tokens=max(1, max_length - 1),
                sampling=sampling_from(sampling_params),
            )
            traj = await host.run(
                env,
                OpenRLHFEngineClient(llm_engine),
                renderer,
                config,
                seed=key.seed,
                options={"task": key.task},
                request_id=uuid4().hex,
            )
        logprobs = getattr(sampling_params, "logprobs", None) is not None
        return openrlhf_output(
            traj,
            prompt=prompt,
            label=label,
            max_length=max_length,
            filler_id=filler_token_id(hf_tokenizer),
            logprobs=logprobs,
        )


def openrlhf_output(
    traj: Trajectory, *, prompt: Any, label: Any, max_length: int, filler_id: int, logprobs: bool
) -> dict[str, Any]:
    """The dict OpenRLHF's ``_process_response_into_experience`` reads (see the module docstring)."""
    sample = trainer_sample(
        traj, filler_id=filler_id, exclude_infra_errors=False, max_prompt_tokens=max(1, max_length - 1)
    )
    prompt_ids, response, mask = sample.prompt_ids, sample.response_ids, sample.mask
    token_logprobs = sample.logprobs or [0.0] * len(response)
    if not sample.trainable:  # no action ranges either way: one token is enough for OpenRLHF's shapes
        response, mask, token_logprobs = response[:1], [0], [0.0]
    tokens = prompt_ids + response
    ranges, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            ranges.append((len(prompt_ids) + start, len(prompt_ids) + i))
            start = None
    reward = sample.reward or 0.0
    return {
        "prompt": prompt,
        "label": label,
        "images": None,
        "mm_train_inputs": None,
        "observation_tokens": tokens,
        "action_ranges": ranges,
        "rollout_log_probs": [0.0] * len(prompt_ids) + token_logprobs if logprobs else None,
        "reward": reward,
        "scores": reward,
        "truncated": traj.stop_reason == "length",
        "extra_logs": traj.stats(),
    }


def _prompt_length(env: gym.Env, key: EpisodeKey, renderer: ChatRenderer) -> int:
    """The length of the episode's first prompt: the pinned reset, rendered as the runner renders it."""
    _, info = env.reset(seed=key.seed, options={"task": key.task})
    return len(renderer.prompt_ids(info["messages"], info["tools"]))


__all__ = ["OpenRLHFEngineClient", "ToolgymAgentExecutor", "openrlhf_output"]
