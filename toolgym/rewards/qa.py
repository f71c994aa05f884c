"""Open-domain QA answers: SQuAD normalisation, exact match and token F1 against a list of gold answers.

These are the metrics of SQuAD, NQ, HotpotQA and Search-R1, computed the same way, so rewards and evaluation
numbers are comparable with published ones: lower-case, drop punctuation and the articles a/an/the, collapse
whitespace; EM is 1 when the normalised prediction equals any normalised gold answer; F1 is the best token F1
over the gold answers. The prediction is the body of the *last* ``<answer>…</answer>`` in the text (a model
that revises its answer is judged on its final one); text without answer tags is the prediction itself.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

from toolgym.core.task import Task
from toolgym.core.types import Trajectory, Verdict
from toolgym.rewards.base import Verifier
from toolgym.rewards.extract import ANSWER_CLOSE, ANSWER_OPEN, last_answer_tag

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)

Mode = Literal["em", "f1"]


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def extract_answer(text: str) -> str:
    """The body of the last ``<answer>…</answer>`` in ``text``, or ``text`` itself when it has none.

    A last ``<answer>`` left open counts as closed at the end of the text: samplers that stop on
    ``</answer>`` drop the stop string.
    """
    opened = text.rfind(ANSWER_OPEN)
    if opened != -1 and text.find(ANSWER_CLOSE, opened) == -1:
        return text[opened + len(ANSWER_OPEN) :].strip()
    tagged = last_answer_tag(text)
    return text.strip() if tagged is None else tagged


def exact_match(prediction: str, golden_answers: Iterable[str]) -> float:
    """1.0 when the normalised prediction equals a normalised gold answer, else 0.0."""
    normalized = normalize_answer(prediction)
    return float(any(normalized == normalize_answer(g) for g in golden_answers))


def f1_score(prediction: str, golden_answers: Iterable[str]) -> float:
    """The best token-level F1 between the prediction and any gold answer (0.0 when there is none)."""
    return max((_f1(prediction, gold) for gold in golden_answers), default=0.0)


def _f1(prediction: str, gold: str) -> float:
    pred_tokens, gold_tokens = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def golden_answers(task: Task) -> list[str]:
    """A task's gold answers: ``data["golden_answers"]`` if present, else ``answer`` (a str or a list)."""
    golds: Any = task.data.get("golden_answers", task.answer)
    if golds is None:
        return []
    if isinstance(golds, str | int | float):
        golds = [golds]
    return [str(g) for g in golds]


class QAVerifier(Verifier):
    """Rewards the final answer by exact match (``mode="em"``, the default) or token F1 (``mode="f1"``).

    ``passed`` is exact match in both modes; ``details`` carries both scores, the extracted prediction and
    the gold answers, so logs show why an answer scored what it did.
    """

    name = "qa"

    def __init__(self, mode: Mode = "em"):
        if mode not in ("em", "f1"):
            raise ValueError(f"mode must be 'em' or 'f1', got {mode!r}")
        self.mode = mode

    def verify(self, task: Task, answer: str, trajectory: Trajectory | None = None) -> Verdict:
        golds = golden_answers(task)
        if not golds:
            raise ValueError(f"task {task.id!r} has no gold answers")
        prediction = extract_answer(answer)
        em, f1 = exact_match(prediction, golds), f1_score(prediction, golds)
        return Verdict(
            reward=em if self.mode == "em" else f1,
            passed=em == 1.0,
            details={
                "mode": self.mode,
                "em": em,
                "f1": f1,
                "prediction": prediction,
                "golden_answers": golds,
            },
        )
