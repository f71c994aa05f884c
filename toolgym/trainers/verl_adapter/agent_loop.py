"""``ToolgymAgentLoop``: verl's agent loop for rows exported by toolgym (``toolgym export verl``).

verl builds one agent-loop instance per sample and calls ``run(sampling_params, **row)``. The row names its
env (``extra_info.env_id``, ``env_kwargs``) and pins its task (``extra_info.task``), so every sample of a
GRPO group plays the same task. The loop borrows an env from a per-process pool, plays the episode with the
shared runner (``toolgym.rollout.run_episode``) through verl's own vLLM servers (``VerlServerClient``), and
returns the runner's tokens as they are: the prompt, the response with mask 1 exactly on generated tokens,
their logprobs, and the verifier's reward as ``reward_score`` (so verl skips its reward loop and puts the
reward on the last response token, which the runner guarantees is a generated one).

What verl needs and the loop guarantees:
- lengths: the runner's budgets are verl's ``rollout.prompt_length``/``response_length`` (verl pads but never
  truncates; one over-long sample would break the whole batch). A prompt over its cap fails the episode and
  is left-truncated here only to keep the batch's shape.
- a sample that must not train (the episode failed, or its verifier did, or, with ``exclude_infra_errors``
  (the default), a tool call failed through our fault: the sandbox lost the episode's state or had no slot
  for it, the retriever was down) gets an all-zero mask and reward 0; ``reward_extra_info.trainable`` says
  which, and ``error``, ``infra_errors`` and ``wait_s`` count why.
- ``extra_fields`` has the same keys for every sample (verl concatenates them across the batch).
- at most ``max_concurrent_episodes`` episodes run at once per worker (verl starts a whole chunk at once, and
  each episode holds an env: a sandbox session, a search index).
- with ``dump_dir`` set, every ``dump_every`` steps the first ``dump_episodes`` episodes a worker finishes are
  written there whole (``toolgym.rollout.dump``; ``toolgym view DIR`` opens them), with the step of the
  weights that generated them (verl's servers report it) and whether the loss used them.

Env pools, the chat renderer and the thread pool live per worker process (``_WorkerState``), not per sample.
"""

from __future__ import annotations

import asyncio
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from toolgym.core.types import Trajectory
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.dump import DumpSettings, EpisodeDump
from toolgym.rollout.episode import RolloutConfig, run_episode
from toolgym.rollout.models import generation_eos_ids
from toolgym.rollout.pool import EnvPool
from toolgym.trainers.verl_adapter.client import VerlServerClient
from toolgym.trainers.verl_adapter.export import episode_key

DEFAULT_MAX_CONCURRENT_EPISODES = 256


