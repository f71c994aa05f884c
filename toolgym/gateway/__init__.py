"""The gateway: an OpenAI-compatible endpoint in front of toolgym's engines that records every token the model
sampled, per session, so that any agent program (the ``openai`` SDK, an agent framework, mini-swe-agent)
becomes a source of exact training data. ``toolgym serve gateway`` serves it; :class:`Gateway` runs it in
process; :func:`play_agent` plays a user's agent on one toolgym task for a trainer. See ``docs/gateway.md``.
"""

from toolgym.gateway.agents import API_KEY, AgentEpisode, AgentTask, load_agent, play_agent
from toolgym.gateway.core import GatewayConfig, GatewayCore, GatewayError
from toolgym.gateway.inprocess import Gateway, gateway_for_loop

__all__ = [
    "API_KEY",
    "AgentEpisode",
    "AgentTask",
    "Gateway",
    "GatewayConfig",
    "GatewayCore",
    "GatewayError",
    "gateway_for_loop",
    "load_agent",
    "play_agent",
]
