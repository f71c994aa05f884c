"""The ``toolgym train`` config: one readable YAML instead of ~40 Hydra overrides.

verl's own config has hundreds of keys, and a multi-turn tool-use run needs a dozen of them to agree (prompt
and response lengths in ``data.*`` and ``rollout.*``, ``max_model_len``, the agent loop, async rollout). This
model holds the few choices a user makes; ``launch.py`` derives every verl key from them, and
``verl_overrides`` is the escape hatch for anything else. Unknown keys are errors that name the fix, because a
typo in a training config otherwise costs a GPU job.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from toolgym.trainers.train_config import (
    AgentConfig,
    AgentEnvSpec,
    EnvSpec,
    JudgeConfig,
    Logger,
    env_kwargs_with_turns,
)
from toolgym.trainers.train_config import load_train_config as load_config
from toolgym.trainers.verl_adapter.names import AGENT_NAME, GATEWAY_AGENT_NAME

AttnImplementation = Literal["auto", "flash_attention_2", "sdpa", "eager"]
#: how rollout and training take turns (``docs/training.md``: Asynchronous training)
Mode = Literal["sync", "one_step_off", "fully_async"]
#: the default checkpoint interval of a GPU run (steps)
GPU_SAVE_FREQ = 50


class AsyncTraining(BaseModel):
    """The ``async_training:`` key: the knobs of the two asynchronous modes (``mode: one_step_off`` and
    ``mode: fully_async``), verl's experimental trainers that roll out on GPUs of their own while the
    trainer's GPUs (``gpus_per_node`` x ``nodes``) train, and sync the weights between them after each
    step."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: the knobs only ``mode: fully_async`` reads
    FULLY_ASYNC_ONLY: ClassVar[tuple[str, ...]] = (
        "staleness_threshold",
        "trigger_parameter_sync_step",
        "partial_rollout",
    )

    #: the rollout pool: GPUs per node that serve vLLM (``rollout.n_gpus_per_node``), beside the trainer's
    #: ``gpus_per_node``; with ``device: cpu``, declared to Ray like the trainer's
    rollout_gpus_per_node: int | None = Field(None, ge=1)
    #: nodes of the rollout pool (``rollout.nnodes``)
    rollout_nodes: int = Field(1, ge=1)
    #: fully_async: how far the rollout may run ahead of the trainer, as a share of one weight sync's prompts
    #: (``train_batch_size`` x ``trigger_parameter_sync_step``): 0 waits for each sync (nothing overlaps, no
    #: sample is stale); 0.5 also generates half a sync's worth more while the trainer trains, with the
    #: weights it has: those samples train after the next sync, one policy version stale
    staleness_threshold: float = Field(0.1, ge=0.0)
    #: fully_async: training steps (each of ``train_batch_size`` prompts) per weight sync; a step in the logs
    #: is one sync (verl's own default is 4)
    trigger_parameter_sync_step: int = Field(1, ge=1)
    #: fully_async: a weight sync interrupts the generations in flight, which then go on with the new weights
    #: (so a sample's tokens may come from two policy versions); false: an episode the sync interrupts ends
    #: there, and the loss leaves it out
    partial_rollout: bool = True

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        """An unknown key names this model's keys (the config-wide hint would list the top level's)."""
        if isinstance(data, dict):
            for key in data:
                if key not in cls.model_fields:
                    close = difflib.get_close_matches(str(key), list(cls.model_fields), n=1)
                    guess = f"did you mean `{close[0]}`? " if close else ""
                    raise ValueError(
                        f"unknown key {key!r}: {guess}keys of async_training: {', '.join(cls.model_fields)}"
                    )
        return data


