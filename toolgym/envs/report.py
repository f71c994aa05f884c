"""toolgym/Report-v0: write a short profile of an invented entity, found with a search tool, judged by an LLM.

The entities and documents are the Search env's procedural knowledge world (``toolgym.search.world``): every
name is invented, so the facts can only come from the documents. A task names one entity and the facts a
profile of it should state; the reference answer is those facts as the world's document states them. The
answer is long-form text, so no string match can score it: the default verifier is an LLM judge
(``toolgym.rewards.judge.JudgeVerifier``, see ``docs/judges.md``) with three criteria, accuracy (the facts
agree with the reference), coverage (every asked-for fact is there) and grounding (nothing invented, no
padding), behind a deterministic gate (``report_judge.py``): an answer that states none of the entity's facts
earns 0 without a judge call.

The judge's endpoint comes from the ``judge`` kwarg (a JSON object, because training rows carry env kwargs:
``{"base_url": ..., "model": ..., "api_key_env": ..., "group": false, <any JudgeVerifier option>}``),
else from the environment variables ``TOOLGYM_JUDGE_URL`` / ``TOOLGYM_JUDGE_MODEL`` (and
``TOOLGYM_JUDGE_API_KEY``).
With neither the env still builds, and every verdict is an error saying how to configure a judge: never a 0.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

from toolgym.core.registry import register_env
from toolgym.core.task import ProceduralSource, Task
from toolgym.core.types import ToolCall, Trajectory, Verdict
from toolgym.envs.base import ToolEnv
from toolgym.rewards.base import Verifier
from toolgym.search.world import RELATIONS, KnowledgeWorld
from toolgym.tools.search import SearchTool
from toolgym.util.world_vocabulary import splitmix

SYSTEM_PROMPT = (
    "Write the report the user asks for, using the search tool. The entities are invented, so every fact "
    "must come from the documents: search for the exact name of the entity, read its document, then give the "
    "report as your final answer, a few plain sentences that state each asked-for fact and nothing that the "
    "documents do not say."
)
DEFAULT_WORLD_SIZE = 2_000
#: the environment variables a judge endpoint is read from when the env's ``judge`` kwarg does not give one
URL_VAR, MODEL_VAR, KEY_VAR = "TOOLGYM_JUDGE_URL", "TOOLGYM_JUDGE_MODEL", "TOOLGYM_JUDGE_API_KEY"
HOW_TO_CONFIGURE = (
    "no LLM judge is configured for this env: pass judge={'base_url': 'http://HOST:PORT/v1', 'model': NAME} "
    f"to gym.make (or a `judge:` key in the toolgym train YAML), or set {URL_VAR} and {MODEL_VAR}"
)

#: what a profile of each kind of entity should state, as the task puts it
ASKED_FOR = {
    "person": "their occupation, where and when they were born, their employer and their mentor",
    "place": "its region, when it was founded, its population and its mayor",
    "organisation": "its field, when and by whom it was established, and where it is headquartered",
    "work": (
        "what form of work it is, its author, when and by whom it was first published, and where it is set"
    ),
}

#: the judge's criteria (``toolgym.rewards.judge.Criterion`` fields), weighted towards getting facts right
CRITERIA: tuple[tuple[str, str, float], ...] = (
    (
        "accuracy",
        "Every fact the answer states agrees with the reference answer: names, years and numbers exactly. "
        "A fact that contradicts the reference is a serious error.",
        2.0,
    ),
    (
        "coverage",
        "The answer states every fact the task asks for (each one the reference answer gives).",
        1.0,
    ),
    (
        "grounding",
        "The answer states nothing that is not in the reference answer (no invented facts, no speculation) "
        "and is a short, plain report rather than padding or a copy of the question.",
        1.0,
    ),
)


def report_task(world: KnowledgeWorld, seed: int) -> Task:
    """The task for ``seed``: a profile of one entity of the world, drawn uniformly from the seed."""
    index = splitmix(seed * 0x2545F491 + 0x9E90) % world.size
    entity = world.entity(index)
    facts = world.document(index)["contents"].split("\n", 1)[1]
    kind = "the city" if entity.kind == "place" else f"the {entity.kind}"
    mention = (
        f'the {entity.values["form"]} "{entity.name}"' if entity.kind == "work" else f"{kind} {entity.name}"
    )
    prompt = (
        f"Write a short profile of {mention}: a few sentences stating {ASKED_FOR[entity.kind]}. "
        "Use only facts from the documents."
    )
    data = {
        "entity": index,
        "kind": entity.kind,
        "name": entity.name,
        "queries": [entity.name],
        "facts": _fact_forms(world, entity.values, prompt),
    }
    return Task(id=str(seed), prompt=prompt, answer=facts, data=data)


def _fact_forms(world: KnowledgeWorld, values: Mapping[str, Any], prompt: str) -> list[list[str]]:
    """Each fact of the entity the prompt does not give, as the ways it may be written (the gate of
    ``report_judge``: an answer must state one of them before a judge is paid for)."""
    forms = []
    for relation, value in values.items():
        target = next((r.target for r in RELATIONS if r.name == relation), None)
        written = [world.name(value)] if target else [str(value)]
        if relation == "population":
            written.append(f"{value:,}")
        if not any(w.lower() in prompt.lower() for w in written):
            forms.append(written)
    return forms


def report_oracle(task: Task) -> Sequence[ToolCall | str]:
    """Search the entity's name, then answer with its facts as its document states them (the reference)."""
    return [ToolCall(name="search", arguments={"query": q}) for q in task.data["queries"]] + [
        str(task.answer)
    ]


