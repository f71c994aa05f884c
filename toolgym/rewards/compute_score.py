"""verl's custom reward function: ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``.

This lets toolgym's verifiers score plain single-turn verl training, without the agent loop::

    custom_reward_function:
      path: <site-packages>/toolgym/rewards/compute_score.py
      name: compute_score

(``python -c "import toolgym.rewards.compute_score as m; print(m.__file__)"`` prints the path.)

``data_source`` picks the scorer (``toolgym.rewards.scorers``): a scorer name itself (``math``,
``numeric``, ``exact_match``, ``f1``, ...), an env id (``toolgym/Math-v0``), or a well-known dataset name
(``openai/gsm8k``, ``lighteval/MATH`` and the other MATH names verl knows, DAPO's ``math_dapo`` and
``aime*``, Search-R1's ``nq``/``hotpotqa``/... with or without a ``searchR1_`` prefix). An unknown one
raises, naming the known ones: a mislabelled dataset must stop training, not train on zeros.

The answer is found in the response as ``toolgym.rewards.extract`` says, in the formats verl's own recipes
ask for: ``<answer>…</answer>``, ``\\boxed{…}``, GSM8K's ``#### 72``, an ``Answer: …`` line (DAPO) and the
Minerva / lm-eval ``Final Answer: The final answer is $\\frac{2}{3}$. I hope it is correct.``; for math and
numeric golds that are plain numbers, a response with none of these is judged on its last number (verl's
gsm8k "flexible" mode). Wherever verl's own ``default_compute_score`` calls an answer correct, this does too
(``tests/rewards/test_verl_differential.py``); it accepts more (equivalent forms, via math-verify).

Rows that toolgym exported for verl (``toolgym export verl``) carry the pinned task in
``extra_info["task"]`` (the JSON of a ``toolgym.core.task.Task``). Then the task's own answer and data are
what is judged against — hidden code tests, every gold answer of a QA task, a numeric tolerance — with the
scorer the ``data_source`` maps to; a ``task`` that does not parse raises.
``extra_info["verification_info"]``, when present, adds options (``rel_tol``) and wins over the task's data.

The return value is a dict with the same keys every call — ``score`` (the reward), ``passed`` and
``error`` (``""``, or why the verifier could not judge) — so verl logs ``passed``/``error`` per sample next to
the reward and a verifier failure is visible instead of being a silent 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from toolgym.core.task import Task
from toolgym.rewards.scorers import UnknownScorer, get_scorer, score, scorer_names

#: dataset names as they appear in verl's ``data_source`` column → scorer
DATA_SOURCES: dict[str, str] = {
    "openai/gsm8k": "math",
    "gsm8k": "math",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "math_dapo": "math",
    "math_dapo_reasoning": "math",
    "toolgym/Math-v0": "math",
    "toolgym/Calculator-v0": "numeric",
    "toolgym/PythonCode-v0": "code_tests",
    "toolgym/Search-v0": "exact_match",
    "toolgym/SearchMultiHop-v0": "exact_match",
    **{name: "exact_match" for name in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique")},
    "bamboogle": "exact_match",
    **{
        name: "code_io"
        for name in ("apps", "taco", "codecontests", "livecodebench", "deepcoder", "primeintellect")
    },
}
_PREFIXES = ("searchR1_",)
#: dataset-name prefixes → scorer (verl scores every ``aime*`` source with DAPO's math rule)
_FAMILIES = {"aime": "math"}


def scorer_name_for(data_source: str) -> str:
    """The scorer a ``data_source`` is judged with; ``UnknownScorer`` if there is none."""
    candidates = [data_source, *(data_source.removeprefix(p) for p in _PREFIXES if data_source.startswith(p))]
    for candidate in candidates:
        family = next((name for prefix, name in _FAMILIES.items() if candidate.startswith(prefix)), None)
        if family is not None:
            return family
        if candidate in DATA_SOURCES:
            return DATA_SOURCES[candidate]
        try:
            get_scorer(candidate)
        except UnknownScorer:
            continue
        return candidate
    known = sorted({*DATA_SOURCES, *scorer_names()})
    raise UnknownScorer(f"no toolgym scorer for data_source {data_source!r}; known: {', '.join(known)}")


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Score one response for verl (see the module docstring)."""
    extra: Mapping[str, Any] = extra_info if isinstance(extra_info, Mapping) else {}
    kind = scorer_name_for(str(data_source))
    task = task_from_extra_info(extra)
    info: dict[str, Any] = {}
    gold = _plain_gold(ground_truth)
    if task is not None:
        info.update(task.data, id=task.id)
        if task.answer is not None:
            gold = task.answer
    options = extra.get("verification_info")
    if isinstance(options, Mapping):
        info.update(options)
    info.update(type=kind, ground_truth=gold)
    verdict = score(solution_str, info)
    return {"score": float(verdict.reward), "passed": bool(verdict.passed), "error": verdict.error or ""}


def task_from_extra_info(extra_info: Mapping[str, Any] | None) -> Task | None:
    """The toolgym ``Task`` an exported row carries in ``extra_info["task"]`` (JSON text, a mapping or a
    ``Task``); ``None`` when there is none. One that does not parse is a broken row: ``ValueError``."""
    raw = extra_info.get("task") if isinstance(extra_info, Mapping) else None
    if raw is None or isinstance(raw, Task):
        return raw
    try:
        if isinstance(raw, str | bytes):
            return Task.model_validate_json(raw)
        return Task.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(
            f"extra_info['task'] is not a toolgym Task ({exc.__class__.__name__}: {str(exc)[:300]}); "
            "export the rows with `toolgym export verl`, or drop the task column to score by ground_truth"
        ) from exc


def _plain_gold(value: Any) -> Any:
    """verl hands columns over as numpy values, and Search-R1 stores its golds as ``{"target": [...]}``."""
    if isinstance(value, Mapping) and "target" in value:
        value = value["target"]
    if hasattr(value, "tolist"):
        value = value.tolist()
    return value


__all__ = ["DATA_SOURCES", "compute_score", "scorer_name_for", "task_from_extra_info"]
