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

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar
from uuid import uuid4

import gymnasium as gym
from openrlhf.utils.agent import AgentExecutorBase

from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.vllm_inproc import generation_from_output, vllm_sampling_kwargs
from toolgym.rollout.episode import RolloutConfig, run_episode
from toolgym.rollout.models import generation_eos_ids
from toolgym.rollout.pool import EnvPool, EpisodeKey


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
    max_concurrent_episodes: ClassVar[int] = 256

    def __init__(self) -> None:
        self.pool = EnvPool()
        self.executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="toolgym-openrlhf")
        self._renderers: dict[int, ChatRenderer] = {}
        self._slots: dict[int, asyncio.Semaphore] = {}
        self._lock = threading.Lock()

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
        key = _episode_key(label)
        renderer = self._renderer(hf_tokenizer)
        loop = asyncio.get_running_loop()
        async with self._slots_for(loop):
            env = await loop.run_in_executor(self.executor, self.pool.acquire, key.env_id, key.env_kwargs)
            try:
                prompt_len = await loop.run_in_executor(self.executor, _prompt_length, env, key, renderer)
                budget = max(1, max_length - prompt_len)
                per_turn = self.max_tokens_per_turn or getattr(sampling_params, "max_tokens", None) or budget
                config = RolloutConfig(
                    max_response_tokens=budget,
                    max_tokens_per_turn=min(per_turn, budget),
                    max_prompt_tokens=max(1, max_length - 1),
                    sampling=_sampling(sampling_params),
                )
                traj = await run_episode(
                    env,
                    OpenRLHFEngineClient(llm_engine),
                    renderer,
                    config,
                    seed=key.seed,
                    options={"task": key.task},
                    request_id=uuid4().hex,
                    executor=self.executor,
                )
            finally:
                self.pool.release(env)
        logprobs = getattr(sampling_params, "logprobs", None) is not None
        return openrlhf_output(
            traj,
            prompt=prompt,
            label=label,
            max_length=max_length,
            filler_id=_filler_id(hf_tokenizer),
            logprobs=logprobs,
        )

    def _renderer(self, tokenizer: Any) -> ChatRenderer:
        with self._lock:
            renderer = self._renderers.get(id(tokenizer))
            if renderer is None:
                renderer = ChatRenderer(tokenizer)
                path = getattr(tokenizer, "name_or_path", None)
                if path:
                    renderer.eos_ids |= generation_eos_ids(path)
                self._renderers[id(tokenizer)] = renderer
            return renderer

    def _slots_for(self, loop: asyncio.AbstractEventLoop) -> asyncio.Semaphore:
        slots = self._slots.get(id(loop))
        if slots is None:
            slots = self._slots[id(loop)] = asyncio.Semaphore(self.max_concurrent_episodes)
        return slots


def openrlhf_output(
    traj: Trajectory, *, prompt: Any, label: Any, max_length: int, filler_id: int, logprobs: bool
) -> dict[str, Any]:
    """The dict OpenRLHF's ``_process_response_into_experience`` reads (see the module docstring)."""
    prompt_ids = list(traj.prompt_ids)[-(max_length - 1) :] if max_length > 1 else []
    if not prompt_ids:  # reset itself failed
        prompt_ids = [filler_id]
    response = list(traj.response_ids)
    mask = traj.training_mask
    token_logprobs = list(traj.logprobs) if traj.logprobs is not None else [0.0] * len(response)
    if not traj.trainable or not response:
        response, mask, token_logprobs = response[:1] or [filler_id], [0], [0.0]
    tokens = prompt_ids + response
    ranges, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            ranges.append((len(prompt_ids) + start, len(prompt_ids) + i))
            start = None
    reward = float(traj.reward) if traj.trainable else 0.0
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


def _episode_key(label: Any) -> EpisodeKey:
    try:
        return EpisodeKey.from_json(label) if isinstance(label, str) else EpisodeKey.model_validate(label)
    except ValueError:
        raise ValueError(
            f"a sample's label is not a toolgym episode key ({str(label)[:80]!r}): write the prompt data "
            "with toolgym.trainers.openrlhf_adapter.export_openrlhf and pass --data.label_key label"
        ) from None


def _prompt_length(env: gym.Env, key: EpisodeKey, renderer: ChatRenderer) -> int:
    """The length of the episode's first prompt: the pinned reset, rendered as the runner renders it."""
    _, info = env.reset(seed=key.seed, options={"task": key.task})
    return len(renderer.prompt_ids(info["messages"], info["tools"]))


def _sampling(params: Any) -> Sampling:
    """OpenRLHF's ``SamplingParams`` as toolgym's: temperature, top-p/k, penalties; ``min_tokens`` and
    ``min_p`` pass through to vLLM."""
    top_k = getattr(params, "top_k", -1)
    extra = {}
    for name in ("min_p", "min_tokens", "presence_penalty", "frequency_penalty"):
        value = getattr(params, name, None)
        if value:
            extra[name] = value
    return Sampling(
        temperature=float(getattr(params, "temperature", 1.0)),
        top_p=float(getattr(params, "top_p", 1.0)),
        top_k=-1 if top_k is None or int(top_k) <= 0 else int(top_k),
        repetition_penalty=float(getattr(params, "repetition_penalty", 1.0) or 1.0),
        extra=extra,
    )


def _filler_id(tokenizer: Any) -> int:
    pad = tokenizer.pad_token_id
    return int(pad if pad is not None else tokenizer.eos_token_id)


__all__ = ["OpenRLHFEngineClient", "ToolgymAgentExecutor", "openrlhf_output"]
