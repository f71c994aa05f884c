"""The ``toolgym train --trainer trl`` config: one readable YAML for a GRPO run with TRL.

The same style as the verl launcher's config (both read with ``toolgym.trainers.train_config``): the few
choices a user makes, with the envs listed the same way (``EnvSpec``: id, kwargs, weight) and every unknown
key an error that names the closest known one. ``launch.py`` derives TRL's ``GRPOConfig`` from it (with
``mode: async``, its ``AsyncGRPOConfig``); ``trl_args`` is the escape hatch for any other field of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import ConfigDict, Field, model_validator

from toolgym.trainers.train_config import (
    AgentConfig,
    EnvSpec,
    JudgeConfig,
    Logger,
    env_kwargs_with_turns,
    load_train_config,
)


class TRLTrainConfig(JudgeConfig, AgentConfig):
    """A GRPO run over toolgym envs with TRL's ``GRPOTrainer``; defaults suit one GPU and a ~1.5B model. With
    ``agent:`` a user's agent program plays the rows (``make_rollout_func(agent=...)``). With ``mode: async``
    TRL's ``AsyncGRPOTrainer`` trains instead, generating on a running vLLM server (``vllm_server_url``) while
    it trains (``ToolgymAsyncGRPOTrainer``, on toolgym's episode runner)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    unknown_key_hint: ClassVar[str] = " (any other GRPOConfig field goes in trl_args: {name: value})"

    #: HF model path or id (``tiny`` is the embedded offline test model)
    model: str
    #: ``sync``: TRL's ``GRPOTrainer``; ``async``: TRL's ``AsyncGRPOTrainer`` (trl.experimental), which
    #: generates on a vLLM server while it trains and syncs the weights to it after every step
    mode: Literal["sync", "async"] = "sync"
    envs: list[EnvSpec] = Field(min_length=1)

    # -- rollout sizes
    #: samples per prompt, a GRPO group (``num_generations``)
    group_size: int = Field(8, ge=2)
    #: prompts (groups) per optimizer step on each device
    prompts_per_step: int = Field(4, ge=1)
    #: turn budget per episode, added to every env's kwargs unless the env sets its own ``max_turns``
    max_turns: int | None = Field(None, ge=1)
    #: a longer first prompt fails its episode (default: no cap)
    max_prompt_length: int | None = Field(None, ge=16)
    #: every generated and observation token of an episode after the prompt (``max_completion_length``)
    max_response_length: int = Field(1024, ge=1)
    #: tokens one model turn may generate (default: the whole response budget)
    max_tokens_per_turn: int | None = Field(None, ge=1)
    #: episodes played at once on each device
    max_concurrent_episodes: int = Field(256, ge=1)
    #: rows of the train dataset (split among envs by weight); the seed of their task draw
    train_rows: int = Field(4096, ge=1)
    seed: int = 0

    # -- optimisation
    epochs: int = Field(1, ge=1)
    #: stop after this many steps (``max_steps``); default: ``epochs`` over the rows
    steps: int | None = Field(None, ge=1)
    learning_rate: float = Field(1e-6, gt=0.0)
    #: weight of the KL penalty to the reference model (``beta``; 0 loads no reference model)
    kl_coef: float = Field(0.0, ge=0.0)
    temperature: float = Field(1.0, gt=0.0)

    # -- generation backend and hardware
    #: generate with TRL's vLLM backend (``colocate``: in the training process, ``server``: trl vllm-serve)
    use_vllm: bool = False
    vllm_mode: Literal["colocate", "server"] = "colocate"
    #: vLLM's share of GPU memory in colocate mode
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0.0, le=1.0)
    #: ``auto``: CUDA where available, else CPU (then bf16 and vLLM are off)
    device: Literal["auto", "cpu", "cuda"] = "auto"
    #: ``auto``: on where the GPU supports it
    bf16: bool | Literal["auto"] = "auto"
    gradient_checkpointing: bool = False

    # -- asynchronous GRPO (mode: async)
    #: samples generated more than this many weight syncs before the step that pulls them are dropped (TRL's
    #: ``max_staleness``); every step logs the staleness trained on and what was dropped
    max_staleness: int = Field(4, ge=0)
    #: the vLLM server the async trainer generates on, started with ``VLLM_SERVER_DEV_MODE=1`` (and on a GPU
    #: ``--weight-transfer-config '{"backend": "nccl"}'``); on a CPU it must read the trainer's files
    vllm_server_url: str = "http://localhost:8000"

    # -- bookkeeping
    logger: list[Logger] = Field(default_factory=lambda: list[Logger](["console"]))
    #: default: the config file's name
    experiment: str | None = None
    #: save a checkpoint every N steps (-1: never)
    save_freq: int = -1
    logging_steps: int = Field(1, ge=1)
    #: every N steps, write a sample of the episodes (tokens, mask, reward, verdict) to ``<run dir>/episodes``
    #: for ``toolgym view`` (default: no dump)
    dump_every: int | None = Field(None, ge=1)
    #: episodes written per dumped step, per process
    dump_episodes: int = Field(8, ge=1)

    #: any other ``GRPOConfig`` field, as it is (they win over toolgym's)
    trl_args: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _consistent(self) -> TRLTrainConfig:
        if self.max_tokens_per_turn is not None and self.max_tokens_per_turn > self.max_response_length:
            raise ValueError(
                f"max_tokens_per_turn ({self.max_tokens_per_turn}) is larger than max_response_length "
                f"({self.max_response_length}), which bounds every turn: lower it or raise the other"
            )
        if self.mode == "async":
            self._check_async()
        else:
            stray = sorted({"max_staleness", "vllm_server_url"} & self.model_fields_set)
            if stray:
                raise ValueError(f"{', '.join(stray)}: only for mode: async (TRL's AsyncGRPOTrainer)")
        if self.use_vllm and self.device == "cpu":
            raise ValueError(
                "use_vllm needs a GPU (TRL's vLLM backend); set device: auto or cuda, or use_vllm: false"
            )
        return self

    def _check_async(self) -> None:
        """What ``mode: async`` does not take (TRL's AsyncGRPOTrainer has no reference model, always generates
        on the server; toolgym's async loop plays the envs' own episodes)."""
        unsupported = {
            "kl_coef": (self.kl_coef != 0.0, "AsyncGRPOTrainer has no KL penalty: set kl_coef: 0"),
            "use_vllm": (
                self.use_vllm,
                "async mode always generates on the vLLM server at vllm_server_url: drop use_vllm",
            ),
            "agent": (self.agent is not None, "agent programs train with mode: sync"),
        }
        for name, (bad, why) in unsupported.items():
            if bad:
                raise ValueError(f"{name}: not with mode: async; {why}")

    def env_kwargs(self, env: EnvSpec) -> dict[str, Any]:
        """The env's kwargs with the run-wide ``max_turns`` and ``judge`` filled in (an env's own setting
        wins; only an env that takes a ``judge`` kwarg gets the judge)."""
        return env_kwargs_with_turns(env, self.max_turns, self.judge)


def load_trl_config(path: str | Path) -> TRLTrainConfig:
    """Read and validate a ``toolgym train --trainer trl`` YAML (errors say what to fix)."""
    return load_train_config(path, TRLTrainConfig)


__all__ = ["TRLTrainConfig", "load_trl_config"]
