"""Rollouts: LLM clients, the episode runner and the collector (see DESIGN.md, "Episode runner")."""

from toolgym.rollout.chat import ChatRenderer, TemplateError, check_prefix_property
from toolgym.rollout.clients.base import Generation, LLMClient, Sampling
from toolgym.rollout.collect import Summary, collect, load_trajectories, summarize
from toolgym.rollout.episode import PromptTooLong, RolloutConfig, run_episode
from toolgym.rollout.models import load_tokenizer, make_client, resolve_model
from toolgym.rollout.pool import EnvPool, EnvRequest, draw_task

__all__ = [
    "ChatRenderer",
    "EnvPool",
    "EnvRequest",
    "Generation",
    "LLMClient",
    "PromptTooLong",
    "RolloutConfig",
    "Sampling",
    "Summary",
    "TemplateError",
    "check_prefix_property",
    "collect",
    "draw_task",
    "load_tokenizer",
    "load_trajectories",
    "make_client",
    "resolve_model",
    "run_episode",
    "summarize",
]
