"""Rollouts: LLM clients, the episode runner and the collector (see DESIGN.md, "Episode runner")."""

from toolgym.rollout.chat import ChatRenderer, TemplateError, check_prefix_property
from toolgym.rollout.clients.base import Generation, LLMClient, Sampling
from toolgym.rollout.collect import EnvRequest, Summary, collect, load_trajectories, summarize
from toolgym.rollout.episode import RolloutConfig, run_episode
from toolgym.rollout.models import load_tokenizer, make_client, resolve_model

__all__ = [
    "ChatRenderer",
    "EnvRequest",
    "Generation",
    "LLMClient",
    "RolloutConfig",
    "Sampling",
    "Summary",
    "TemplateError",
    "check_prefix_property",
    "collect",
    "load_tokenizer",
    "load_trajectories",
    "make_client",
    "resolve_model",
    "run_episode",
    "summarize",
]
