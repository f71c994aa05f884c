"""``ToolgymTextEnv``: SkyRL-Gym's ``BaseTextEnv`` over a toolgym env, and ``register_all``.

SkyRL's generator builds one env per trajectory, ``skyrl_gym.make(env_class, env_config=..., extras=...)``
(``env_config``: the ``environment.skyrl_gym.<env_class>`` config; ``extras``: the dataset row's columns
other than ``prompt`` and ``env_class``), then calls ``init(prompt)`` once and ``step(text)`` until ``done``,
then ``get_metrics()`` and ``close()``. Here:

- the row's ``toolgym`` column (``export_skyrl`` writes it) is the episode key: the env is
  ``gym.make(key.env_id, **env_config, **key.env_kwargs)`` (the row's kwargs win), a session of the
  process's episode host (``toolgym.rollout.host``): its envs are reused because building one can be costly
  (a search index) and SkyRL builds an env per sample; it is reset with the key's seed on the key's task,
  so every sample of a prompt plays one task;
- ``init`` returns the env's own first messages (what the row's ``prompt`` holds when the row was exported);
- ``step`` returns ``observations``: the chat messages the env appended after the model's turn (the tool's
  output, in the role the action format uses: ``user``, or ``tool`` for hermes), none once ``done``;
  ``reward``: the env's reward (the verifier's on the last step, else 0); ``done``: terminated or
  truncated (the env's own ``max_turns``; SkyRL's ``generator.max_turns``, which it also puts in
  ``extras``, is not used: the env's budget is part of the episode key); ``metadata``: the turn, what
  the parser understood, the tool results and the verdict, as JSON-ready dicts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EpisodeKey
from toolgym.rollout.session import EnvSession
from toolgym.trainers.skyrl_adapter.data import KEY_COLUMN

#: the entry point every toolgym id is registered with (a string, so SkyRL's ``EnvSpec.to_json`` works)
ENTRY_POINT = "toolgym.trainers.skyrl_adapter.env:ToolgymTextEnv"
#: how to write rows the env can play (said by the error a row without an episode key gets)
ROWS_HINT = "write the data with toolgym.trainers.skyrl_adapter.export_skyrl (or skyrl_rows)"


class ToolgymTextEnv(BaseTextEnv):
    """One episode of a toolgym env for SkyRL (see the module docstring).

    Args:
        env_config: SkyRL's per-env-class config (a mapping or an OmegaConf ``DictConfig``): extra
            ``gym.make`` kwargs for every episode, e.g. a retriever URL.
        extras: the dataset row's other columns; ``extras["toolgym"]`` is the episode key.
        env_id: the SkyRL id this class was registered under (``register_all`` sets it); the key's env
            must be that env.
    """

    def __init__(
        self, env_config: Any = None, extras: Mapping[str, Any] | None = None, env_id: str | None = None
    ):
        super().__init__()
        self.key = _episode_key(extras or {})
        if env_id is not None and env_id != self.key.env_id:
            raise ValueError(
                f"the row's episode key is for {self.key.env_id!r}, but its env_class is {env_id!r}: "
                "write the data with toolgym.trainers.skyrl_adapter.export_skyrl (env_class = the key's env)"
            )
        kwargs = {**_plain(env_config), **self.key.env_kwargs}
        self.session: EnvSession | None = EpisodeHost.shared("skyrl").session(self.key.env_id, kwargs)
        self.inner = self.session.inner
        self.max_turns = self.inner.max_turns
        self.done = False

    def init(self, prompt: Any = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Reset on the row's task; return the env's first messages (system and user) and the task id."""
        _, info = self._live().start(self.key)
        self.turns, self.done = 0, False
        return _messages(info["messages"]), {"task_id": info["task_id"], "env_id": self.key.env_id}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        step = self._live().step(action)
        self.turns += 1
        self.done = step.done
        return BaseTextEnvStepOutput(
            observations=_messages(step.observations),
            reward=step.reward,
            done=self.done,
            metadata=_metadata(step.info),
        )

    def get_metrics(self) -> dict[str, Any]:
        """The episode's numbers (passed, turns, tool calls and errors), the same keys every episode."""
        traj = self.inner.trajectory
        return traj.stats() if traj is not None else {}

    def close(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()

    def _live(self) -> EnvSession:
        if self.session is None:
            raise RuntimeError("this SkyRL env is closed; skyrl_gym.make a new one")
        return self.session


def register_all() -> list[str]:
    """Register every toolgym env (built-in and plugin) with SkyRL-Gym under its own id; return the ids.
    Ids SkyRL-Gym already has (a second call, or an env of SkyRL's own) are left as they are."""
    import toolgym  # registers the built-in envs and loads plugins

    ids = []
    for env_id in sorted(toolgym.ENVS):
        if env_id not in skyrl_gym.registry:
            skyrl_gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"env_id": env_id})
        ids.append(env_id)
    return ids


def _episode_key(extras: Mapping[str, Any]) -> EpisodeKey:
    value = extras.get(KEY_COLUMN)
    if not value:
        raise ValueError(f"the dataset row has no {KEY_COLUMN!r} column (the episode key): {ROWS_HINT}")
    return EpisodeKey.parse(value if isinstance(value, str) else _plain(value), how=ROWS_HINT)


def _plain(config: Any) -> dict[str, Any]:
    """A plain dict from SkyRL's config (OmegaConf ``DictConfig``) or any mapping."""
    if config is None:
        return {}
    try:
        from omegaconf import OmegaConf

        if OmegaConf.is_config(config):
            return dict(OmegaConf.to_container(config, resolve=True))
    except ImportError:
        pass
    return dict(config)


def _messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(m) for m in messages]


def _metadata(info: dict[str, Any]) -> dict[str, Any]:
    action, verdict = info.get("action"), info.get("verdict")
    return {
        "task_id": info["task_id"],
        "turn": info["turn"],
        "action": action.model_dump(mode="json") if action is not None else None,
        "tool_results": [r.model_dump(mode="json") for r in info.get("tool_results", [])],
        "verdict": json.loads(verdict.model_dump_json()) if verdict is not None else None,
    }


__all__ = ["ENTRY_POINT", "ToolgymTextEnv", "register_all"]
