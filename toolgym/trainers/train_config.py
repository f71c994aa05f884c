"""What every ``toolgym train`` config shares, whichever trainer reads it: the envs of the mix (``EnvSpec``;
``AgentEnvSpec`` for a trainer whose envs may each name their agent program), the loggers, the judge
(``JudgeConfig``), the agent program (``AgentConfig``), and loading a YAML with errors that say what to fix.

Each trainer's own config (``verl_adapter/config.py``'s ``TrainConfig``, ``trl_adapter/config.py``'s
``TRLTrainConfig``) holds the choices particular to it; the YAML reading, the unknown-key hints and the
per-env kwargs rule are here once, so the two configs read the same way and neither adapter imports the
other.
"""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

Logger = Literal["console", "wandb", "tensorboard"]


class EnvSpec(BaseModel):
    """One env of the training mix: its id, ``gym.make`` kwargs and share of the rows (``weight``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kwargs: dict[str, Any] = Field(default_factory=dict)
    weight: float = Field(1.0, gt=0.0)


def checked_agent_spec(value: str | None, info: ValidationInfo) -> str | None:
    """An ``agent:`` value loaded and checked now (a typo fails before the trainer starts), a file's path
    made absolute (a relative one is read from the config file's folder)."""
    if value is None:
        return None
    from toolgym.trainers.agent_samples import agent_spec, load_agent_program

    spec = agent_spec(value, (info.context or {}).get("config_dir"))
    load_agent_program(spec)
    return spec


class AgentEnvSpec(EnvSpec):
    """An env of the mix that may name the agent program playing its rows (verl's config: a mix of envs
    played by toolgym's runner and envs played by agent programs trains in one run).

    ``agent``: as the config-level ``agent:`` key (``module:function`` or ``path/to/file.py:function``). Left
    out, the env's rows are played as the config says (its ``agent:``, else toolgym's runner); ``agent: null``
    is toolgym's runner even when the config names an agent (:meth:`agent_of`)."""

    agent: str | None = None

    @field_validator("agent")
    @classmethod
    def _loadable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return checked_agent_spec(value, info)

    def agent_of(self, default: str | None) -> str | None:
        """The agent program that plays this env's rows: its own ``agent`` when the entry sets the key (null:
        none, toolgym's runner), else ``default`` (the config's ``agent:``)."""
        return self.agent if "agent" in self.model_fields_set else default


class JudgeSpec(BaseModel):
    """The ``judge:`` key: the LLM judge endpoint of every env that takes a ``judge`` kwarg (an env's own
    ``judge`` kwarg wins). ``base_url`` is an OpenAI-compatible base URL (``http://HOST:PORT/v1``); any other
    key is a ``toolgym.rewards.judge.JudgeVerifier`` option (``timeout``, ``max_concurrency``,
    ``pass_threshold``, ...), plus ``group`` (judge a GRPO group's answers in one call) and ``api_key_env``
    (the environment variable holding the key: the kwargs travel in the training rows, a key written here
    does too)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    base_url: str
    model: str
    api_key: str | None = None
    api_key_env: str | None = None
    group: bool = False

    @model_validator(mode="after")
    def _known_options(self) -> JudgeSpec:
        options = judge_options()
        unknown = sorted(set(self.model_extra or {}) - options)
        if unknown:
            hint = difflib.get_close_matches(unknown[0], sorted(options), n=1)
            guess = f" (did you mean `{hint[0]}`?)" if hint else ""
            raise ValueError(
                f"unknown judge option {unknown[0]!r}{guess}; options: {', '.join(sorted(options))}, "
                "group, api_key_env"
            )
        return self

    def env_kwarg(self) -> dict[str, Any]:
        """The env's ``judge`` kwarg: JSON-serialisable, unset options left out (the env's defaults)."""
        return self.model_dump(exclude_none=True, exclude_defaults=False)


def judge_options() -> set[str]:
    """The keyword options ``JudgeVerifier`` takes (read from its signature, so the two never disagree)."""
    from toolgym.rewards.judge import JudgeVerifier

    params = inspect.signature(JudgeVerifier).parameters.values()
    return {p.name for p in params if p.kind is p.KEYWORD_ONLY or p.name in ("base_url", "model")}


def takes_judge(env_id: str) -> bool:
    """Whether the registered env's factory names a ``judge`` parameter (a ``**kwargs`` catch-all is not
    one: the Search env passes its extra kwargs to ``ToolEnv``, which would refuse it)."""
    import gymnasium as gym

    import toolgym  # noqa: F401 - registers the built-in envs and plugins

    try:
        entry = gym.spec(env_id).entry_point
    except gym.error.Error:
        return False
    factory = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    if factory is None:
        return False
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    judge = params.get("judge")
    return judge is not None and judge.kind in (judge.POSITIONAL_OR_KEYWORD, judge.KEYWORD_ONLY)


def env_kwargs_with_turns(
    env: EnvSpec, max_turns: int | None, judge: JudgeSpec | None = None
) -> dict[str, Any]:
    """The env's kwargs with the run-wide ``max_turns`` filled in, and the run-wide ``judge`` for an env
    that takes one (an env's own setting wins in both)."""
    kwargs = dict(env.kwargs)
    if max_turns is not None:
        kwargs.setdefault("max_turns", max_turns)
    if judge is not None and "judge" not in kwargs and takes_judge(env.id):
        kwargs["judge"] = judge.env_kwarg()
    return kwargs


class JudgeConfig(BaseModel):
    """What both trainers' configs take for judged envs: the ``judge:`` key (``JudgeSpec``)."""

    #: the LLM judge endpoint for every env that takes a ``judge`` kwarg (``docs/training.md``)
    judge: JudgeSpec | None = None


class AgentConfig(BaseModel):
    """What both trainers' configs take to train a user's agent program: the ``agent:`` key."""

    #: ``module:function`` or ``path/to/file.py:function`` (a relative path is read from the config file's
    #: folder): an ``async def agent(task, base_url, api_key)`` that plays every row against a gateway on the
    #: trainer's engine (``toolgym.gateway``), trained on the tokens it recorded; default: the env's own
    #: episode, played by toolgym's runner. Where env entries may name their own (``AgentEnvSpec``), this is
    #: the agent of the entries that do not
    agent: str | None = None

    @field_validator("agent")
    @classmethod
    def _loadable(cls, value: str | None, info: ValidationInfo) -> str | None:
        return checked_agent_spec(value, info)


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
        return config.model_validate(data, context={"config_dir": str(path.parent)})
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
    in_env = "envs" in loc[:-1]
    model = _env_model(config) if in_env else config
    known = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    guess = f"Did you mean `{close[0]}`? " if close else ""
    where = "an env entry" if in_env else "a train config"
    extra = "" if in_env else getattr(config, "unknown_key_hint", "")
    return f"{guess}Keys of {where}: {', '.join(known)}{extra}"


def _env_model(config: type[BaseModel]) -> type[BaseModel]:
    """The model of the config's env entries (``list[EnvSpec]``, or a trainer's own ``EnvSpec``)."""
    field = config.model_fields.get("envs")
    args = get_args(field.annotation) if field is not None else ()
    model = args[0] if args else EnvSpec
    return model if isinstance(model, type) and issubclass(model, BaseModel) else EnvSpec


__all__ = [
    "AgentConfig",
    "AgentEnvSpec",
    "EnvSpec",
    "JudgeConfig",
    "JudgeSpec",
    "Logger",
    "checked_agent_spec",
    "env_kwargs_with_turns",
    "explain",
    "judge_options",
    "load_train_config",
    "takes_judge",
]
