"""Question templates over a world database, with their gold SQL, by level.

A template reads the database's tables and column kinds (``toolgym.sql.world_schema``), draws what to ask
about from the database's own values (a category value that occurs, a threshold between real values, a row's
name), and writes the question and its gold query; it raises ``NoFit`` when the database has nothing of the
kind it needs. A drawn question is kept only if its gold result is a real answer: 1 to ``MAX_ROWS`` rows, no
NULL, no zero count, and for a ranking no tie at the cut (so the rows it orders, and the ones ``LIMIT`` keeps,
are the only right ones). Otherwise another template or value is drawn.

=====  ==================================================================================================
level  templates
=====  ==================================================================================================
1      filter by a category or a number, count, MIN/MAX/AVG/SUM with a filter, top-k, count in a year
2      join and filter by the parent's category or name, count or aggregate per parent, GROUP BY counts
       and averages, counts per parent
3      HAVING COUNT, above the average (a nested query), anti-join (NOT IN), argmax over groups, two joins
=====  ==================================================================================================
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from toolgym.sql.world_schema import DatabaseSpec, SharedConnection, WorldColumn, WorldTable

MAX_ROWS = 20
_ATTEMPTS = 60
_NUMERIC = ("int", "real", "year")
_AGGREGATES = {"MAX": "highest", "MIN": "lowest", "AVG": "average", "SUM": "total"}


@dataclass(frozen=True)
class Question:
    text: str
    sql: str
    template: str


Link = tuple[WorldTable, WorldColumn, WorldTable]


class _Db:
    """One database as the templates see it: its tables, links and (cached) column values."""

    def __init__(self, spec: DatabaseSpec, con: SharedConnection):
        self.spec, self.con = spec, con
        self._values: dict[tuple[str, str], list[Any]] = {}

    def rows(self, sql: str) -> list[tuple]:
        return self.con.rows(sql)

    def values(self, table: WorldTable, column: WorldColumn) -> list[Any]:
        key = (table.name, column.name)
        if key not in self._values:
            rows = self.rows(f"SELECT {column.name} FROM {table.name} ORDER BY 1")
            self._values[key] = [r[0] for r in rows]
        return self._values[key]

    def tables(self, need: Callable[[WorldTable], object]) -> list[WorldTable]:
        return [t for t in self.spec.tables if need(t)]

    def links(self, need: Callable[[Link], object] = lambda link: True) -> list[Link]:
        return [link for link in self.spec.links() if need(link)]

    def shared_parent(self, child: WorldTable, parent: WorldTable) -> bool:
        """True if ``child`` points at ``parent`` through more than one column (a flight's two airports)."""
        return sum(1 for c in child.of_kind("fk") if c.spec.ref == parent.key) > 1


def _lit(value: Any) -> str:
    return "'" + value.replace("'", "''") + "'" if isinstance(value, str) else repr(value)


def _said(value: Any) -> str:
    return f"'{value}'" if isinstance(value, str) else str(value)


def _has(child: WorldTable, fk: WorldColumn, parent: WorldTable, db: _Db) -> str:
    """How a question says that a parent row "has" child rows through ``fk``."""
    return f"{child.plural} as their {fk.role}" if db.shared_parent(child, parent) else child.plural


class NoFit(Exception):
    """The template has nothing to ask on this database (no table of the kind it needs, a tie at a cut)."""


def _pick(rng: random.Random, options: list) -> Any:
    if not options:
        raise NoFit
    return rng.choice(options)


def _parent_link(rng: random.Random, db: _Db) -> Link:
    """A foreign key whose parent rows have names: (child table, fk column, parent table)."""
    return _pick(rng, db.links(lambda lk: lk[2].label is not None))


def _label(table: WorldTable) -> WorldColumn:
    """The name column of a table chosen for having one (``_parent_link``'s parent)."""
    label = table.label
    assert label is not None, table.name
    return label


# ------------------------------------------------------------------------------------------ level 1


def filter_category(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.label and t.of_kind("category")))
    cat = rng.choice(table.of_kind("category"))
    value = rng.choice(db.values(table, cat))
    return Question(
        f"List the {table.label.phrase} of every {table.singular} whose {cat.phrase} is {_said(value)}.",
        f"SELECT {table.label.name} FROM {table.name} WHERE {cat.name} = {_lit(value)}",
        "filter_category",
    )


