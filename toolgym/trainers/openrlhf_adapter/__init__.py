"""Train any toolgym env with OpenRLHF (>= 0.11) through its agent interface, on the shared episode runner.

- ``agent_func_path()``: the file to pass as ``--train.agent_func_path``; it defines ``AgentExecutor``, a
  ``ToolgymAgentExecutor`` (``executor.py``, imports OpenRLHF): OpenRLHF's ``AgentExecutorBase`` that plays
  each prompt's episode through OpenRLHF's own vLLM engine (``llm_engine``) and returns the runner's tokens,
  with the generated spans as ``action_ranges`` and the verifier's reward.
- ``export_openrlhf(envs, n, out)`` (``export.py``): the prompt data, JSONL with ``prompt`` (the env's first
  messages, for ``--data.input_key prompt --data.apply_chat_template``) and ``label`` (the episode key the
  executor replays: env, kwargs, task, seed, so all ``n_samples_per_prompt`` samples play one task).

Importing this package imports neither OpenRLHF nor vLLM.
"""

from __future__ import annotations

from importlib import resources
from typing import Any


def agent_func_path() -> str:
    """The path of the agent file shipped with toolgym (``--train.agent_func_path``)."""
    return str(resources.files(__name__).joinpath("agent_func.py"))


def __getattr__(name: str) -> Any:
    if name == "ToolgymAgentExecutor":  # imports OpenRLHF: only when asked for
        from toolgym.trainers.openrlhf_adapter.executor import ToolgymAgentExecutor

        return ToolgymAgentExecutor
    if name == "export_openrlhf":
        from toolgym.trainers.openrlhf_adapter.export import export_openrlhf

        return export_openrlhf
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ToolgymAgentExecutor", "agent_func_path", "export_openrlhf"]