class TrainConfig(JudgeConfig, AgentConfig):
    """What a GRPO/PPO run over toolgym envs needs; defaults suit one GPU and a ~1.5B instruct model. With
    ``agent:`` a user's agent program plays the rows (``ToolgymGatewayAgentLoop``); an env entry's own
    ``agent:`` plays that env's rows (``null``: toolgym's runner), so one run, and one batch, can train both
    (:meth:`env_agent`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: the end of the message for an unknown key: where settings this model does not name go
    unknown_key_hint: ClassVar[str] = " (anything verl-specific goes in verl_overrides: [key=value])"

    #: HF model path or id (``tiny`` is the embedded offline test model)
    model: str
    envs: list[AgentEnvSpec] = Field(min_length=1)
    algorithm: Literal["grpo", "ppo"] = "grpo"

    # -- data and rollout sizes
    #: prompts per training step (``data.train_batch_size``)
    train_batch_size: int = Field(32, ge=1)
    #: samples per prompt, a GRPO group (``actor_rollout_ref.rollout.n``)
    group_size: int = Field(8, ge=1)
    #: turn budget per episode, added to every env's kwargs unless the env sets its own ``max_turns``
    max_turns: int | None = Field(None, ge=1)
    #: the env's reset messages, tokenized with the chat template; longer rows are filtered out by verl
    max_prompt_length: int = Field(1024, ge=16)
    #: every generated and observation token of an episode after the prompt
    max_response_length: int = Field(2048, ge=16)
    #: rows exported for training and validation (split among envs by weight)
    train_rows: int = Field(4096, ge=1)
    val_rows: int = Field(128, ge=1)
    #: seed of the exported task draw
    seed: int = 0

    # -- toolgym agent loop settings (written into a run-specific agent-loop YAML when set)
    #: tokens one model turn may generate (default: the whole remaining response budget)
    max_tokens_per_turn: int | None = Field(None, ge=1)
    #: episodes one verl agent-loop worker runs at once
    max_concurrent_episodes: int | None = Field(None, ge=1)
    #: False: train on episodes whose tool calls failed through our fault (default: keep them out of the loss)
    exclude_infra_errors: bool | None = None
    #: also pass the env's tool schemas to the model's chat template (its own tools block, as for models
    #: trained on native tool calling); default: the env's system prompt alone teaches the action format
    template_tools: bool | None = None
    #: every N steps, write a sample of the episodes (tokens, mask, reward, verdict) to ``<run dir>/episodes``
    #: for ``toolgym view`` (default: no dump)
    dump_every: int | None = Field(None, ge=1)
    #: episodes written per dumped step, per agent-loop worker
    dump_episodes: int = Field(8, ge=1)

    # -- optimisation
    epochs: int = Field(1, ge=1)
    #: stop after this many steps (``trainer.total_training_steps``); default: ``epochs`` over the rows
    steps: int | None = Field(None, ge=1)
    learning_rate: float = Field(1e-6, gt=0.0)
    #: PPO only: the critic's learning rate
    critic_learning_rate: float = Field(1e-5, gt=0.0)
    #: GRPO only: weight of the low-variance KL loss to the reference model (0 turns the reference off)
    kl_loss_coef: float = Field(0.001, ge=0.0)
    #: prompts per optimizer update (default: the whole train batch, one update per step)
    ppo_mini_batch_size: int | None = Field(None, ge=1)
    #: sequences per forward/backward pass on one GPU (lower it on out-of-memory)
    micro_batch_size_per_gpu: int = Field(4, ge=1)
    temperature: float = Field(1.0, gt=0.0)

    # -- how rollout and training take turns
    #: ``sync``: verl's PPO trainer, rollout and training in turn on the same GPUs; ``one_step_off``: the
    #: rollout of step N+1 runs on GPUs of its own while step N trains; ``fully_async``: the rollout streams
    #: samples into a queue the trainer takes them from, up to ``async_training.staleness_threshold`` ahead
    mode: Mode = "sync"
    #: the asynchronous modes' knobs (``AsyncTraining``); required with ``mode: one_step_off|fully_async``
    async_training: AsyncTraining | None = None

    # -- hardware
    #: ``cpu``: verl without a GPU (``toolgym.trainers.verl_adapter.cpu``), for tests and plumbing only
    device: Literal["gpu", "cpu"] = "gpu"
    #: with ``device: cpu``, the number of training workers (Ray is told this many GPUs exist)
    gpus_per_node: int = Field(1, ge=1)
    nodes: int = Field(1, ge=1)
    #: vLLM tensor parallelism per rollout replica
    tensor_parallel_size: int = Field(1, ge=1)
    #: vLLM's share of GPU memory while rolling out (it sleeps while the actor trains)
    gpu_memory_utilization: float = Field(0.5, gt=0.0, le=1.0)
    #: the trainer's attention kernels: ``auto`` = flash_attention_2 where flash-attn is installed, else sdpa
    attn_implementation: AttnImplementation = "auto"

    # -- bookkeeping
    logger: list[Logger] = Field(default_factory=lambda: list[Logger](["console"]))
    project: str = "toolgym"
    #: default: the config file's name
    experiment: str | None = None
    #: default: ``<run dir>/checkpoints``
    checkpoint_dir: str | None = None
    #: save a checkpoint every N steps (-1: never); default: every 50 steps on GPUs (verl resumes from the
    #: newest checkpoint in ``checkpoint_dir`` when the same command runs again), never on CPU (test runs)
    save_freq: int | None = None
    #: validate every N steps (-1: never)
    test_freq: int = 10
    val_before_train: bool = True

    #: anything else, as verl Hydra overrides (``key=value``, ``+key=value``); they win over toolgym's
    verl_overrides: list[str] = Field(default_factory=list)

    @property
    def checkpoint_every(self) -> int:
        """``save_freq``, or its default for the device: a crash at hour ten of a GPU run must not lose it."""
        if self.save_freq is not None:
            return self.save_freq
        return GPU_SAVE_FREQ if self.device == "gpu" else -1

    @field_validator("logger", mode="before")
    @classmethod
    def _one_logger(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("verl_overrides")
    @classmethod
    def _overrides_are_assignments(cls, value: list[str]) -> list[str]:
        for item in value:
            if "=" not in item and not item.startswith("~"):
                raise ValueError(
                    f"{item!r} is not a verl override: write key=value (e.g. trainer.save_freq=50)"
                )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> TrainConfig:
        if self.template_tools is False and AGENT_NAME not in self.agent_loops:
            raise ValueError(
                "an agent's tools travel as OpenAI functions, rendered by the chat template: drop "
                "template_tools: false (it is always on with agent; it is toolgym's runner's setting)"
            )
        if self.ppo_mini_batch_size is not None and self.ppo_mini_batch_size > self.train_batch_size:
            raise ValueError(
                f"ppo_mini_batch_size ({self.ppo_mini_batch_size}) must be <= train_batch_size "
                f"({self.train_batch_size}): an update cannot use more prompts than a step draws"
            )
        self._check_the_batch_divides_over_the_ranks()
        self._check_the_async_knobs()
        if self.train_rows < self.train_batch_size:
            raise ValueError(
                f"train_rows ({self.train_rows}) is smaller than train_batch_size ({self.train_batch_size}): "
                "verl drops the incomplete last batch, so no step would run; raise train_rows"
            )
        return self

    def _check_the_batch_divides_over_the_ranks(self) -> None:
        """verl splits each update's sequences evenly over the ranks, then each rank's share into micro
        batches; a remainder fails an assertion deep in a worker after minutes of start-up (``data size must
        be divisible by force_group_size * micro_batch_size_per_gpu``), so it fails here instead."""
        ranks = self.nodes * self.gpus_per_node
        update = self.mini_batch_size * self.group_size
        if update % ranks:
            raise ValueError(
                f"an update's {update} sequences ((ppo_mini_batch_size or train_batch_size) x group_size) do "
                f"not divide over {ranks} ranks (nodes x gpus_per_node): make it a multiple of {ranks}"
            )
        if (update // ranks) % self.micro_batch_size_per_gpu:
            raise ValueError(
                f"each rank gets {update // ranks} sequences of an update ({update} over {ranks} ranks), not "
                f"a multiple of micro_batch_size_per_gpu ({self.micro_batch_size_per_gpu}): lower "
                "micro_batch_size_per_gpu to a divisor of it, or change the batch"
            )

    def _check_the_async_knobs(self) -> None:
        """``async_training`` goes with an asynchronous mode, its fully_async knobs with ``fully_async``, and
        the rollout pool holds whole vLLM replicas."""
        knobs = self.async_training
        if self.mode == "sync":
            if knobs is not None:
                raise ValueError(
                    "async_training is for mode: one_step_off or mode: fully_async (the rollout on GPUs of "
                    "its own); set one of them, or drop async_training"
                )
            return
        if knobs is None or knobs.rollout_gpus_per_node is None:
            raise ValueError(
                f"mode: {self.mode} rolls out on GPUs of its own, beside the trainer's gpus_per_node: set "
                "async_training: {rollout_gpus_per_node: N}"
            )
        if self.mode == "one_step_off":
            fully_async = [key for key in knobs.FULLY_ASYNC_ONLY if key in knobs.model_fields_set]
            if fully_async:
                raise ValueError(
                    f"async_training.{fully_async[0]} is a mode: fully_async knob; mode: one_step_off always "
                    "trains on the batch rolled out during the step before (drop the key, or set mode: "
                    "fully_async)"
                )
        replicas, rest = divmod(self.rollout_gpus, self.tensor_parallel_size)
        if not replicas or rest:
            raise ValueError(
                f"the rollout pool's {self.rollout_gpus} GPUs "
                "(async_training.rollout_gpus_per_node x rollout_nodes) must hold whole vLLM replicas of "
                f"tensor_parallel_size ({self.tensor_parallel_size}): make it a multiple of it"
            )
        if self.mode == "fully_async" and self.train_batch_size % self.mini_batch_size:
            raise ValueError(
                f"mode: fully_async trains on whole mini batches: train_batch_size ({self.train_batch_size}) "
                f"must be a multiple of ppo_mini_batch_size ({self.mini_batch_size})"
            )

    @property
    def mini_batch_size(self) -> int:
        """Prompts per optimizer update: ``ppo_mini_batch_size``, by default the whole train batch."""
        return self.ppo_mini_batch_size or self.train_batch_size

    @property
    def rollout_gpus(self) -> int:
        """GPUs of the rollout pool, over all its nodes (none: the sync mode rolls out on the trainer's)."""
        knobs = self.async_training
        if self.mode == "sync" or knobs is None or knobs.rollout_gpus_per_node is None:
            return 0
        return knobs.rollout_gpus_per_node * knobs.rollout_nodes

    def env_kwargs(self, env: EnvSpec) -> dict[str, Any]:
        """The env's kwargs with the run-wide ``max_turns`` and ``judge`` filled in (an env's own setting
        wins; only an env that takes a ``judge`` kwarg gets the judge)."""
        return env_kwargs_with_turns(env, self.max_turns, self.judge)

    def env_agent(self, env: AgentEnvSpec) -> str | None:
        """The agent program that plays ``env``'s rows: the entry's own ``agent:`` when it sets the key (null:
        none), else the config's; None is toolgym's runner."""
        return env.agent_of(self.agent)

    @property
    def agent_loop_name(self) -> str:
        """verl's default agent loop (for rows without an ``agent_name``; toolgym's rows all name theirs):
        toolgym's runner, or with ``agent`` the gateway loop."""
        return GATEWAY_AGENT_NAME if self.agent is not None else AGENT_NAME

    @property
    def agent_loops(self) -> tuple[str, ...]:
        """The agent loops that play the run's rows: toolgym's runner for the envs without an agent program,
        the gateway loop for those with one (both, for a mix)."""
        agents = [self.env_agent(env) for env in self.envs]
        loops = (AGENT_NAME,) if any(a is None for a in agents) else ()
        return (*loops, GATEWAY_AGENT_NAME) if any(a is not None for a in agents) else loops

    def agent_loop_kwargs(self) -> dict[str, int | bool | str]:
        """The agent-loop settings the user chose (none: the shipped agent-loop YAML is used as is), for
        every loop the run uses (``launch.write_agent_loop_config`` gives ``agent`` to the gateway loop
        only, as the agent of rows that name none, and ``template_tools`` to the runner only)."""
        chosen: dict[str, int | bool | str | None] = {
            "agent": self.agent,
            "max_tokens_per_turn": self.max_tokens_per_turn,
            "max_concurrent_episodes": self.max_concurrent_episodes,
            "exclude_infra_errors": self.exclude_infra_errors,
            "template_tools": self.template_tools,
            "dump_every": self.dump_every,
            "dump_episodes": self.dump_episodes if self.dump_every is not None else None,
        }
        return {k: v for k, v in chosen.items() if v is not None}


def load_train_config(path: str | Path) -> TrainConfig:
    """Read and validate a ``toolgym train`` YAML for verl (errors say what to fix)."""
    return load_config(path, TrainConfig)


__all__ = [
    "GPU_SAVE_FREQ",
    "AgentEnvSpec",
    "AsyncTraining",
    "EnvSpec",
    "Mode",
    "TrainConfig",
    "load_train_config",
]
