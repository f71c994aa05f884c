"""TRL's ``environment_factory``: a toolgym env as the environment class ``GRPOTrainer`` drives with its own
tool-call loop.

TRL 1.16 recommends ``GRPOTrainer(environment_factory=...)``: a class whose public methods are tools
(TRL reads their signatures and docstrings with transformers' ``get_json_schema`` and renders them with the
chat template), a ``reset(**row)`` whose text is appended to the row's last user message, and reward
functions that receive ``environments=``. TRL then generates, parses tool calls with the tokenizer's
response template, calls the methods and feeds their results back as ``tool`` messages.

``environment_factory(ENV_ID, **kwargs)`` returns such a class for any toolgym env (a dict of them for
several envs; each row then names its own in an ``environment`` column):

- each instance plays one env made with ``gym.make(ENV_ID, **kwargs)``;
- its tool methods are the env's tools: typed signatures and docstrings built from the tools' JSON schemas,
  so TRL renders exactly the schema toolgym's own formats show; a call runs the env's real tool (its
  validation, its sandbox, the error marker written once, the observation cap ``max_observation_chars``)
  and is recorded in the env's trajectory; after ``max_turns - 1`` calls every further call is an error
  telling the model to answer (TRL's ``max_tool_calling_iterations`` bounds rounds, not calls);
- ``reset(**row)`` pins the task the row names (the ``toolgym_episode`` column of
  :func:`environment_dataset`, or ``task_id``/``seed`` columns) and returns the task's prompt;
- :func:`environment_reward`, the reward function to pass, runs the env's verifier on each completion's
  final answer (the last assistant message: the inside of ``<answer>…</answer>`` when it has one, else its
  text without reasoning). A verifier that fails gives ``None`` (TRL ignores the sample), never 0.

Which TRL path to pick (docs/training.md has the table): ``rollout_func`` (``make_rollout_func``) plays the
env's own episode (its action format, invalid-action feedback, turn budget) with token-exact masks;
``environment_factory`` lets TRL drive the turns in the chat template's tool-call format, which is what a
TRL user reaches for first and what a model trained on its native tool calls expects.

Importing this module imports neither TRL nor torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, cast

import gymnasium as gym

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.keys import EnvRequest, EnvSource, EpisodeKey, Split, episode_rows
from toolgym.rollout.session import EnvSession
from toolgym.tools.signature import tool_function

#: the dataset column carrying a row's episode key (env, kwargs, task, seed) as JSON
EPISODE_FIELD = "toolgym_episode"
#: appended to the env's own system prompt: TRL renders the tools itself, the answer is the last message
ANSWER_INSTRUCTION = (
    "Call the tools when they help. When you are done, reply with the final answer alone, or inside "
    "<answer></answer>."
)
_RESERVED = frozenset({"reset", "get_reward"})
EnvSpec = str | Callable[[], gym.Env]


class ToolgymEnvironment:
    """One toolgym env as a TRL environment. Subclasses made by :func:`environment_factory` add one method
    per tool; nothing else here is public apart from ``reset`` (TRL takes every public method for a tool).

    Attributes a reward function or a test may read: ``env`` (the gymnasium env), ``task`` (the pinned
    task), ``trajectory`` (the episode so far) and ``verdict`` (set by :func:`environment_reward`).
    """

    env_id: ClassVar[str]
    env_kwargs: ClassVar[dict[str, Any]]
    #: made by ``gym.make(env_id, **env_kwargs)`` (False: by a function, ``env_id`` names the env only)
    registered: ClassVar[bool]
    _make: ClassVar[Callable[[], gym.Env]]
    #: where instances lease their envs (TRL makes one instance per generation slot, again each run)
    _host: ClassVar[EpisodeHost]

    def __init__(self) -> None:
        self._session: EnvSession | None = type(self)._host.session(self.env_id, self.env_kwargs)
        self.env = self._session.env
        self._base = self._session.inner
        self.task: Task | None = None
        self.trajectory: Trajectory | None = None
        self.verdict: Verdict | None = None

    def reset(self, **row: Any) -> str:
        """Start the episode the row names and return its task prompt (TRL appends it to the last user
        message). A row from :func:`environment_dataset` carries the episode key; a row with ``task_id``
        (and ``seed``) columns pins that task; any other row draws a task with the row's ``seed``."""
        key = row.get(EPISODE_FIELD)
        if key:
            episode = EpisodeKey.from_json(key)
            if episode.env_id != self.env_id:
                raise ValueError(
                    f"this row is an episode of {episode.env_id}, but this environment plays {self.env_id}: "
                    "with several envs pass a dict to environment_factory and give each row an "
                    "'environment' column (environment_dataset does)"
                )
            prompt, _ = self._live().start(episode)
        elif row.get("task_id") is not None:
            prompt, _ = self._live().reset(seed=row.get("seed"), options={"task_id": str(row["task_id"])})
        else:
            prompt, _ = self._live().reset(seed=row.get("seed"))
        self.task, self.trajectory, self.verdict = self._base.task, self._base.trajectory, None
        return prompt

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run the env's tool ``name``; its observation text is what TRL puts in the tool message."""
        return self._live().call_tool(name, arguments)

    def _judge(self, final_text: str | None) -> Verdict:
        """The env's verdict on the final answer (``None``: the completion ended without one)."""
        self.verdict = self._live().judge(final_text)
        return self.verdict

    def _live(self) -> EnvSession:
        if self._session is None:
            raise RuntimeError(f"{self.env_id}: this environment is closed")
        return self._session

    def _close(self) -> None:
        """Give the env back to the host (private: TRL would take a public method for a tool)."""
        session, self._session = getattr(self, "_session", None), None
        if session is not None:
            session.close()

    def __del__(self) -> None:
        self._close()


