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

- an env whose verifier judges groups (``verify_group``: an LLM judge with ``"group": true``) is judged per
  GRPO group: the samples of one ``uid`` this worker plays are gathered and judged with one call once all are
  done (``toolgym.rollout.group_judge.GroupGathering``); a group split across workers is judged pointwise,
  and the verdict's details say so.

Env pools, the chat renderer, the thread pool and the bound on episodes live in the worker process's episode
host (``toolgym.rollout.host``), not per sample: verl builds an agent loop per sample.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from toolgym.core.task import Task
from toolgym.core.types import Trajectory
from toolgym.rollout.dump import DumpSettings
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.group_judge import (
    DEFAULT_GROUP_TIMEOUT_S,
    GroupGathering,
    GroupVerifier,
    play_for_group,
)
from toolgym.rollout.host import DEFAULT_MAX_CONCURRENT_EPISODES, EpisodeHost
from toolgym.rollout.keys import EpisodeKey
from toolgym.rollout.samples import filler_token_id, sampling_from, trainer_sample
from toolgym.trainers.verl_adapter.client import VerlServerClient
from toolgym.trainers.verl_adapter.names import ROWS_HINT

#: the group gathering of each event loop (verl's worker runs one; it builds an agent loop per sample)
_GATHERINGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, GroupGathering] = (
    weakref.WeakKeyDictionary()
)


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
        group_judge_timeout_s: for an env whose verifier judges groups (``verify_group``), how long a
            finished sample waits for the rest of its GRPO group (its ``uid``) in this worker before it is
            judged alone (``toolgym.rollout.group_judge``).
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
        group_judge_timeout_s: float = DEFAULT_GROUP_TIMEOUT_S,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        if max_tokens_per_turn is not None and max_tokens_per_turn < 1:
            raise ValueError(f"max_tokens_per_turn must be >= 1, got {max_tokens_per_turn}")
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
        self.host = EpisodeHost.shared("verl", max_concurrent_episodes=max_concurrent_episodes)
        self.renderer = self.host.renderer(
            self.tokenizer,
            chat_template_kwargs=self.apply_chat_template_kwargs,
            template_tools=bool(template_tools),
            model_path=self.config.actor_rollout_ref.model.path,
        )
        self.exclude_infra_errors = bool(exclude_infra_errors)
        self.group_judge_timeout_s = float(group_judge_timeout_s)
        self.group_size = int(self.rollout_config.get("n", 1) or 1)
        self.dump = (
            self.host.dump(DumpSettings(directory=dump_dir, every=dump_every, episodes=dump_episodes), "verl")
            if dump_dir
            else None
        )

    def _gathering(self) -> GroupGathering:
        loop = asyncio.get_running_loop()
        if loop not in _GATHERINGS:
            _GATHERINGS[loop] = GroupGathering(self.host.call, timeout_s=self.group_judge_timeout_s)
        return _GATHERINGS[loop]

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        """Play the row's episode. With an env whose verifier judges groups (``verify_group``) and
        ``rollout.n`` > 1, the samples of one ``uid`` are judged together, one judge call per group, once all
        of them have finished in this worker (``GroupGathering``: each sample registers before its first
        ``await``, so the worker knows how many of the group it plays)."""
        uid = str(kwargs.get("uid") or "")
        gathering = self._gathering() if self.group_size > 1 and uid else None
        if gathering is not None:
            gathering.start(uid)
        try:
            traj, judge, task, client = await self._play(sampling_params, gathering is not None, kwargs)
        except BaseException:
            if gathering is not None:
                gathering.abandon(uid)
            raise
        if gathering is not None:
            if judge is None or task is None:
                gathering.abandon(uid)  # judged by the env as usual: nothing to gather
            else:
                traj = await gathering.finish(uid, self.group_size, traj, judge, task)
        if self.dump is not None:
            trained = traj.trainable_for(self.exclude_infra_errors)
            self.dump.offer(client.max_global_steps, traj, trained)
        return self._output(traj, client)

    async def _play(
        self, sampling_params: dict[str, Any], group: bool, kwargs: dict[str, Any]
    ) -> tuple[Trajectory, GroupVerifier | None, Task | None, VerlServerClient]:
        try:
            row = EpisodeKey.from_fields(kwargs.get("extra_info"), how=ROWS_HINT)
        except ValueError as exc:
            raise ValueError(f"data_source {kwargs.get('data_source')!r}: {exc}") from None
        config = RolloutConfig(
            max_response_tokens=self.response_length,
            max_tokens_per_turn=self.max_tokens_per_turn,
            max_prompt_tokens=self.prompt_length,
            sampling=sampling_from(sampling_params),
        )
        client = VerlServerClient(
            self.server_manager,
            logprobs=bool(sampling_params.get("logprobs", True)),
            priority=int(kwargs.get("priority", 0) or 0),
        )
        traj, judge, task = await play_for_group(
            self.host, row, client, self.renderer, config, group=group, request_id=uuid4().hex
        )
        return traj, judge, task, client

    def _output(self, traj: Trajectory, client: VerlServerClient) -> AgentLoopOutput:
        sample = trainer_sample(
            traj,
            filler_id=filler_token_id(self.tokenizer),
            exclude_infra_errors=self.exclude_infra_errors,
            max_prompt_tokens=self.prompt_length,
        )
        return AgentLoopOutput(
            prompt_ids=sample.prompt_ids,
            response_ids=sample.response_ids,
            response_mask=sample.mask,
            response_logprobs=sample.logprobs,
            reward_score=sample.reward or 0.0,
            num_turns=sum(m.get("role") != "system" for m in traj.messages),
            metrics={"generate_sequences": traj.generation_s, "tool_calls": traj.env_s},
            extra_fields={
                # numbers, fixed keys: verl logs them per data source
                "reward_extra_info": {**traj.stats(), "trainable": float(sample.trainable)},
                "turn_scores": traj.turn_rewards,
                "tool_rewards": [],
                "min_global_steps": client.min_global_steps,
                "max_global_steps": client.max_global_steps,
                "toolgym_error": traj.error or "",
                "toolgym_stop_reason": traj.stop_reason or "",
            },
        )


__all__ = ["ToolgymAgentLoop"]
