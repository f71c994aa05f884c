"""What toolgym's verl agent loops share: ``ToolgymAgentLoop`` (the env's episode, played by the shared
runner) and ``ToolgymGatewayAgentLoop`` (a user's agent program, played against a gateway) differ in who plays
the episode, not in what verl gets back. Both are built by verl once per sample and hand verl a token-level
``Trajectory`` through :meth:`ToolgymLoopBase._output`, under the same rules:

- lengths: the budgets are verl's ``rollout.prompt_length``/``response_length`` (verl pads but never
  truncates; one over-long sample would break the whole batch). A prompt over its cap fails the episode and
  is left-truncated here only to keep the batch's shape.
- a sample that must not train (the episode failed, or its verifier did, or, with ``exclude_infra_errors``
  (the default), a tool call failed through our fault: the sandbox lost the episode's state or had no slot
  for it, the retriever was down) gets an all-zero mask and reward 0; ``reward_extra_info.trainable`` says
  which, and ``error``, ``infra_errors`` and ``wait_s`` count why.
- the verifier's reward is ``reward_score`` (so verl skips its reward loop and puts the reward on the last
  response token, which is always one the model generated).
- ``extra_fields`` and ``reward_extra_info`` have the same keys for every sample, whichever toolgym loop
  played it (verl concatenates them across the batch, and one batch may hold both: a run whose envs are
  played by the runner and by agent programs): ``segments`` is 1 for the runner's episodes, and for an
  agent program the number of segments its session had, of which only the last is trained on
  (``dropped_segments``, see ``toolgym/trainers/agent_samples.py``); ``agent_program`` is 1 for the samples
  an agent program played, 0 for the runner's.
- each response token carries the version of the weights that sampled it (``extra_fields.policy_versions``,
  -1 where nothing was sampled) beside the logprob those weights gave it (``response_logprobs``, which
  verl's bypass mode trains on as the old policy's): in fully-asynchronous training with partial rollouts a
  weight update may interrupt an episode, which then resumes under the new weights with its env as it was
  (the episode's env and sandbox session live on through the wait); ``min_global_steps`` and
  ``max_global_steps`` are the oldest and newest of them, and ``resumed_generations`` counts the resumes.
- at most ``max_concurrent_episodes`` episodes run at once per worker (verl starts a whole chunk at once, and
  each episode holds an env: a sandbox session, a search index).
- with ``dump_dir`` set, every ``dump_every`` steps the first ``dump_episodes`` episodes a worker finishes are
  written there whole (``toolgym.rollout.dump``; ``toolgym view DIR`` opens them), with the step of the
  weights that generated them (verl's servers report it) and whether the loss used them.

Env pools, the chat renderer, the thread pool and the bound on episodes live in the worker process's episode
host (``toolgym.rollout.host``), not per sample.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from toolgym.core.types import Trajectory
from toolgym.rollout.dump import DumpSettings
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.host import DEFAULT_MAX_CONCURRENT_EPISODES, EpisodeHost
from toolgym.rollout.keys import EpisodeKey
from toolgym.rollout.samples import filler_token_id, sampling_from, trainer_sample
from toolgym.trainers.verl_adapter.client import VerlServerClient
from toolgym.trainers.verl_adapter.names import ROWS_HINT


class ToolgymLoopBase(AgentLoopBase):
    """The settings, host and output of a toolgym agent loop (see the module docstring).

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

    #: whether this loop's samples are played by a user's agent program (``reward_extra_info.agent_program``)
    plays_agent_program = False

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
        self.dump = (
            self.host.dump(DumpSettings(directory=dump_dir, every=dump_every, episodes=dump_episodes), "verl")
            if dump_dir
            else None
        )
        #: the segments of this sample's session (verl builds a loop per sample); the runner's episode is one
        self.segments = 1

    def _episode_key(self, kwargs: dict[str, Any]) -> EpisodeKey:
        """The episode the row pins (``extra_info``, written by ``toolgym export verl``)."""
        try:
            return EpisodeKey.from_fields(kwargs.get("extra_info"), how=ROWS_HINT)
        except ValueError as exc:
            raise ValueError(f"data_source {kwargs.get('data_source')!r}: {exc}") from None

    def _rollout_config(self, sampling_params: dict[str, Any]) -> RolloutConfig:
        """verl's budgets and this sample's sampling settings (training and validation differ)."""
        return RolloutConfig(
            max_response_tokens=self.response_length,
            max_tokens_per_turn=self.max_tokens_per_turn,
            max_prompt_tokens=self.prompt_length,
            sampling=sampling_from(sampling_params),
        )

    def _server_client(self, sampling_params: dict[str, Any], kwargs: dict[str, Any]) -> VerlServerClient:
        """verl's servers as this sample's engine (its logprob setting and scheduling priority)."""
        return VerlServerClient(
            self.server_manager,
            logprobs=bool(sampling_params.get("logprobs", True)),
            priority=int(kwargs.get("priority", 0) or 0),
            resume_aborted=partial_rollout(self.config),
        )

    def _offer_dump(self, traj: Trajectory, client: VerlServerClient) -> None:
        if self.dump is not None:
            trained = traj.trainable_for(self.exclude_infra_errors)
            self.dump.offer(client.max_global_steps, traj, trained)

    def _output(self, traj: Trajectory, client: VerlServerClient) -> AgentLoopOutput:
        sample = trainer_sample(
            traj,
            filler_id=filler_token_id(self.tokenizer),
            exclude_infra_errors=self.exclude_infra_errors,
            max_prompt_tokens=self.prompt_length,
        )
        segments = {
            "segments": float(self.segments),
            "dropped_segments": float(max(self.segments - 1, 0)),
            "agent_program": float(self.plays_agent_program),
            # generations a weight update interrupted and that resumed under the new weights
            "resumed_generations": float(client.resumed),
        }
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
                "reward_extra_info": {**traj.stats(), "trainable": float(sample.trainable), **segments},
                "turn_scores": traj.turn_rewards,
                "tool_rewards": [],
                "min_global_steps": client.min_global_steps,
                "max_global_steps": client.max_global_steps,
                # per response token, the weights' version that sampled it (-1: not sampled), beside the
                # logprobs those weights gave (``response_logprobs``: verl's bypass mode trains on them)
                "policy_versions": sample.policy_versions,
                "toolgym_error": traj.error or "",
                "toolgym_stop_reason": traj.stop_reason or "",
            },
        )


def partial_rollout(trainer_config: Any) -> bool:
    """Whether a generation a weight update aborted resumes under the new weights: verl's fully-async
    trainer with ``async_training.partial_rollout`` (its other trainers never abort a generation)."""
    settings = trainer_config.get("async_training") if hasattr(trainer_config, "get") else None
    return bool(settings is not None and settings.get("partial_rollout", False))


__all__ = ["ToolgymLoopBase", "partial_rollout"]