def filter_number(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.label and t.of_kind(*_NUMERIC)))
    num = rng.choice(table.of_kind(*_NUMERIC))
    values = db.values(table, num)
    keep = rng.randint(1, min(12, len(values) - 1))
    high = rng.random() < 0.6
    threshold = values[-keep - 1] if high else values[keep]
    if num.kind == "year":
        words, op = ("after", ">") if high else ("before", "<")
    else:
        words, op = ("greater than", ">") if high else ("less than", "<")
    return Question(
        f"List the {table.label.phrase} of every {table.singular} whose {num.phrase} is {words} {threshold}.",
        f"SELECT {table.label.name} FROM {table.name} WHERE {num.name} {op} {threshold!r}",
        "filter_number",
    )


def count_category(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.of_kind("category")))
    cat = rng.choice(table.of_kind("category"))
    value = rng.choice(db.values(table, cat))
    return Question(
        f"How many {table.plural} have the {cat.phrase} {_said(value)}?",
        f"SELECT COUNT(*) FROM {table.name} WHERE {cat.name} = {_lit(value)}",
        "count_category",
    )


def aggregate_filtered(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.of_kind("category") and t.of_kind("int", "real")))
    cat, num = rng.choice(table.of_kind("category")), rng.choice(table.of_kind("int", "real"))
    value = rng.choice(db.values(table, cat))
    fn = rng.choice(list(_AGGREGATES))
    return Question(
        f"What is the {_AGGREGATES[fn]} {num.phrase} of the {table.plural} whose {cat.phrase} is "
        f"{_said(value)}?",
        f"SELECT {fn}({num.name}) FROM {table.name} WHERE {cat.name} = {_lit(value)}",
        "aggregate_filtered",
    )


def top_k(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.label and t.of_kind(*_NUMERIC)))
    num = rng.choice(table.of_kind(*_NUMERIC))
    k = rng.randint(2, 5)
    desc = rng.random() < 0.6
    order = "DESC" if desc else "ASC"
    ranked = db.rows(f"SELECT {num.name} FROM {table.name} ORDER BY {num.name} {order} LIMIT {k + 1}")
    cut = [r[0] for r in ranked]
    if len(set(cut)) != len(cut):  # a tie inside the top k or at the cut: the answer would not be unique
        raise NoFit
    most = "highest" if desc else "lowest"
    return Question(
        f"List the {table.label.phrase} and the {num.phrase} of the {k} {table.plural} with the {most} "
        f"{num.phrase}, {most} first.",
        f"SELECT {table.label.name}, {num.name} FROM {table.name} ORDER BY {num.name} {order} LIMIT {k}",
        "top_k",
    )


def count_in_year(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.of_kind("date", "year")))
    col = rng.choice(table.of_kind("date", "year"))
    values = db.values(table, col)
    year = int(str(rng.choice(values))[:4])
    if col.kind == "year":
        return Question(
            f"How many {table.plural} have the {col.phrase} {year}?",
            f"SELECT COUNT(*) FROM {table.name} WHERE {col.name} = {year}",
            "count_in_year",
        )
    return Question(
        f"How many {table.plural} have a {col.phrase} in {year}?",
        f"SELECT COUNT(*) FROM {table.name} WHERE {col.name} BETWEEN '{year}-01-01' AND '{year}-12-31'",
        "count_in_year",
    )


# ------------------------------------------------------------------------------------------ level 2


def join_filter(rng: random.Random, db: _Db) -> Question:
    link = _pick(rng, db.links(lambda lk: lk[0].label and (lk[2].of_kind("category") or lk[2].label)))
    child, fk, parent = link
    lab = child.label
    by_name = parent.label is not None and (not parent.of_kind("category") or rng.random() < 0.5)
    if by_name:
        name = rng.choice(db.values(parent, parent.label))
        text = f"List the {lab.phrase} of every {child.singular} whose {fk.role} is {_said(name)}."
        where = f"T2.{parent.label.name} = {_lit(name)}"
    else:
        cat = rng.choice(parent.of_kind("category"))
        value = rng.choice(db.values(parent, cat))
        text = (
            f"List the {lab.phrase} of every {child.singular} whose {fk.role} has the {cat.phrase} "
            f"{_said(value)}."
        )
        where = f"T2.{cat.name} = {_lit(value)}"
    return Question(
        text,
        f"SELECT T1.{lab.name} FROM {child.name} AS T1 JOIN {parent.name} AS T2 ON T1.{fk.name} = T2.id "
        f"WHERE {where}",
        "join_filter",
    )


