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

Which agent plays a row: the row's own (``extra_info.agent``, written by ``toolgym train`` for the envs
that name one, so one batch can mix envs played by toolgym's runner and by several agent programs), else
the loop's ``agent`` setting. Each agent is loaded once per process (``agent_samples.agent_program``).

Settings (the agent-loop YAML entry): ``agent`` (``module:function``, or ``/path/to/file.py:function``:
the agent of rows that name none; loaded when the loop is built), and ``ToolgymLoopBase``'s. ``toolgym
train`` writes them from a config's ``agent:`` key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput

from toolgym.gateway import GatewayConfig
from toolgym.gateway.agents import AgentFn
from toolgym.trainers.agent_samples import agent_program, play_sample, trainer_gateway
from toolgym.trainers.verl_adapter.loop_base import ToolgymLoopBase
from toolgym.trainers.verl_adapter.names import AGENT_FIELD, GATEWAY_AGENT_NAME


class ToolgymGatewayAgentLoop(ToolgymLoopBase):
    """Play one exported row with a user's agent program against a gateway (see the module docstring).

    Args (beyond ``ToolgymLoopBase``'s, set in the agent-loop YAML):
        agent: the agent function of the rows that name none (``extra_info.agent``), ``module:function`` or
            ``/path/to/file.py:function``.
    """

    #: a sample of this loop is an agent program's (``reward_extra_info.agent_program``)
    plays_agent_program = True

    def __init__(self, *args: Any, agent: str | None = None, **kwargs: Any):
        if kwargs.get("template_tools") is False:
            raise ValueError(
                "the gateway agent loop renders the request's tools through the chat template: "
                "template_tools cannot be false here"
            )
        super().__init__(*args, **{**kwargs, "template_tools": True})
        #: the agent of rows that name none, checked now (a typo fails the first sample, not a later one)
        self.agent = agent_program(agent) if agent else None
        self.gateway_config = GatewayConfig(
            model=str(self.config.actor_rollout_ref.model.path),
            max_model_len=self.prompt_length + self.response_length,
            max_sessions=self.host.max_concurrent_episodes,
        )

    def _agent(self, kwargs: dict[str, Any]) -> AgentFn:
        """The row's agent (``extra_info.agent``), else the loop's."""
        extra = kwargs.get("extra_info")
        spec = extra.get(AGENT_FIELD) if isinstance(extra, Mapping) else None
        if spec:
            return agent_program(str(spec))
        if self.agent is None:
            raise ValueError(
                f"data_source {kwargs.get('data_source')!r}: the row names no agent program (extra_info."
                f"{AGENT_FIELD}) and the {GATEWAY_AGENT_NAME!r} agent loop has none: set `agent: "
                "module:function` in its agent-loop YAML entry (toolgym train: the config's or the env "
                "entry's `agent:` key)"
            )
        return self.agent

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        agent = self._agent(kwargs)
        key = self._episode_key(kwargs)
        client = self._server_client(sampling_params, kwargs)
        gateway = await trainer_gateway(
            GATEWAY_AGENT_NAME, self.gateway_config, renderer=self.renderer, host=self.host
        )
        config = self._rollout_config(sampling_params)
        async with self.host.slots():
            episode = await play_sample(gateway, agent, key, client, config)
        self.segments = episode.segments
        self._offer_dump(episode.trajectory, client)
        return self._output(episode.trajectory, client)


__all__ = ["ToolgymGatewayAgentLoop"]
