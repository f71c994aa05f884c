"""Train any toolgym env with TRL's ``GRPOTrainer`` (trl >= 1.16), on toolgym's shared episode runner.

- ``make_rollout_func(env, ...)`` (``rollout.py``, imports TRL only when called): the ``rollout_func`` that
  plays each prompt's episode with the trainer's own policy (its model, or TRL's vLLM backend) and returns
  the runner's tokens, the observation mask (``env_mask``) and the verifier's reward (``env_reward``). With
  ``agent=``, a user's agent program plays each prompt against a gateway on the same engine instead.
- ``env_reward``: the reward function to pass as ``reward_funcs``.
- ``prompt_dataset(env, n)`` (``data.py``): the train dataset, one row per episode, each pinning its env,
  task and seed (so a GRPO group plays one task).
- ``environment_factory(env)`` (``environment.py``): TRL's recommended path instead, a class whose methods
  are the env's tools, which TRL's own tool-call loop drives; ``environment_reward`` (the env's verifier on
  the final answer) and ``environment_dataset(env, n)`` (rows pinning the tasks) go with it.
- ``ToolgymAsyncGRPOTrainer`` (``async_grpo.py``, ``async_rollout.py``): TRL's asynchronous GRPO
  (``trl.experimental.async_grpo``) on toolgym envs, with ``env=`` (toolgym's episode runner) or
  ``environment_factory=`` (TRL's tool-call loop), the verifiers' rewards and the staleness logged; on a CPU
  too (the weights reach the vLLM server as a file, ``FileWeightTransfer``).
- ``toolgym train --trainer trl --config FILE.yaml`` (``launch.py``, ``config.py``): one YAML in, a GRPO run
  (``mode: async``: the asynchronous trainer).
- ``toolgym-debug/Probe-v0`` (``toolgym.testing.probe``), an env a model with random weights learns in
  seconds, checks this adapter's wiring (and verl's) by learning.

Importing this package imports neither TRL nor torch.
"""

from __future__ import annotations

from typing import Any

from toolgym.rollout.keys import EpisodeKey
from toolgym.trainers.trl_adapter.data import prompt_dataset

_LAZY = {
    "make_rollout_func": "toolgym.trainers.trl_adapter.rollout",
    "env_reward": "toolgym.trainers.trl_adapter.rollout",
    "ToolgymRolloutFunc": "toolgym.trainers.trl_adapter.rollout",
    "environment_factory": "toolgym.trainers.trl_adapter.environment",
    "environment_reward": "toolgym.trainers.trl_adapter.environment",
    "environment_dataset": "toolgym.trainers.trl_adapter.environment",
    "ToolgymAsyncGRPOTrainer": "toolgym.trainers.trl_adapter.async_grpo",
    "FileWeightTransfer": "toolgym.trainers.trl_adapter.async_grpo",
    "ToolgymRolloutLoop": "toolgym.trainers.trl_adapter.async_rollout",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "EpisodeKey",
    "FileWeightTransfer",
    "ToolgymAsyncGRPOTrainer",
    "ToolgymRolloutFunc",
    "ToolgymRolloutLoop",
    "env_reward",
    "environment_dataset",
    "environment_factory",
    "environment_reward",
    "make_rollout_func",
    "prompt_dataset",
]