class ToolgymAgentLoop(AgentLoopBase):
    """Play one exported row's toolgym env (see the module docstring).

    Args (beyond verl's own, set in the agent-loop YAML):
        max_tokens_per_turn: tokens one model turn may generate (default: ``rollout.response_length``).
        max_concurrent_episodes: episodes in flight per agent-loop worker (each leases an env, and so
            reserves one session slot of the worker's sandbox: ``toolgym.rollout.pool``).
        exclude_infra_errors: keep an episode whose tool calls failed through our fault out of the loss
            (``Trajectory.trainable_for``); False trains on it with the reward it got.
        template_tools: also render the env's tool schemas through the chat template (``ChatRenderer``).
        dump_dir: write episode dumps here (default: none); ``toolgym train`` sets ``<run dir>/episodes``
            when the config sets ``dump_every``.
        dump_every: dump every N-th step's episodes.
        dump_episodes: episodes per dumped step, per agent-loop worker.
    """

    def __init__(
        self,
        *args: Any,
        max_tokens_per_turn: int | None = None,
        max_concurrent_episodes: int = DEFAULT_MAX_CONCURRENT_EPISODES,
        exclude_infra_errors: bool = True,
        template_tools: bool = False,
        dump_dir: str | None = None,
        dump_every: int = 10,
        dump_episodes: int = 8,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        if max_tokens_per_turn is not None and max_tokens_per_turn < 1:
            raise ValueError(f"max_tokens_per_turn must be >= 1, got {max_tokens_per_turn}")
        if max_concurrent_episodes < 1:
            raise ValueError(f"max_concurrent_episodes must be >= 1, got {max_concurrent_episodes}")
        name = self.rollout_config.get("name", "vllm")
        if name != "vllm":
            raise ValueError(
                f"toolgym's agent loop drives vLLM servers (it sends vLLM sampling fields); "
                f"set actor_rollout_ref.rollout.name=vllm (got {name!r})"
            )
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        per_turn = min(max_tokens_per_turn or self.response_length, self.response_length)
        self.max_tokens_per_turn = per_turn
        self.state = _WorkerState.get(
            self.tokenizer,
            dict(self.apply_chat_template_kwargs or {}),
            self.config.actor_rollout_ref.model.path,
            bool(template_tools),
        )
        self.max_concurrent_episodes = max_concurrent_episodes
        self.exclude_infra_errors = bool(exclude_infra_errors)
        self.dump = (
            self.state.dump(DumpSettings(directory=dump_dir, every=dump_every, episodes=dump_episodes))
            if dump_dir
            else None
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        try:
            row = episode_key(kwargs.get("extra_info"))
        except ValueError as exc:
            raise ValueError(f"data_source {kwargs.get('data_source')!r}: {exc}") from None
        config = RolloutConfig(
            max_response_tokens=self.response_length,
            max_tokens_per_turn=self.max_tokens_per_turn,
            max_prompt_tokens=self.prompt_length,
            sampling=_sampling(sampling_params),
        )
        client = VerlServerClient(
            self.server_manager,
            logprobs=bool(sampling_params.get("logprobs", True)),
            priority=int(kwargs.get("priority", 0) or 0),
        )
        async with self.state.slots(self.max_concurrent_episodes):
            with self.state.pool.lease(row.env_id, row.env_kwargs) as env:
                traj = await run_episode(
                    env,
                    client,
                    self.state.renderer,
                    config,
                    seed=row.seed,
                    options={"task": row.task},
                    request_id=uuid4().hex,
                    executor=self.state.executor,
                )
        if self.dump is not None:
            trained = traj.trainable_for(self.exclude_infra_errors)
            self.dump.offer(client.max_global_steps, traj, trained)
        return self._output(traj, client)

    def _output(self, traj: Trajectory, client: VerlServerClient) -> AgentLoopOutput:
        prompt_ids = traj.prompt_ids[-self.prompt_length :]  # only a failed over-long prompt is cut
        response_ids = list(traj.response_ids)
        trainable = traj.trainable_for(self.exclude_infra_errors)
        mask = traj.training_mask_for(self.exclude_infra_errors)
        logprobs = list(traj.logprobs) if traj.logprobs is not None else None
        if not prompt_ids:  # reset itself failed: a one-token placeholder keeps the batch's shapes valid
            prompt_ids = [self._filler_id()]
        if not response_ids:
            response_ids, mask = [self._filler_id()], [0]
            logprobs = [0.0] if logprobs is not None else None
        reward = float(traj.reward) if trainable else 0.0
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=response_ids,
            response_mask=mask,
            response_logprobs=logprobs,
            reward_score=reward,
            num_turns=sum(m.get("role") != "system" for m in traj.messages),
            metrics={"generate_sequences": traj.generation_s, "tool_calls": traj.env_s},
            extra_fields={
                # numbers, fixed keys: verl logs them per data source
                "reward_extra_info": {**traj.stats(), "trainable": float(trainable)},
                "turn_scores": traj.turn_rewards,
                "tool_rewards": [],
                "min_global_steps": client.min_global_steps,
                "max_global_steps": client.max_global_steps,
                "toolgym_error": traj.error or "",
                "toolgym_stop_reason": traj.stop_reason or "",
            },
        )

    def _filler_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad if pad is not None else self.tokenizer.eos_token_id)


def _sampling(params: dict[str, Any]) -> Sampling:
    """verl's per-batch sampling settings (temperature, top_p, top_k, repetition_penalty) as toolgym's."""
    top_k = params.get("top_k", -1)
    return Sampling(
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        top_k=-1 if top_k is None or int(top_k) <= 0 else int(top_k),
        repetition_penalty=float(params.get("repetition_penalty", 1.0)),
    )


class _WorkerState:
    """What the per-sample agent loops of one worker process share: env pool, renderer, thread pool, and a
    bound on episodes in flight (per event loop: verl runs a worker's samples on one loop)."""

    _instances: ClassVar[dict[tuple[int, str], _WorkerState]] = {}
    _lock = threading.Lock()

    def __init__(
        self, tokenizer: Any, chat_template_kwargs: dict[str, Any], model_path: str, template_tools: bool
    ):
        self.renderer = ChatRenderer(
            tokenizer, template_tools=template_tools, chat_template_kwargs=chat_template_kwargs
        )
        self.renderer.eos_ids |= generation_eos_ids(model_path)
        self.pool = EnvPool()
        self.executor = ThreadPoolExecutor(max_workers=64, thread_name_prefix="toolgym-verl")
        self._semaphores: dict[int, asyncio.Semaphore] = {}
        self._dumps: dict[DumpSettings, EpisodeDump] = {}

    @classmethod
    def get(
        cls,
        tokenizer: Any,
        chat_template_kwargs: dict[str, Any],
        model_path: str,
        template_tools: bool = False,
    ) -> _WorkerState:
        key = (id(tokenizer), json.dumps(chat_template_kwargs, sort_keys=True, default=str), template_tools)
        with cls._lock:
            if key not in cls._instances:
                cls._instances[key] = cls(tokenizer, chat_template_kwargs, model_path, template_tools)
            return cls._instances[key]

    def dump(self, settings: DumpSettings) -> EpisodeDump:
        """The worker's one writer for ``settings`` (verl builds a new agent loop per sample: the count of
        episodes dumped per step lives here)."""
        with self._lock:
            if settings not in self._dumps:
                self._dumps[settings] = EpisodeDump(settings, trainer="verl")
            return self._dumps[settings]

    def slots(self, limit: int) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        semaphore = self._semaphores.get(id(loop))
        if semaphore is None:
            semaphore = self._semaphores[id(loop)] = asyncio.Semaphore(limit)
        return semaphore


__all__ = ["ToolgymAgentLoop"]