def join_count(rng: random.Random, db: _Db) -> Question:
    child, fk, parent = _parent_link(rng, db)
    lab = _label(parent)
    name = rng.choice(db.values(parent, lab))
    return Question(
        f"How many {child.plural} have {_said(name)} as their {fk.role}?",
        f"SELECT COUNT(*) FROM {child.name} AS T1 JOIN {parent.name} AS T2 ON T1.{fk.name} = T2.id "
        f"WHERE T2.{lab.name} = {_lit(name)}",
        "join_count",
    )


def join_aggregate(rng: random.Random, db: _Db) -> Question:
    link = _pick(rng, db.links(lambda lk: lk[2].label is not None and lk[0].of_kind("int", "real")))
    child, fk, parent = link
    num = rng.choice(child.of_kind("int", "real"))
    name = rng.choice(db.values(parent, parent.label))
    fn = rng.choice(list(_AGGREGATES))
    return Question(
        f"What is the {_AGGREGATES[fn]} {num.phrase} of the {child.plural} whose {fk.role} is {_said(name)}?",
        f"SELECT {fn}(T1.{num.name}) FROM {child.name} AS T1 JOIN {parent.name} AS T2 "
        f"ON T1.{fk.name} = T2.id WHERE T2.{parent.label.name} = {_lit(name)}",
        "join_aggregate",
    )


def group_count(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.of_kind("category")))
    cat = rng.choice(table.of_kind("category"))
    return Question(
        f"For each {cat.phrase}, how many {table.plural} are there? Give each {cat.phrase} with its count.",
        f"SELECT {cat.name}, COUNT(*) FROM {table.name} GROUP BY {cat.name}",
        "group_count",
    )


def group_average(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.of_kind("category") and t.of_kind("int", "real")))
    cat, num = rng.choice(table.of_kind("category")), rng.choice(table.of_kind("int", "real"))
    return Question(
        f"For each {cat.phrase}, what is the average {num.phrase} of the {table.plural}? Give each "
        f"{cat.phrase} with its average.",
        f"SELECT {cat.name}, AVG({num.name}) FROM {table.name} GROUP BY {cat.name}",
        "group_average",
    )


def count_per_parent(rng: random.Random, db: _Db) -> Question:
    child, fk, parent = _parent_link(rng, db)
    lab = _label(parent)
    return Question(
        f"For each {parent.singular} that has at least one of them, how many {_has(child, fk, parent, db)} "
        f"does it have? Give the {parent.singular}'s {lab.phrase} with the count.",
        f"SELECT T2.{lab.name}, COUNT(*) FROM {child.name} AS T1 JOIN {parent.name} AS T2 "
        f"ON T1.{fk.name} = T2.id GROUP BY T2.id",
        "count_per_parent",
    )


# ------------------------------------------------------------------------------------------ level 3


def having_count(rng: random.Random, db: _Db) -> Question:
    child, fk, parent = _parent_link(rng, db)
    counts = [r[0] for r in db.rows(f"SELECT COUNT(*) FROM {child.name} GROUP BY {fk.name} ORDER BY 1")]
    if len(counts) < 2:
        raise NoFit
    n = counts[-rng.randint(2, min(len(counts), MAX_ROWS))]
    lab = _label(parent)
    return Question(
        f"Which {parent.plural} have more than {n} {_has(child, fk, parent, db)}? Give their {lab.phrase}.",
        f"SELECT T2.{lab.name} FROM {parent.name} AS T2 JOIN {child.name} AS T1 ON T1.{fk.name} = T2.id "
        f"GROUP BY T2.id HAVING COUNT(*) > {n}",
        "having_count",
    )


