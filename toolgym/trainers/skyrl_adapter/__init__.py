"""Train any toolgym env with SkyRL: every toolgym env as a SkyRL-Gym text env under its own id.

- ``register_all()`` (``env.py``, imports ``skyrl_gym``): registers every toolgym env (built-in and from
  plugins) with ``skyrl_gym.register(id, entry_point=...)``, so ``skyrl_gym.make("toolgym/Calculator-v0",
  env_config=..., extras=...)`` works and a SkyRL dataset row with ``env_class: toolgym/Calculator-v0``
  plays that env. Call it in your SkyRL entrypoint, in the process that builds the generator.
- ``ToolgymTextEnv`` (``env.py``): SkyRL's ``BaseTextEnv`` over a toolgym env. ``init(prompt)`` resets it on
  the task the row pins (its ``toolgym`` column, an episode key) and returns the env's first chat messages;
  ``step(action)`` steps it with the model's text and returns the observation as chat messages, the
  verifier's reward and ``done``.
- ``skyrl_rows(env, n)`` / ``export_skyrl(env, n, out)`` (``data.py``): the dataset, one row per episode
  (``prompt``, ``env_class``, ``data_source``, ``toolgym``), the same episodes the verl/TRL exports pin.

Importing this package imports neither ``skyrl_gym`` nor SkyRL.
"""

from __future__ import annotations

from typing import Any

from toolgym.trainers.skyrl_adapter.data import KEY_COLUMN, export_skyrl, skyrl_rows

_LAZY = {"ToolgymTextEnv", "register_all", "ENTRY_POINT"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # imports skyrl_gym: only when asked for
        from toolgym.trainers.skyrl_adapter import env

        return getattr(env, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ENTRY_POINT", "KEY_COLUMN", "ToolgymTextEnv", "export_skyrl", "register_all", "skyrl_rows"]
