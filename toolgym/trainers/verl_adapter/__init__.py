"""Train any toolgym env with verl's PPO/GRPO (verl >= 0.9).

- ``ToolgymAgentLoop`` (``agent_loop.py``, imports verl): verl's agent loop for rows exported by toolgym; it
  plays each row's env with the shared episode runner through verl's own vLLM servers.
- ``ToolgymGatewayAgentLoop`` (``gateway_loop.py``, imports verl): the same rows played by a user's agent
  program (``async def agent(task, base_url, api_key)``) against a gateway on verl's servers, trained on the
  tokens the gateway recorded (``toolgym train``: the config's ``agent:`` key, or an env entry's, which
  mixes rows of both loops in one run).
- ``export_verl`` (``export.py``): Parquet that verl's ``RLHFDataset`` loads as is (``toolgym export verl``).
- ``agent_loop_config_path()``: the agent-loop YAML to give verl
  (``actor_rollout_ref.rollout.agent.agent_loop_config_path``).
- ``toolgym train`` (``launch.py``): one YAML in, ``python -m verl.trainer.main_ppo`` with the right
  overrides out.

Importing this package does not import verl.
"""

from __future__ import annotations

import os
from importlib import resources

from toolgym.trainers.verl_adapter.names import AGENT_NAME, GATEWAY_AGENT_NAME, ROWS_HINT

#: imported by verl in every process of a toolgym run (``VERL_USE_EXTERNAL_MODULES``): fixes verl 0.9.1
#: needs next to toolgym's dependencies (``compat.py``)
COMPAT_MODULE = "toolgym.trainers.verl_adapter.compat"
#: imported the same way: toolgym's episode stats (tool errors, infra errors, pass rate per env, ...) in
#: verl's step metrics, for every logger (``metrics.py``)
METRICS_MODULE = "toolgym.trainers.verl_adapter.metrics"


def verl_modules_env(*modules: str) -> dict[str, str]:
    """``VERL_USE_EXTERNAL_MODULES`` for a verl process: what the environment already names, toolgym's
    compat and metrics modules and ``modules``, each once."""
    names = [m.strip() for m in os.environ.get("VERL_USE_EXTERNAL_MODULES", "").split(",") if m.strip()]
    for module in (COMPAT_MODULE, METRICS_MODULE, *modules):
        if module not in names:
            names.append(module)
    return {"VERL_USE_EXTERNAL_MODULES": ",".join(names)}


def agent_loop_config_path() -> str:
    """The path of the agent-loop YAML shipped with toolgym (it registers ``ToolgymAgentLoop`` as
    ``toolgym`` and ``ToolgymGatewayAgentLoop`` as ``toolgym_agent``)."""
    return str(resources.files(__name__).joinpath("agent_loops.yaml"))


def __getattr__(name: str):
    if name == "ToolgymAgentLoop":  # imports verl: only when asked for
        from toolgym.trainers.verl_adapter.agent_loop import ToolgymAgentLoop

        return ToolgymAgentLoop
    if name == "ToolgymGatewayAgentLoop":
        from toolgym.trainers.verl_adapter.gateway_loop import ToolgymGatewayAgentLoop

        return ToolgymGatewayAgentLoop
    if name == "export_verl":
        from toolgym.trainers.verl_adapter.export import export_verl

        return export_verl
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AGENT_NAME",
    "COMPAT_MODULE",
    "GATEWAY_AGENT_NAME",
    "METRICS_MODULE",
    "ROWS_HINT",
    "ToolgymAgentLoop",
    "ToolgymGatewayAgentLoop",
    "agent_loop_config_path",
    "export_verl",
    "verl_modules_env",
]
