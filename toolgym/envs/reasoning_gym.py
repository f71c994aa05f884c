"""toolgym/ReasoningGym-v0: any ``reasoning-gym`` dataset by name, scored by its own ``score_answer``.

``gym.make("toolgym/ReasoningGym-v0", dataset="chain_sum", config={"min_terms": 3})`` gives one task per
seed: the first entry of ``create_dataset(dataset, seed=seed, size=1, **config)``. reasoning-gym is an
optional dependency (``pip install reasoning-gym``); without it, constructing the env says so.

Tasks stay JSON-plain: ``Task.data`` holds only ``dataset``, ``seed`` and ``config``, and the verifier
rebuilds the entry (metadata included, which need not be JSON-plain) from them, with a small cache.

Scoring: ``score_answer(answer, entry)`` is the reward (reasoning-gym gives partial credit on some datasets);
``passed`` means a full 1.0. Many ``score_answer`` implementations parse the answer with ``int()`` and raise
on a malformed one: that is a wrong answer (reward 0, the exception in ``details``), not a verifier failure.
What *is* a verifier failure (``Verdict.error``) is a task whose own gold answer does not score 1.0, or an
entry that cannot be rebuilt, or that is rebuilt with another question: then the reward says nothing about the
policy. The last happens across processes: a few datasets (``isomorphic_strings``, ``knight_swap``,
``list_functions``, ``polynomial_multiplication``, ``ransom_note`` in reasoning-gym 0.1.25) draw from sets of
strings or build sympy expressions in hash order, so the same seed gives another task under another
``PYTHONHASHSEED``; scoring a rollout's task against that task's gold would be a silently wrong reward.

Datasets without a single gold answer (``entry["answer"] is None``: puzzles that accept any valid solution)
are scored by ``score_answer`` alone and have no oracle.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from toolgym.core.errors import unknown_name
from toolgym.core.registry import register_env
from toolgym.core.task import ProceduralSource, Task
from toolgym.core.types import ToolCall, Trajectory, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.rewards.base import Verifier
from toolgym.tools.base import make_tool
from toolgym.tools.calculator import Calculator, CalculatorError

DEFAULT_DATASET = "basic_arithmetic"
SYSTEM_PROMPT = (
    "You solve reasoning problems. Use the tools when they help, then give only the final answer, exactly "
    "in the form the question asks for."
)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _reasoning_gym():
    try:
        import reasoning_gym.factory as factory
    except ImportError as exc:
        raise ImportError(
            "toolgym/ReasoningGym-v0 needs the optional package 'reasoning-gym': pip install reasoning-gym"
        ) from exc
    return factory


def dataset_names() -> list[str]:
    """Every reasoning-gym dataset name."""
    return sorted(_reasoning_gym().DATASETS)


@lru_cache(maxsize=1024)
def _cached(name: str, seed: int, config_json: str) -> tuple[Any, dict[str, Any], str | None]:
    """(dataset object, entry, problem with the gold or None) for one task."""
    dataset = _reasoning_gym().create_dataset(name, seed=seed, size=1, **json.loads(config_json))
    entry = dataset[0]
    problem = None
    if entry.get("answer") is not None:
        try:
            gold_score = dataset.score_answer(entry["answer"], entry)
        except Exception as exc:
            problem = f"score_answer raised on the gold answer: {type(exc).__name__}: {exc}"
        else:
            if gold_score != 1.0:
                problem = f"the gold answer scores {gold_score}, not 1.0"
    return dataset, entry, problem


def _config_json(config: Mapping[str, Any] | None) -> str:
    config = dict(config or {})
    reserved = {"seed", "size"} & set(config)
    if reserved:
        raise ValueError(f"config may not set {sorted(reserved)}: the env sets them per task")
    return json.dumps(config, sort_keys=True)


def entry_for(task: Task) -> tuple[Any, dict[str, Any], str | None]:
    """The reasoning-gym dataset object, entry and gold problem behind ``task``."""
    data = task.data
    return _cached(data["dataset"], int(data["seed"]), _config_json(data.get("config")))


def make_task(name: str, seed: int, config: Mapping[str, Any] | None = None) -> Task:
    config_json = _config_json(config)
    _, entry, _ = _cached(name, seed, config_json)
    answer = entry.get("answer")
    return Task(
        id=f"reasoning_gym/{name}/{seed}",
        prompt=str(entry["question"]),
        answer=answer if answer is None or isinstance(answer, str | int | float) else str(answer),
        data={"dataset": name, "seed": seed, "config": json.loads(config_json)},
        source=f"reasoning_gym/{name}",
    )


class ReasoningGymVerifier(Verifier):
    """The dataset's own ``score_answer`` as a toolgym verifier (see the module docstring)."""

    name = "reasoning_gym"

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        try:
            dataset, entry, problem = entry_for(task)
        except (KeyError, TypeError, ValueError) as exc:
            return Verdict(reward=0.0, passed=False, error=f"reasoning_gym: cannot rebuild the task: {exc}")
        if problem is None and str(entry["question"]) != task.prompt:
            problem = (
                "the task rebuilt from its seed is not the one asked: this dataset's generator depends on "
                "Python's string hashing, so give every process the same PYTHONHASHSEED"
            )
        if problem is not None:
            return Verdict(reward=0.0, passed=False, error=f"reasoning_gym/{task.data['dataset']}: {problem}")
        details: dict[str, Any] = {"dataset": task.data["dataset"], "gold": entry.get("answer")}
        try:
            reward = float(dataset.score_answer(answer, entry))
        except Exception as exc:
            details["reason"] = f"score_answer raised {type(exc).__name__}: {str(exc)[:200]}"
            reward = 0.0
        reward = min(max(reward, 0.0), 1.0)
        return Verdict(reward=reward, passed=reward == 1.0, details=details)