class UnconfiguredJudge(Verifier):
    """The verifier of a judged env with no judge endpoint: every verdict is an error saying how to set one
    (an untrainable episode, never a silent 0)."""

    name = "judge"

    def __init__(self, reason: str = HOW_TO_CONFIGURE):
        self.reason = reason

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        return Verdict(reward=0.0, passed=False, error=self.reason)


def judge_settings(judge: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The judge's endpoint and options: ``judge`` (kwargs, JSON-like) over the ``TOOLGYM_JUDGE_*``
    environment variables; None when neither names an endpoint. ``api_key_env`` names the variable holding
    the key, so a training row's kwargs never carry the key itself."""
    settings = dict(judge or {})
    for key in [k for k, v in settings.items() if v is None]:  # None is "not set" (YAML's `api_key: null`)
        del settings[key]
    settings.setdefault("base_url", os.environ.get(URL_VAR) or None)
    settings.setdefault("model", os.environ.get(MODEL_VAR) or None)
    key_var = settings.pop("api_key_env", None)  # else the judge reads TOOLGYM_JUDGE_API_KEY when it calls
    if key_var and "api_key" not in settings and os.environ.get(key_var):
        settings["api_key"] = os.environ[key_var]
    if not settings["base_url"] or not settings["model"]:
        return None
    return settings


def make_judge(
    judge: Mapping[str, Any] | None,
    criteria: Sequence[tuple[str, str, float]] = CRITERIA,
) -> Verifier:
    """The env's verifier: a ``JudgeVerifier`` (or, with ``"group": true``, a ``GroupJudgeVerifier``, which
    the collector and verl's agent loop use to judge a GRPO group's answers in one call) on the configured
    endpoint, or an ``UnconfiguredJudge`` when there is none."""
    settings = judge_settings(judge)
    if settings is None:
        return UnconfiguredJudge()
    from toolgym.envs.report_judge import judge_class  # the judge's HTTP client: only with a judge
    from toolgym.rewards.judge import Criterion

    group = bool(settings.pop("group", False))
    base_url, model = settings.pop("base_url"), settings.pop("model")
    judged = [Criterion(name=n, description=d, weight=w) for n, d, w in criteria]
    cls: Callable[..., Verifier] = judge_class(group)
    try:
        return cls(judged, base_url, model, **settings)
    except (TypeError, ValueError) as exc:  # a bad option: the env still builds, every verdict says why
        return UnconfiguredJudge(f"the judge settings {sorted(settings)} are not valid: {exc}")


def make_report_env(
    world_size: int = DEFAULT_WORLD_SIZE,
    world_seed: int = 0,
    judge: dict[str, Any] | None = None,
    topk: int = 3,
    max_doc_chars: int = 1_000,
    action_format: str = "xml",
    max_turns: int = 4,
    **env_kwargs: Any,
) -> ToolEnv:
    """A Report env.

    Args:
        world_size, world_seed: the knowledge world whose entities the reports are about (and whose
            documents the search tool searches, with BM25).
        judge: the LLM judge's endpoint and options (see the module docstring); default: the
            ``TOOLGYM_JUDGE_*`` environment variables.
        topk: documents per search. max_doc_chars: each document's cut.
    """
    world = KnowledgeWorld(world_size, world_seed)
    source = ProceduralSource(f"report-s{world_seed}-n{world_size}", partial(report_task, world))
    from toolgym.search.sources import make_retriever  # here, not at the top: it loads bm25s

    searcher = make_retriever(None, world_size=world_size, world_seed=world_seed)
    tool = SearchTool(searcher, topk=topk, max_doc_chars=max_doc_chars)
    if action_format == "xml" and "parser_options" not in env_kwargs:
        env_kwargs["parser_options"] = {"result_tag": "information"}
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return ToolEnv(source, [tool], make_judge(judge), action_format, max_turns=max_turns, **env_kwargs)


@register_env(
    "toolgym/Report-v0",
    tools=["search"],
    task_source="procedural fictional knowledge world: a profile of one entity",
    description="Long-form answers: search an invented entity, write its profile; scored by an LLM judge.",
    oracle=report_oracle,
)
def make_report_v0(judge: dict[str, Any] | None = None, **kwargs: Any) -> ToolEnv:
    return make_report_env(judge=judge, **kwargs)