def environment_factory(
    env: EnvSpec | Mapping[str, EnvSpec], **env_kwargs: Any
) -> type[ToolgymEnvironment] | dict[str, type[ToolgymEnvironment]]:
    """What ``GRPOTrainer(environment_factory=...)`` takes: a :class:`ToolgymEnvironment` subclass for
    ``env`` (a registered id, made with ``env_kwargs``, or a function returning a toolgym env), or for a
    dict ``{name: env}`` a dict of them (TRL then reads each row's ``environment`` column)."""
    if isinstance(env, Mapping):
        if not env:
            raise ValueError("environment_factory got an empty dict: name at least one env")
        return {name: environment_factory(spec, **env_kwargs) for name, spec in env.items()}  # type: ignore[misc]
    if isinstance(env, str):
        import toolgym  # noqa: F401 - registers the built-in envs

        env_id, kwargs = env, dict(env_kwargs)

        def make() -> gym.Env:
            return gym.make(env_id, **kwargs)
    elif callable(env):
        if env_kwargs:
            raise TypeError("env kwargs go with an env id; a factory function takes none")
        make, kwargs = env, {}
        env_id = ""
    else:
        raise TypeError(f"environment_factory takes an env id, a function or a dict of them, got {env!r}")
    host = EpisodeHost.shared("trl-environment") if isinstance(env, str) else EpisodeHost(factory=make)
    with host.session(env_id or "factory", kwargs) as prototype:
        base = prototype.inner
        spec = prototype.env.spec
        env_id = env_id or (spec.id if spec is not None else type(base).__name__)
        methods = {tool.name: _tool_method(tool.schema()["function"]) for tool in base.tools.values()}
    class_name = "".join(
        part for part in env_id.replace("/", "-").replace("_", "-").split("-") if part.isalnum()
    )
    namespace = {
        "env_id": env_id,
        "env_kwargs": kwargs,
        "registered": isinstance(env, str),
        "_make": staticmethod(make),
        "_host": host,
        **methods,
    }
    return type(f"{class_name or 'Toolgym'}Environment", (ToolgymEnvironment,), namespace)


