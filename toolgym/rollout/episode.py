"""The episode runner: the one place that drives env + LLM client + chat template into a token-level
Trajectory. The verl and TRL adapters, the collector, ``toolgym rollout`` and ``toolgym eval`` all call it.

Token in, token out: the ids the engine sampled are appended to the response exactly as sampled (mask 1, with
their logprobs); everything else after the prompt — the tokens that close a turn the model stopped with a
stop string, and each observation rendered by the chat template — is appended with mask 0. The response
never ends in mask-0 tokens (an observation cut by the token budget is dropped), so a trainer that puts the
reward on the last token puts it on one the model generated.

Nothing here blocks the event loop: ``env.reset``/``env.step`` and the chat-template rendering and
tokenizing run in ``executor``, so a slow tool or a long prompt never stalls generation for the other
episodes. Every turn of an episode is sent with the same ``request_id`` (a session id: routers keep an
episode on one server and its prefix cache warm).

A failure inside the episode (the engine, the env, a prompt over ``max_prompt_tokens``) does not raise: the
Trajectory comes back with ``error`` set, its prompt and what was generated kept, and an all-zero mask, so a
batch of many episodes survives one bad one and a trainer can see and skip it (``Trajectory.trainable``).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from concurrent.futures import Executor
from typing import Any

import gymnasium as gym
from pydantic import BaseModel, ConfigDict, Field

from toolgym.core.types import Trajectory
from toolgym.core.waits import WaitTally, episode_waits
from toolgym.envs.base import ToolEnv
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient, Sampling
from toolgym.rollout.clients.errors import ClientError


class RolloutConfig(BaseModel):
    """Budgets and sampling for one episode."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: tokens after the prompt, generated and observation tokens together (verl's ``response_length``)
    max_response_tokens: int = Field(1024, ge=1)
    #: tokens one model turn may generate
    max_tokens_per_turn: int = Field(256, ge=1)
    #: tokens the rendered prompt may have (verl's ``prompt_length``); a longer one fails the episode
    max_prompt_tokens: int | None = Field(None, ge=1)
    sampling: Sampling = Sampling()


