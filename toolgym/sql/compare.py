"""Execution match: whether a submitted query's result is the gold query's (Spider's and BIRD's execution
accuracy), and reading the SQL out of a final answer.

Two results match when they hold the same rows as multisets (duplicates count), or in the same order when
the gold query's outermost statement has ``ORDER BY`` (an ordering the question asked for). Numbers compare
with a relative tolerance (``AVG`` computed in another order, ``1`` vs ``1.0``); text and blobs compare
exactly. Column names never matter, and neither does the order of the columns: a query that selects
``price, name`` where the gold selects ``name, price`` gives the same answer (as Spider's test-suite
evaluation also accepts).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from typing import Any

DEFAULT_REL_TOL = 1e-6
#: past this many columns only the given column order is tried
MAX_PERMUTED_COLUMNS = 8

_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
# tokens that can hide an ORDER BY or a parenthesis: strings, quoted names, comments
_OPAQUE = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|`[^`]*`|\[[^\]]*\]|--[^\n]*|/\*.*?(?:\*/|$)", re.DOTALL
)


def extract_sql(answer: str) -> str:
    """The SQL in a final answer: the last fenced block if there is one (```sql ... ```), else the whole text,
    without surrounding whitespace and trailing semicolons. Empty if there is nothing."""
    fenced = _FENCE.findall(answer)
    text = fenced[-1] if fenced else answer
    return text.strip().rstrip(";").strip()


def has_outer_order_by(sql: str) -> bool:
    """Whether the outermost statement sorts its result (``ORDER BY`` outside every parenthesis), which makes
    the order of its rows part of the answer."""
    plain = _OPAQUE.sub(" ", sql)
    depth = 0
    for token in re.finditer(r"[()]|\border\s+by\b", plain, re.IGNORECASE):
        text = token.group()
        if text == "(":
            depth += 1
        elif text == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            return True
    return False


def results_match(
    gold: Sequence[Sequence[Any]],
    pred: Sequence[Sequence[Any]],
    *,
    ordered: bool,
    rel_tol: float = DEFAULT_REL_TOL,
) -> tuple[bool, str]:
    """(match, why not) for two results' rows (see the module docstring)."""
    if len(gold) != len(pred):
        return False, f"expected {len(gold)} row(s), got {len(pred)}"
    if not gold:
        return True, ""
    width = len(gold[0])
    if len(pred[0]) != width:
        return False, f"expected {width} column(s), got {len(pred[0])}"
    gold_cols, pred_cols = list(zip(*gold)), list(zip(*pred))
    orders = (
        _column_orders(gold_cols, pred_cols, rel_tol)
        if width <= MAX_PERMUTED_COLUMNS
        else [tuple(range(width))]
    )
    for order in orders:
        arranged = [tuple(row[k] for k in order) for row in pred]
        if _rows_equal(gold, arranged, ordered, rel_tol):
            return True, ""
    for order in orders if ordered else ():
        if _rows_equal(gold, [tuple(row[k] for k in order) for row in pred], False, rel_tol):
            return False, "the right rows in the wrong order"
    return False, "different values"


def _column_orders(
    gold_cols: list[tuple[Any, ...]], pred_cols: list[tuple[Any, ...]], rel_tol: float
) -> list[tuple[int, ...]]:
    """The column orders of ``pred`` worth trying: each gold column mapped to a predicted column holding the
    same values (as a multiset), the identity first."""
    sorted_pred = [sorted(c, key=sort_key) for c in pred_cols]
    candidates = [
        [k for k, p in enumerate(sorted_pred) if _values_equal(sorted(g, key=sort_key), p, rel_tol)]
        for g in gold_cols
    ]
    identity = tuple(range(len(gold_cols)))
    bijections = (order for order in itertools.product(*candidates) if len(set(order)) == len(order))
    orders = list(itertools.islice(bijections, 64))
    return sorted(orders, key=lambda o: o != identity)


def _rows_equal(
    gold: Sequence[Sequence[Any]], pred: Sequence[Sequence[Any]], ordered: bool, rel_tol: float
) -> bool:
    if not ordered:
        gold, pred = sorted(gold, key=_row_key), sorted(pred, key=_row_key)
    return all(_values_equal(g, p, rel_tol) for g, p in zip(gold, pred))


def _values_equal(a: Sequence[Any], b: Sequence[Any], rel_tol: float) -> bool:
    return len(a) == len(b) and all(value_equal(x, y, rel_tol) for x, y in zip(a, b))


def value_equal(x: Any, y: Any, rel_tol: float = DEFAULT_REL_TOL) -> bool:
    """SQL values: numbers within ``rel_tol`` (or 1e-9 absolute, for values near 0), anything else exactly."""
    if _is_number(x) and _is_number(y):
        return math.isclose(x, y, rel_tol=rel_tol, abs_tol=1e-9) or x == y
    return type(x) is type(y) and x == y


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def sort_key(value: Any) -> tuple:
    """A total order over SQL values that puts numbers equal within the tolerance next to each other."""
    if value is None:
        return (0, 0)
    if _is_number(value):
        return (1, float(f"{float(value):.6g}") if math.isfinite(value) else float(value))
    if isinstance(value, str):
        return (2, value)
    return (3, bytes(value))


def _row_key(row: Sequence[Any]) -> tuple:
    return tuple(sort_key(v) for v in row)
