"""Execution match: multisets, order when the gold sorts, numeric tolerance, column order, and reading the SQL
out of an answer."""

import pytest

from toolgym.sql.compare import extract_sql, has_outer_order_by, results_match


@pytest.mark.parametrize(
    ("answer", "sql"),
    [
        ("SELECT 1", "SELECT 1"),
        ("  SELECT 1;  ", "SELECT 1"),
        ("```sql\nSELECT name FROM t;\n```", "SELECT name FROM t"),
        ("Here it is:\n```\nSELECT 2\n```", "SELECT 2"),
        ("first ```sql\nSELECT 1\n``` then ```sql\nSELECT 3\n```", "SELECT 3"),
        ("", ""),
        (" ; ", ""),
    ],
)
def test_extract_sql(answer, sql):
    assert extract_sql(answer) == sql


@pytest.mark.parametrize(
    ("sql", "ordered"),
    [
        ("SELECT a FROM t ORDER BY a", True),
        ("select a from t order  by a desc limit 3", True),
        ("SELECT a FROM (SELECT a FROM t ORDER BY a) AS s", False),
        ("SELECT a FROM t WHERE b IN (SELECT b FROM u ORDER BY b LIMIT 2)", False),
        ("SELECT 'order by' FROM t", False),
        ('SELECT "order by" FROM t -- order by a', False),
        ("SELECT a FROM t /* ORDER BY a */", False),
        ("WITH x AS (SELECT a FROM t ORDER BY a) SELECT a FROM x ORDER BY a", True),
        ("SELECT [order by] FROM t", False),
    ],
)
def test_outer_order_by(sql, ordered):
    assert has_outer_order_by(sql) is ordered


def test_multisets_ignore_row_order_but_count_duplicates():
    gold = [("a", 1), ("b", 2), ("b", 2)]
    assert results_match(gold, [("b", 2), ("a", 1), ("b", 2)], ordered=False) == (True, "")
    ok, why = results_match(gold, [("a", 1), ("b", 2), ("a", 1)], ordered=False)
    assert not ok and why == "different values"
    ok, why = results_match(gold, [("a", 1), ("b", 2)], ordered=False)
    assert not ok and "expected 3 row(s), got 2" in why


def test_order_matters_when_the_gold_sorts():
    gold = [("a",), ("b",), ("c",)]
    assert results_match(gold, [("a",), ("b",), ("c",)], ordered=True)[0]
    ok, why = results_match(gold, [("c",), ("b",), ("a",)], ordered=True)
    assert not ok and why == "the right rows in the wrong order"


def test_numbers_compare_with_tolerance_and_int_equals_float():
    assert results_match([(1,)], [(1.0,)], ordered=False)[0]
    assert results_match([(0.1 + 0.2,)], [(0.3,)], ordered=False)[0]
    assert results_match([(470.57842465753413,)], [(470.578424657534,)], ordered=False)[0]
    assert not results_match([(470.57,)], [(470.58,)], ordered=False)[0]
    assert not results_match([("1",)], [(1,)], ordered=False)[0]  # text is not a number
    assert results_match([(None, "x")], [(None, "x")], ordered=False)[0]
    assert not results_match([(None,)], [(0,)], ordered=False)[0]


def test_column_order_does_not_matter_but_column_count_does():
    gold = [("Joe", 52), ("Rose", 41)]
    assert results_match(gold, [(41, "Rose"), (52, "Joe")], ordered=False)[0]
    assert results_match(gold, [(52, "Joe"), (41, "Rose")], ordered=True)[0]
    ok, why = results_match(gold, [("Joe", 52, 1), ("Rose", 41, 2)], ordered=False)
    assert not ok and "expected 2 column(s), got 3" in why
    # the columns hold the same values but the pairs differ: no permutation makes them equal
    assert not results_match([(1, 2), (3, 4)], [(1, 4), (3, 2)], ordered=False)[0]


def test_identical_columns_do_not_explode():
    gold = [tuple([7] * 8)] * 3
    assert results_match(gold, [tuple([7] * 8)] * 3, ordered=False)[0]
    assert not results_match(gold, [tuple([7] * 7 + [8])] * 3, ordered=False)[0]


def test_empty_results_match():
    assert results_match([], [], ordered=False) == (True, "")