def reasoning_gym_oracle(task: Task) -> Sequence[ToolCall | str]:
    """The gold answer, after checking it with the calculator when it is a number: the entry's own
    expression when the calculator agrees with it (``basic_arithmetic``, ``chain_sum``), else the number."""
    _, entry, _ = entry_for(task)
    gold = entry.get("answer")
    if gold is None:
        raise LookupError(f"reasoning_gym/{task.data['dataset']} has no single gold answer to replay")
    gold = str(gold)
    calls = []
    if _NUMBER.fullmatch(gold):
        expression = (entry.get("metadata") or {}).get("expression")
        if not (isinstance(expression, str) and _evaluates_to(expression, gold)):
            expression = gold
        calls.append(ToolCall(name="calculator", arguments={"expression": expression}))
    return [*calls, gold]


def _evaluates_to(expression: str, gold: str) -> bool:
    from fractions import Fraction

    try:
        return Calculator().evaluate(expression) == Fraction(gold)
    except (CalculatorError, ValueError, ZeroDivisionError):
        return False


@register_env(
    "toolgym/ReasoningGym-v0",
    tools=["calculator"],
    task_source="any reasoning-gym dataset (dataset=NAME; optional package)",
    description="reasoning-gym tasks by name, scored by the dataset's own score_answer.",
    oracle=reasoning_gym_oracle,
)
def make_reasoning_gym_env(
    dataset: str = DEFAULT_DATASET,
    config: Mapping[str, Any] | None = None,
    tools: Sequence[str] = ("calculator",),
    action_format: str = "xml",
    max_turns: int = 4,
    **env_kwargs: Any,
) -> ToolEnv:
    names = dataset_names()
    if dataset not in names:
        raise unknown_name("reasoning-gym dataset", dataset, names, "pass dataset=", known_as="datasets")
    config = dict(config or {})
    make_task(dataset, 0, config)  # a bad config fails here, at construction
    source = ProceduralSource(f"reasoning_gym/{dataset}", lambda seed: make_task(dataset, seed, config))
    if isinstance(tools, str):
        tools = (tools,)
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return ToolEnv(
        source,
        [make_tool(name) for name in tools],
        ReasoningGymVerifier(),
        action_format,
        max_turns=max_turns,
        **env_kwargs,
    )