class PromptTooLong(ValueError):
    """The env's first prompt does not fit ``RolloutConfig.max_prompt_tokens``."""


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
    seeds the engine's sampler for this episode (turn ``i`` uses ``sampling_seed + i``); ``request_id`` is
    the episode's session id, sent with every turn. Failures come back as a Trajectory with ``error`` set
    (see the module docstring); only a misuse (an env that is not a toolgym env) raises.
    """
    inner = env.unwrapped
    if not isinstance(inner, ToolEnv):
        raise TypeError(f"run_episode needs a toolgym ToolEnv, got {type(inner).__name__}")
    episode = _Episode(env, inner, client, renderer, config or RolloutConfig(), executor)
    with episode_waits() as episode.waits:  # capacity waits below env.step (sandbox slots), this episode's
        try:
            await episode.play(seed, options, request_id, sampling_seed)
        except Exception as exc:  # the episode fails, the batch goes on
            return episode.failed(exc)
        return episode.result()


class _Episode:
    """The state of one episode as it is played: the token buffers, timings and the last env info."""

    def __init__(
        self,
        env: gym.Env,
        inner: ToolEnv,
        client: LLMClient,
        renderer: ChatRenderer,
        config: RolloutConfig,
        executor: Executor | None,
    ):
        self.env, self.inner, self.client, self.renderer = env, inner, client, renderer
        self.config, self.executor = config, executor
        self.prompt_ids: list[int] = []
        self.response_ids: list[int] = []
        self.mask: list[int] = []
        self.logprobs: list[float] | None = []
        #: per response token, the weights' version that sampled it (-1: not sampled); None once a turn's
        #: engine did not say
        self.versions: list[int] | None = []
        self.stop_reason: str | None = None
        self.gen_s = self.env_s = 0.0
        self.step_s: list[float] = []
        self.reset_done = False
        self.waits = WaitTally()

    async def _off_loop(self, fn: Any, *args: Any) -> Any:
        """``fn`` in the executor, in this episode's context (so a wait below it counts for the episode)."""
        context = contextvars.copy_context()
        return await asyncio.get_running_loop().run_in_executor(self.executor, context.run, fn, *args)

    async def play(
        self, seed: int | None, options: dict[str, Any] | None, request_id: str, sampling_seed: int | None
    ) -> None:
        config, renderer = self.config, self.renderer
        stops = tuple(dict.fromkeys((*config.sampling.stop, *self.inner.parser.stop_sequences)))
        t = time.perf_counter()
        _, info = await self._off_loop(lambda: self.env.reset(seed=seed, options=options))
        self.env_s += time.perf_counter() - t
        self.reset_done = True
        tools, messages = info["tools"], info["messages"]
        self.prompt_ids = await self._off_loop(renderer.prompt_ids, messages, tools)
        cap = config.max_prompt_tokens
        if cap is not None and len(self.prompt_ids) > cap:
            raise PromptTooLong(
                f"the prompt has {len(self.prompt_ids)} tokens, more than max_prompt_tokens={cap}; raise the "
                "cap (verl: data.max_prompt_length) or shorten the task or the env's system_prompt"
            )
        turn = 0
        while True:
            budget = config.max_response_tokens - len(self.response_ids)
            if budget <= 0:
                self.stop_reason = "length"
                return
            sampling = config.sampling.model_copy(
                update={
                    "max_tokens": min(config.max_tokens_per_turn, budget),
                    "stop": stops,
                    "seed": None if sampling_seed is None else sampling_seed + turn,
                }
            )
            t = time.perf_counter()
            gen = await self.client.generate(self.prompt_ids + self.response_ids, sampling, request_id)
            self.gen_s += time.perf_counter() - t
            if gen.finish_reason in ("abort", "error"):  # not the policy's turn: nothing to step or train
                raise ClientError(f"the engine ended turn {turn} with {gen.finish_reason!r}")
            self._append(gen.token_ids, 1, gen.logprobs, gen.policy_versions)
            turn += 1

            action = await self._off_loop(renderer.action_text, gen.token_ids)
            t = time.perf_counter()
            _, _, terminated, truncated, step_info = await self._off_loop(self.env.step, action)
            self.step_s.append(time.perf_counter() - t)
            self.env_s += self.step_s[-1]
            if terminated or truncated:
                return
            before, messages = len(messages), step_info["messages"]
            # the assistant turn is closed by the template, then the observation messages follow
            extra = await self._off_loop(self._observation_ids, gen.token_ids, messages, before, tools)
            room = config.max_response_tokens - len(self.response_ids)
            if len(extra) >= room:  # the observation does not fit: the episode ends on the model's turn
                self.stop_reason = "length"
                return
            self._append(extra, 0, None, None)

    def _observation_ids(
        self, generated: list[int], messages: list[dict], before: int, tools: list
    ) -> list[int]:
        renderer = self.renderer
        return renderer.turn_close_ids(generated) + renderer.observation_ids(
            messages[: before + 1], messages[before + 1 :], tools
        )

    def _append(
        self, ids: list[int], mask: int, logprobs: list[float] | None, versions: list[int] | None
    ) -> None:
        self.response_ids += ids
        self.mask += [mask] * len(ids)
        if mask == 0:
            logprobs, versions = [0.0] * len(ids), [-1] * len(ids)
        if logprobs is None or self.logprobs is None:  # one turn without logprobs: the episode has none
            self.logprobs = None
        else:
            self.logprobs += logprobs
        if versions is None or self.versions is None:  # an engine that does not say: no versions at all
            self.versions = None
        else:
            self.versions += versions

    def _tokenizer_name(self) -> str | None:
        name = getattr(self.renderer.tokenizer, "name_or_path", None)
        return name if isinstance(name, str) and name else None

    def _trim_trailing_observation(self) -> None:
        while self.mask and self.mask[-1] == 0:
            self.mask.pop()
            self.response_ids.pop()
            if self.logprobs is not None:
                self.logprobs.pop()
            if self.versions is not None:
                self.versions.pop()

    def result(self) -> Trajectory:
        self._trim_trailing_observation()
        traj = self.inner.trajectory
        assert traj is not None
        update = {**self._played(), "stop_reason": self.stop_reason or traj.stop_reason}
        return traj.model_copy(update=update, deep=True)

    def failed(self, exc: Exception) -> Trajectory:
        """The episode as far as it got, untrainable: error set, every token masked out."""
        self._trim_trailing_observation()
        traj = self.inner.trajectory if self.reset_done else None
        task = self.inner.task if self.reset_done else None
        base = traj.model_copy(deep=True) if traj is not None else Trajectory(task_id="?")
        return base.model_copy(
            update={
                **self._played(),
                "task_id": task.id if task is not None else base.task_id,
                "stop_reason": "error",
                "error": f"{type(exc).__name__}: {exc}",
                "response_mask": [0] * len(self.response_ids),
            }
        )

    def _played(self) -> dict[str, Any]:
        """What the runner adds to the env's Trajectory: the tokens, their mask and logprobs, the timings."""
        return {
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "response_mask": self.mask,
            "logprobs": self.logprobs,
            # nothing sampled yet: unknown, not "no versions"
            "policy_versions": self.versions if self.versions and 1 in self.mask else None,
            "generation_s": self.gen_s,
            "env_s": self.env_s,
            "wait_s": self.waits.seconds,
            "step_s": self.step_s,
            "tokenizer": self._tokenizer_name(),
        }


__all__ = ["PromptTooLong", "RolloutConfig", "run_episode"]
