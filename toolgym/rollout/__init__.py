"""Rollouts: LLM clients, the episode runner, the episode host every trainer adapter and server runs on,
episode keys and the collector (docs/architecture.md, "Rollout")."""

from toolgym.rollout.chat import ChatRenderer, TemplateError, check_prefix_property
from toolgym.rollout.clients.base import Generation, LLMClient, Sampling
from toolgym.rollout.collect import Summary, collect, load_trajectories, summarize
from toolgym.rollout.episode import PromptTooLong, RolloutConfig, run_episode
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EnvRequest, EpisodeKey, EpisodeRow, draw_task, episode_rows
from toolgym.rollout.models import load_tokenizer, make_client, resolve_model
from toolgym.rollout.pool import EnvPool
from toolgym.rollout.samples import TrainerSample, trainer_sample
from toolgym.rollout.session import EnvSession

__all__ = [
    "ChatRenderer",
    "EnvPool",
    "EnvRequest",
    "EnvSession",
    "EpisodeHost",
    "EpisodeKey",
    "EpisodeRow",
    "Generation",
    "LLMClient",
    "PromptTooLong",
    "RolloutConfig",
    "Sampling",
    "Summary",
    "TemplateError",
    "TrainerSample",
    "check_prefix_property",
    "collect",
    "draw_task",
    "episode_rows",
    "load_tokenizer",
    "load_trajectories",
    "make_client",
    "resolve_model",
    "run_episode",
    "summarize",
    "trainer_sample",
]
