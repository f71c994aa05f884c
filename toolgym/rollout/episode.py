"""The episode runner: the one place that drives env + LLM client + chat template into a token-level
Trajectory. The verl and TRL adapters, the collector, ``toolgym rollout`` and ``toolgym eval`` all call it.

Token in, token out: the ids the engine sampled are appended to the response exactly as sampled (mask 1, with
their logprobs); everything else after the prompt — the tokens that close a turn the model stopped with a
stop string, and each observation rendered by the chat template — is appended with mask 0. ``env.reset`` and
``env.step`` run in a thread pool, so a slow tool never stalls generation for the other episodes.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import Executor
from typing import Any

import gymnasium as gym
from pydantic import BaseModel, ConfigDict, Field

from toolgym.core.env import ToolEnv
from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient, Sampling


class RolloutConfig(BaseModel):
    """Budgets and sampling for one episode."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: tokens after the prompt, generated and observation tokens together (verl's ``response_length``)
    max_response_tokens: int = Field(1024, ge=1)
    #: tokens one model turn may generate
    max_tokens_per_turn: int = Field(256, ge=1)
    sampling: Sampling = Sampling()


async def run_episode(
    env: gym.Env,
    client: LLMClient,
    renderer: ChatRenderer,
    config: RolloutConfig | None = None,
    *,
    seed: int | None = None,
    options: dict[str, Any] | None = None,
    request_id: str = "episode",
    sampling_seed: int | None = None,
    executor: Executor | None = None,
) -> Trajectory:
    """Play one episode of ``env`` with ``client`` and return its token-level Trajectory.

    ``seed``/``options`` go to ``env.reset`` (pin a task with ``options={"task": ...}``); ``sampling_seed``
    seeds the engine's sampler for this episode (turn ``i`` uses ``sampling_seed + i``).
    """
    config = config or RolloutConfig()
    loop = asyncio.get_running_loop()
    inner = env.unwrapped
    if not isinstance(inner, ToolEnv):
        raise TypeError(f"run_episode needs a toolgym ToolEnv, got {type(inner).__name__}")
    stops = tuple(dict.fromkeys((*config.sampling.stop, *inner.parser.stop_sequences)))

    env_s = gen_s = 0.0
    t = time.perf_counter()
    _, info = await loop.run_in_executor(executor, lambda: env.reset(seed=seed, options=options))
    env_s += time.perf_counter() - t
    tools = info["tools"]
    messages = info["messages"]
    prompt_ids = renderer.prompt_ids(messages, tools)
    response_ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    stop_reason = None
    done = False
    turn = 0
    while not done:
        budget = config.max_response_tokens - len(response_ids)
        if budget <= 0:
            stop_reason = "length"
            break
        sampling = config.sampling.model_copy(
            update={
                "max_tokens": min(config.max_tokens_per_turn, budget),
                "stop": stops,
                "seed": None if sampling_seed is None else sampling_seed + turn,
            }
        )
        t = time.perf_counter()
        gen = await client.generate(prompt_ids + response_ids, sampling, f"{request_id}-t{turn}")
        gen_s += time.perf_counter() - t
        response_ids += gen.token_ids
        mask += [1] * len(gen.token_ids)
        logprobs += gen.logprobs
        turn += 1

        action = renderer.action_text(gen.token_ids)
        before = messages
        t = time.perf_counter()
        _, _, terminated, truncated, info = await loop.run_in_executor(executor, env.step, action)
        env_s += time.perf_counter() - t
        messages = info["messages"]
        if terminated or truncated:
            break
        # the assistant turn is closed by the template, then the observation messages follow
        added = messages[len(before) + 1 :]
        extra = renderer.turn_close_ids(gen.token_ids) + renderer.observation_ids(
            messages[: len(before) + 1], added, tools
        )
        room = config.max_response_tokens - len(response_ids)
        if len(extra) >= room:
            extra = extra[:room]
            stop_reason, done = "length", True
        response_ids += extra
        mask += [0] * len(extra)
        logprobs += [0.0] * len(extra)

    traj = inner.trajectory
    assert traj is not None
    return traj.model_copy(
        update={
            "stop_reason": stop_reason or traj.stop_reason,
            "prompt_ids": prompt_ids,
            "response_ids": response_ids,
            "response_mask": mask,
            "logprobs": logprobs,
            "generation_s": gen_s,
            "env_s": env_s,
        },
        deep=True,
    )
