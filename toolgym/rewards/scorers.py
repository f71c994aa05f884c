"""Scorers by name: the one dispatch table behind ``compute_score`` (verl) and the reward server.

A *scorer* judges a whole model response against a ``verification_info`` mapping — the shape remote-reward
training setups send: ``{"type": "math", "ground_truth": "\\frac{1}{2}", ...}``. It is a thin adapter over a
toolgym ``Verifier``, so a single-turn trainer, the reward server and the envs share one implementation per
kind of answer. ``ground_truth`` (or ``answer``) becomes ``Task.answer``; any other keys go to ``Task.data``
(``rel_tol`` for ``numeric``, ``golden_answers`` for the QA scorers).

Built-in scorers (registered on first lookup):

=================  ==============================================  ====================================
name (aliases)     verifier                                        what is judged
=================  ==============================================  ====================================
``math``           ``MathVerifier`` (math-verify equivalence)      the final answer
(``math_verifiable``, ``verifiable_math``)                         (``toolgym.rewards.extract``): last
                                                                   ``<answer>``, ``\\boxed{}``, ``####``,
                                                                   ``Answer:`` line; the last number
                                                                   when the gold is a number
``numeric``        ``NumericVerifier`` (exact number)              the same as ``math``
``exact_match``    ``QAVerifier("em")`` (SQuAD EM)                  last ``<answer>``, else the text
``f1``             ``QAVerifier("f1")`` (SQuAD token F1)            last ``<answer>``, else the text
``code_tests``     ``CodeTestsVerifier`` (hidden tests, sandbox)    code in the last ``<answer>``, else
                                                                   the text (```python fence stripped)
``code_io``        ``CodeTestsVerifier`` (stdin/stdout or call     the same; tests in any contest
                   tests of contest data, sandbox)                 layout (``rewards.code.layouts``)
=================  ==============================================  ====================================

Other modules add theirs with ``register_scorer``. An unknown type
is an ``UnknownScorer`` error, never a score of 0.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from toolgym.core.task import Task
from toolgym.core.types import Verdict
from toolgym.rewards.base import BadVerificationInfo, Verifier, safe_verify
from toolgym.rewards.extract import extract_final_answer, last_number
from toolgym.rewards.numeric import as_fraction

#: ``scorer(response, verification_info) -> Verdict``; must not raise for a bad response.
Scorer = Callable[[str, Mapping[str, Any]], Verdict]

_SCORERS: dict[str, Scorer] = {}
_ALIASES: dict[str, str] = {}
_builtins_lock = threading.Lock()
_builtins_loaded = False


class UnknownScorer(KeyError):
    """No scorer is registered under this name."""

    def __str__(self) -> str:  # KeyError would show the message with quotes around it
        return str(self.args[0]) if self.args else ""


def register_scorer(name: str, scorer: Scorer, *, aliases: Iterable[str] = (), replace: bool = False) -> None:
    """Make ``scorer`` available as ``name`` (and ``aliases``). Registering a taken name is an error unless
    ``replace``."""
    for key in (name, *aliases):
        taken = key in _SCORERS or key in _ALIASES
        if taken and not replace:
            raise ValueError(f"a scorer named {key!r} is already registered")
    _SCORERS[name] = scorer
    _ALIASES.pop(name, None)
    for alias in aliases:
        _SCORERS.pop(alias, None)
        _ALIASES[alias] = name


def unregister_scorer(name: str) -> None:
    """Remove ``name`` and its aliases (tests, plugins replacing a scorer)."""
    _SCORERS.pop(name, None)
    for alias in [a for a, target in _ALIASES.items() if target == name]:
        del _ALIASES[alias]


def get_scorer(name: str) -> Scorer:
    """The scorer registered as ``name`` or an alias of it; ``UnknownScorer`` lists the known names."""
    _load_builtins()
    key = _ALIASES.get(name, name)
    try:
        return _SCORERS[key]
    except (KeyError, TypeError):
        raise UnknownScorer(
            f"unknown verification type {name!r}; known types: {', '.join(scorer_names())}"
        ) from None


def scorer_names() -> list[str]:
    """Every registered name and alias, sorted."""
    _load_builtins()
    return sorted([*_SCORERS, *_ALIASES])


def score(response: str, verification_info: Mapping[str, Any]) -> Verdict:
    """Judge ``response`` with the scorer named by ``verification_info["type"]``.

    Raises ``BadVerificationInfo`` or ``UnknownScorer`` for a malformed request; a failure while judging is a
    ``Verdict`` with ``error`` set.
    """
    if not isinstance(verification_info, Mapping):
        raise BadVerificationInfo(
            f"verification_info must be an object, got {type(verification_info).__name__}"
        )
    kind = verification_info.get("type")
    if not isinstance(kind, str) or not kind:
        raise BadVerificationInfo('verification_info needs a "type" (a string naming a scorer)')
    scorer = get_scorer(kind)
    if not isinstance(response, str):
        return Verdict(
            reward=0.0,
            passed=False,
            details={"reason": f"the response is not text ({type(response).__name__})"},
        )
    return scorer(response, verification_info)


def verifier_scorer(
    verifier: Verifier,
    *,
    extract: Callable[[str], str | None] | None = extract_final_answer,
    number_fallback: bool = False,
) -> Scorer:
    """A scorer that runs ``verifier`` on the answer ``extract`` finds in the response (``extract=None``: on
    the whole response, for verifiers that find the answer themselves).

    ``number_fallback``: when ``extract`` finds nothing and the gold is a plain number, the response's last
    number is the answer (``toolgym.rewards.extract.last_number``: only for a response with no answer
    marker at all). Against a gold like ``x^2+1`` a stray number means nothing, so it is never guessed.
    """

    def scorer(response: str, info: Mapping[str, Any]) -> Verdict:
        task = task_from_info(info)
        answer = extract(response) if extract is not None else response
        if answer is None and number_fallback and as_fraction(task.answer) is not None:
            answer = last_number(response)
        if answer is None:
            reason = (
                "no final answer found (expected <answer>...</answer>, \\boxed{...}, '#### ...' or an "
                "'Answer: ...' line)"
            )
            return Verdict(reward=0.0, passed=False, details={"reason": reason})
        return safe_verify(verifier, task, answer)

    scorer.__name__ = f"{verifier.name}_scorer"
    return scorer


def task_from_info(info: Mapping[str, Any]) -> Task:
    """The ``Task`` a verifier judges: ``ground_truth`` (or ``answer``) → ``answer``, the rest → ``data``."""
    gold_key = "ground_truth" if "ground_truth" in info else "answer" if "answer" in info else None
    if gold_key is None:
        raise BadVerificationInfo('verification_info needs a "ground_truth"')
    data = {k: v for k, v in info.items() if k not in ("type", gold_key)}
    return Task(id=str(info.get("id", "request")), prompt="", answer=info[gold_key], data=data)


def _load_builtins() -> None:
    global _builtins_loaded
    if _builtins_loaded:
        return
    with _builtins_lock:
        if _builtins_loaded:
            return
        from toolgym.rewards.code import code_io_scorer, code_tests_scorer
        from toolgym.rewards.math import MathVerifier
        from toolgym.rewards.numeric import NumericVerifier
        from toolgym.rewards.qa import QAVerifier

        builtins: list[tuple[str, Scorer, tuple[str, ...]]] = [
            (
                "math",
                verifier_scorer(MathVerifier(), number_fallback=True),
                ("math_verifiable", "verifiable_math"),
            ),
            ("numeric", verifier_scorer(NumericVerifier(), number_fallback=True), ()),
            ("exact_match", verifier_scorer(QAVerifier("em"), extract=None), ()),
            ("f1", verifier_scorer(QAVerifier("f1"), extract=None), ()),
            ("code_tests", code_tests_scorer, ()),
            ("code_io", code_io_scorer, ("code_contests_io",)),
        ]
        for name, scorer, aliases in builtins:
            if name not in _SCORERS:
                register_scorer(name, scorer, aliases=aliases)
        _builtins_loaded = True


__all__ = [
    "BadVerificationInfo",
    "Scorer",
    "UnknownScorer",
    "get_scorer",
    "register_scorer",
    "score",
    "scorer_names",
    "task_from_info",
    "unregister_scorer",
    "verifier_scorer",
]