def environment_reward(
    completions: Sequence[Any], environments: Sequence[ToolgymEnvironment] | None = None, **kwargs: Any
) -> list[float | None]:
    """The reward function for ``environment_factory`` runs: each environment's verifier on its
    completion's final answer; ``None`` where the verifier failed (TRL ignores those samples)."""
    if environments is None:
        raise ValueError(
            "environment_reward needs environments=: pass environment_factory=toolgym.trainers.trl_adapter."
            "environment_factory(ENV_ID) to the GRPOTrainer"
        )
    rewards: list[float | None] = []
    for completion, environment in zip(completions, environments, strict=True):
        verdict = environment._judge(final_answer_text(completion))
        rewards.append(None if verdict.error else float(verdict.reward))
    return rewards


def final_answer_text(completion: Any) -> str | None:
    """The text of a completion's last assistant message (TRL's conversational completions are message
    lists: assistant turns and tool messages); ``None`` when it ends on a tool message (TRL stopped the loop
    before the model answered). A plain-text completion is its own answer."""
    if isinstance(completion, str):
        return completion
    if not completion:
        return None
    last = completion[-1]
    if last.get("role") != "assistant" or last.get("tool_calls"):
        return None
    content = last.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if part.get("type") == "text")
    return content or ""


def environment_dataset(
    env: EnvSpec | Mapping[str, EnvSpec] | type[ToolgymEnvironment] | Mapping[str, type[ToolgymEnvironment]],
    n: int,
    *,
    split: Split = "train",
    seed: int = 0,
    **env_kwargs: Any,
) -> Any:
    """A ``datasets.Dataset`` of ``n`` rows for an ``environment_factory`` run: each row's ``prompt`` is the
    env's own system prompt with :data:`ANSWER_INSTRUCTION` and an empty user message (``reset`` fills in
    the task), and ``toolgym_episode`` pins the env, task and seed (the same episodes as
    ``prompt_dataset``). For a dict of envs the ``n`` rows are shared among them in turn and carry an
    ``environment`` column."""
    from datasets import Dataset

    if isinstance(env, Mapping):
        names = list(env)
        if not names:
            raise ValueError("environment_dataset got an empty dict: name at least one env")
        parts = {
            name: _rows(env[name], n // len(names) + (i < n % len(names)), split, seed, env_kwargs)
            for i, name in enumerate(names)
        }
        rows = [
            {**parts[name][i], "environment": name}
            for i in range(max(len(p) for p in parts.values()))
            for name in names
            if i < len(parts[name])
        ]
    else:
        rows = _rows(env, n, split, seed, env_kwargs)
    return Dataset.from_list(rows)


def _rows(
    env: EnvSpec | type[ToolgymEnvironment], n: int, split: Split, seed: int, env_kwargs: dict[str, Any]
) -> list[dict[str, Any]]:
    if n <= 0:
        return []
    cls: type[ToolgymEnvironment]
    if isinstance(env, type) and issubclass(env, ToolgymEnvironment):
        cls = env
    else:
        made = environment_factory(cast(EnvSpec, env), **env_kwargs)
        assert not isinstance(made, dict)  # one env spec, one class
        cls = made
    source: EnvSource = EnvRequest(id=cls.env_id, kwargs=cls.env_kwargs) if cls.registered else cls._make
    rows = episode_rows(source, n, split=split, seed=seed)
    with cls._host.session(cls.env_id, cls.env_kwargs) as session:
        preamble = session.inner.preamble
    system = "\n\n".join(p for p in (preamble, ANSWER_INSTRUCTION) if p)
    return [
        {
            "prompt": [{"role": "system", "content": system}, {"role": "user", "content": ""}],
            EPISODE_FIELD: row.key.to_json(),
        }
        for row in rows
    ]


def _tool_method(function: dict[str, Any]) -> Callable[..., str]:
    """A method with the tool's typed signature and a Google-style docstring, so that transformers'
    ``get_json_schema`` (what TRL renders) gives back the tool's own schema; calling it runs the tool."""
    name = function["name"]
    if name in _RESERVED or name.startswith("_"):
        raise ValueError(f"a tool named {name!r} cannot be a TRL environment method (TRL reserves it)")
    return tool_function(function, lambda env, arguments: env._call(name, arguments), method=True)


__all__ = [
    "ANSWER_INSTRUCTION",
    "EPISODE_FIELD",
    "ToolgymEnvironment",
    "environment_dataset",
    "environment_factory",
    "environment_reward",
    "final_answer_text",
]