def above_average(rng: random.Random, db: _Db) -> Question:
    table = _pick(rng, db.tables(lambda t: t.label and t.of_kind("category") and t.of_kind("int", "real")))
    cat, num = rng.choice(table.of_kind("category")), rng.choice(table.of_kind("int", "real"))
    value = rng.choice(db.values(table, cat))
    return Question(
        f"List the {table.label.phrase} of every {table.singular} whose {cat.phrase} is {_said(value)} and "
        f"whose {num.phrase} is above the average {num.phrase} of all {table.plural}.",
        f"SELECT {table.label.name} FROM {table.name} WHERE {cat.name} = {_lit(value)} AND {num.name} > "
        f"(SELECT AVG({num.name}) FROM {table.name})",
        "above_average",
    )


def without_any(rng: random.Random, db: _Db) -> Question:
    child, fk, parent = _parent_link(rng, db)
    lab = _label(parent)
    return Question(
        f"Which {parent.plural} have no {_has(child, fk, parent, db)}? Give their {lab.phrase}.",
        f"SELECT {lab.name} FROM {parent.name} WHERE id NOT IN (SELECT {fk.name} FROM {child.name})",
        "without_any",
    )


def most(rng: random.Random, db: _Db) -> Question:
    child, fk, parent = _parent_link(rng, db)
    top = db.rows(f"SELECT COUNT(*) FROM {child.name} GROUP BY {fk.name} ORDER BY 1 DESC LIMIT 2")
    if len(top) < 2 or top[0][0] == top[1][0]:  # a tie for the most: no single answer
        raise NoFit
    lab = _label(parent)
    has = _has(child, fk, parent, db).replace("as their", "as its")
    return Question(
        f"Which {parent.singular} has the most {has}? Give the {parent.singular}'s {lab.phrase} and the "
        f"number of {child.plural}.",
        f"SELECT T2.{lab.name}, COUNT(*) FROM {child.name} AS T1 JOIN {parent.name} AS T2 "
        f"ON T1.{fk.name} = T2.id GROUP BY T2.id ORDER BY COUNT(*) DESC LIMIT 1",
        "most",
    )


def two_joins(rng: random.Random, db: _Db) -> Question:
    chains = [
        (low, mid)
        for low in db.links()
        for mid in db.links(lambda lk: lk[2].of_kind("category"))
        if low[2] is mid[0]
    ]
    (child, fk1, middle), (_, fk2, parent) = _pick(rng, chains)
    cat = rng.choice(parent.of_kind("category"))
    value = rng.choice(db.values(parent, cat))
    return Question(
        f"How many {child.plural} have a {fk1.role} whose {fk2.role} has the {cat.phrase} {_said(value)}?",
        f"SELECT COUNT(*) FROM {child.name} AS T1 JOIN {middle.name} AS T2 ON T1.{fk1.name} = T2.id "
        f"JOIN {parent.name} AS T3 ON T2.{fk2.name} = T3.id WHERE T3.{cat.name} = {_lit(value)}",
        "two_joins",
    )


TEMPLATES: dict[int, tuple[Callable[[random.Random, _Db], Question], ...]] = {
    1: (filter_category, filter_number, count_category, aggregate_filtered, top_k, count_in_year),
    2: (join_filter, join_count, join_aggregate, group_count, group_average, count_per_parent),
    3: (having_count, above_average, without_any, most, two_joins),
}


def draw_question(rng: random.Random, spec: DatabaseSpec, con: SharedConnection, level: int) -> Question:
    """A question of ``level`` on the database whose gold result is a real answer (see the module
    docstring); after many failed draws (a database too small for the level), a count of a table."""
    db = _Db(spec, con)
    for _ in range(_ATTEMPTS):
        try:
            question = rng.choice(TEMPLATES[level])(rng, db)
        except NoFit:
            continue
        if _is_answer(db.rows(question.sql)):
            return question
    table = rng.choice(spec.tables)
    return Question(f"How many {table.plural} are there?", f"SELECT COUNT(*) FROM {table.name}", "count_all")


def _is_answer(rows: list[tuple]) -> bool:
    if not 1 <= len(rows) <= MAX_ROWS or any(v is None for row in rows for v in row):
        return False
    return rows != [(0,)]
