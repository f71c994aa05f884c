"""What every ``toolgym train`` config shares, whichever trainer reads it: the envs of the mix (``EnvSpec``),
the loggers, and loading a YAML with errors that say what to fix.

Each trainer's own config (``verl_adapter/config.py``'s ``TrainConfig``, ``trl_adapter/config.py``'s
``TRLTrainConfig``) holds the choices particular to it; the YAML reading, the unknown-key hints and the
per-env kwargs rule are here once, so the two configs read the same way and neither adapter imports the
other.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

Logger = Literal["console", "wandb", "tensorboard"]


class EnvSpec(BaseModel):
    """One env of the training mix: its id, ``gym.make`` kwargs and share of the rows (``weight``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    weight: float = Field(1.0, gt=0.0)


def env_kwargs_with_turns(env: EnvSpec, max_turns: int | None) -> dict[str, Any]:
    """The env's kwargs with the run-wide ``max_turns`` filled in (an env's own setting wins)."""
    kwargs = dict(env.kwargs)
    if max_turns is not None:
        kwargs.setdefault("max_turns", max_turns)
    return kwargs


Config = TypeVar("Config", bound=BaseModel)


def load_train_config(path: str | Path, config: type[Config]) -> Config:
    """Read and validate a ``toolgym train`` YAML as the trainer's ``config`` model; every problem is a
    ``ValueError`` that says what to fix."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no config file at {path}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} must be a YAML mapping of settings (model: ..., envs: [...], ...)")
    data.setdefault("experiment", path.stem)
    try:
        return config.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"{path} is not a valid toolgym train config:\n{explain(exc, config)}") from None


def explain(exc: ValidationError, config: type[BaseModel]) -> str:
    """One line per problem, naming the key; an unknown key gets the closest known one and the full list."""
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        if err["type"] == "extra_forbidden":
            lines.append(f"  - {loc}: unknown key. {_unknown_key_hint(err['loc'], config)}")
        elif err["type"] == "missing":
            lines.append(f"  - {loc}: required, but missing")
        else:
            message = err["msg"].removeprefix("Value error, ")
            lines.append(f"  - {loc}: {message} (got {err.get('input')!r})")
    return "\n".join(lines)


def _unknown_key_hint(loc: tuple[Any, ...], config: type[BaseModel]) -> str:
    model = EnvSpec if "envs" in loc[:-1] else config
    known = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    guess = f"Did you mean `{close[0]}`? " if close else ""
    where = "an env entry" if model is EnvSpec else "a train config"
    extra = "" if model is EnvSpec else getattr(config, "unknown_key_hint", "")
    return f"{guess}Keys of {where}: {', '.join(known)}{extra}"


__all__ = ["EnvSpec", "Logger", "env_kwargs_with_turns", "explain", "load_train_config"]
