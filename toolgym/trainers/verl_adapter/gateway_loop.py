"""``ToolgymGatewayAgentLoop``: verl's agent loop for a user's agent program, ``async def agent(task,
base_url, api_key) -> answer`` (``toolgym.gateway``), registered as ``toolgym_agent`` in the shipped
agent-loop YAML.

An agent written against the OpenAI API (the ``openai`` SDK, an agent framework) cannot run as an
``env.step`` loop, and re-tokenizing its messages would train on tokens the model never sampled. This loop
runs it as it is: per row (an exported toolgym row, as ``ToolgymAgentLoop`` plays), it opens a session on the
row's task on the worker's gateway, runs the agent against the session's OpenAI URL, judges its answer with
the env's verifier, and hands verl the tokens the gateway recorded: the ids verl's own vLLM servers sampled,
with their logprobs and mask 1, everything else mask 0.

- One gateway per verl worker's event loop (``toolgym.gateway.gateway_for_loop``: uvicorn on a free local
  port on that loop), in front of verl's server manager; the agent's HTTP calls land on the loop that owns
  verl's server handle. Each sample's calls go through its own ``VerlServerClient`` (sticky per session, the
  sample's priority and weight steps) under verl's sampling settings and budgets
  (``toolgym.trainers.agent_samples``: an agent that would run past ``response_length`` has its call
  refused, and its sample fails and is not trained on).
- The request's ``tools`` are rendered by the model's chat template (``template_tools`` is always on), as
  vLLM's OpenAI server renders them, and tool calls are read from the reply in the ``hermes`` format.
- verl trains on one sequence per sample: the session's **last segment** (it holds the final answer and the
  verdict). An agent that rewrote its history has earlier segments; they are dropped, and counted
  (``reward_extra_info.segments``/``dropped_segments``, logged as ``toolgym/segments/mean`` and
  ``toolgym/dropped_segments/total``).
- The output follows every toolgym loop's rules (``loop_base.py``). Envs whose verifier judges groups are
  judged per sample here.

Settings (the agent-loop YAML entry): ``agent`` (required: ``module:function``, or
``/path/to/file.py:function``), and ``ToolgymLoopBase``'s. ``toolgym train`` writes them from a config's
``agent:`` key.
"""

from __future__ import annotations

from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from toolgym.gateway import GatewayConfig
from toolgym.trainers.agent_samples import load_agent_program, play_sample, trainer_gateway
from toolgym.trainers.verl_adapter.loop_base import ToolgymLoopBase
from toolgym.trainers.verl_adapter.names import GATEWAY_AGENT_NAME


class ToolgymGatewayAgentLoop(ToolgymLoopBase):
    """Play one exported row with a user's agent program against a gateway (see the module docstring).

    Args (beyond ``ToolgymLoopBase``'s, set in the agent-loop YAML):
        agent: the agent function, ``module:function`` or ``/path/to/file.py:function``.
    """

    def __init__(self, *args: Any, agent: str | None = None, **kwargs: Any):
        if kwargs.get("template_tools") is False:
            raise ValueError(
                "the gateway agent loop renders the request's tools through the chat template: "
                "template_tools cannot be false here"
            )
        super().__init__(*args, **{**kwargs, "template_tools": True})
        if not agent:
            raise ValueError(
                f"the {GATEWAY_AGENT_NAME!r} agent loop needs `agent: module:function` in its agent-loop "
                "YAML entry (toolgym train: the config's `agent:` key)"
            )
        self.agent = load_agent_program(agent)
        self.gateway_config = GatewayConfig(
            model=str(self.config.actor_rollout_ref.model.path),
            max_model_len=self.prompt_length + self.response_length,
            max_sessions=self.host.max_concurrent_episodes,
        )

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        key = self._episode_key(kwargs)
        client = self._server_client(sampling_params, kwargs)
        gateway = await trainer_gateway(
            GATEWAY_AGENT_NAME, self.gateway_config, renderer=self.renderer, host=self.host
        )
        config = self._rollout_config(sampling_params)
        async with self.host.slots():
            episode = await play_sample(gateway, self.agent, key, client, config)
        self.segments = episode.segments
        self._offer_dump(episode.trajectory, client)
        return self._output(episode.trajectory, client)


__all__ = ["ToolgymGatewayAgentLoop"]
