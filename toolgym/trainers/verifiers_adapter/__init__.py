"""Any toolgym env as a verifiers (>= 0.4) environment, for ``vf-eval`` and prime-rl.

- ``load_environment(env_id, n=32, split="train", seed=0, **env_kwargs)``: the ``verifiers.v1.Env`` for a
  toolgym env: its tasks, its tools and parser (the env is stepped with the model's replies) and its
  verifier (the rubric's reward). Run it as any verifiers env: ``async with env.serving():
  await env.run_episode(task, vf.ModelContext(model=..., client=vf.EvalClientConfig(base_url=...)))``.
- ``environment.py`` (imports verifiers): the taskset, task (rubric), harness and env classes.
- verifiers resolves environments by taskset id, importing a top-level module: ``toolgym-verifiers``
  imports ``toolgym_verifiers`` (shipped with toolgym), so ``vf-eval toolgym-verifiers --env.taskset.env
  toolgym/Calculator-v0 ...`` works too.

Importing this package imports no verifiers.
"""

from __future__ import annotations

from typing import Any, Literal

#: the verifiers taskset id; verifiers imports ``toolgym_verifiers`` for it
TASKSET_ID = "toolgym-verifiers"

_LAZY = {
    "ToolgymData",
    "ToolgymEnv",
    "ToolgymEnvConfig",
    "ToolgymHarness",
    "ToolgymHarnessConfig",
    "ToolgymTask",
    "ToolgymTaskset",
    "ToolgymTasksetConfig",
}


def load_environment(
    env_id: str,
    *,
    n: int = 32,
    split: Literal["train", "val"] = "train",
    seed: int = 0,
    vllm_stops: bool = False,
    **env_kwargs: Any,
) -> Any:
    """The verifiers environment (a ``verifiers.v1.Env``) for ``env_id``: ``n`` episodes of ``split``
    (``val``: the env's evaluation split), ``env_kwargs`` for ``gym.make``. ``vllm_stops``: the harness
    sends the env's stop strings with vLLM's ``include_stop_str_in_output`` (for a vLLM server)."""
    import verifiers.v1 as vf

    config: dict[str, Any] = {
        "taskset": {
            "id": TASKSET_ID,
            "env": env_id,
            "env_kwargs": env_kwargs,
            "n": n,
            "split": split,
            "seed": seed,
        }
    }
    if vllm_stops:
        config["agent"] = {"harness": {"id": TASKSET_ID, "vllm_stops": True}}
    return vf.load_environment(vf.resolve_env_config(config))


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # imports verifiers: only when asked for
        from toolgym.trainers.verifiers_adapter import environment

        return getattr(environment, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["TASKSET_ID", *sorted(_LAZY), "load_environment"]
