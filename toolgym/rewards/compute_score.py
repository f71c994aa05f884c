"""verl's custom reward function: ``compute_score(data_source, solution_str, ground_truth, extra_info=None)``.

This lets toolgym's verifiers score plain single-turn verl training, without the agent loop::

    custom_reward_function:
      path: <site-packages>/toolgym/rewards/compute_score.py
      name: compute_score

(``python -c "import toolgym.rewards.compute_score as m; print(m.__file__)"`` prints the path.)

``data_source`` picks the scorer (``toolgym.rewards.registry``): a scorer name itself (``math``,
``numeric``, ``exact_match``, ``f1``, ...), an env id (``toolgym/Math-v0``), or a well-known dataset name
(``openai/gsm8k``, ``lighteval/MATH``, Search-R1's ``nq``/``hotpotqa``/... with or without a
``searchR1_`` prefix). An unknown one raises, naming the known ones: a mislabelled dataset must stop
training, not train on zeros. ``extra_info["verification_info"]``, when present, adds options (``rel_tol``).

The return value is a dict with the same keys every call — ``score`` (the reward), ``passed`` and
``error`` (``""``, or why the verifier could not judge) — so verl logs ``passed``/``error`` per sample next to
the reward and a verifier failure is visible instead of being a silent 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolgym.rewards.registry import UnknownScorer, get_scorer, score, scorer_names

#: dataset names as they appear in verl's ``data_source`` column → scorer
DATA_SOURCES: dict[str, str] = {
    "openai/gsm8k": "math",
    "gsm8k": "math",
    "lighteval/MATH": "math",
    "DigitalLearningGmbH/MATH-lighteval": "math",
    "HuggingFaceH4/MATH-500": "math",
    "math_dapo": "math",
    "toolgym/Math-v0": "math",
    "toolgym/Calculator-v0": "numeric",
    "toolgym/PythonCode-v0": "code_tests",
    "toolgym/Search-v0": "exact_match",
    "toolgym/SearchMultiHop-v0": "exact_match",
    **{name: "exact_match" for name in ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique")},
    "bamboogle": "exact_match",
}
_PREFIXES = ("searchR1_",)


def scorer_name_for(data_source: str) -> str:
    """The scorer a ``data_source`` is judged with; ``UnknownScorer`` if there is none."""
    candidates = [data_source, *(data_source.removeprefix(p) for p in _PREFIXES if data_source.startswith(p))]
    for candidate in candidates:
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
    info: dict[str, Any] = {}
    extra = extra_info.get("verification_info") if isinstance(extra_info, Mapping) else None
    if isinstance(extra, Mapping):
        info.update(extra)
    info.update(type=scorer_name_for(str(data_source)), ground_truth=_plain_gold(ground_truth))
    verdict = score(solution_str, info)
    return {"score": float(verdict.reward), "passed": bool(verdict.passed), "error": verdict.error or ""}


def _plain_gold(value: Any) -> Any:
    """verl hands columns over as numpy values, and Search-R1 stores its golds as ``{"target": [...]}``."""
    if isinstance(value, Mapping) and "target" in value:
        value = value["target"]
    if hasattr(value, "tolist"):
        value = value.tolist()
    return value


__all__ = ["DATA_SOURCES", "compute_score", "scorer_name_for"]
