"""A procedural, uncontaminated database world for text-to-SQL: seeded SQLite databases and questions with
gold SQL.

Why: Spider and BIRD are public, so their questions and queries sit in pre-training data; a model can recall
a gold query instead of reading the schema. Here database ``i`` of world ``seed`` is drawn from a seed: a
domain (``toolgym.sql.world_domains``: shop, school, library, clinic, airline, league), a connected set of
3-8 of its tables closed under foreign keys, a name for each table and column among variants, row counts and
every value (names are invented words, so nothing is guessable). Questions come from templates
(``toolgym.sql.world_questions``) by level: 1 filters, counts, aggregates and top-k on one table; 2 joins and
GROUP BY; 3 HAVING, nested queries, anti-joins, argmax over groups and two-hop joins.

Each database is written once to the cache (``$TOOLGYM_CACHE/sql-world-v<version>/<db_id>.sqlite``, built
on first use, atomically, by whichever process gets there first) and then only read: by the question
generator here, and by the sql tool and the verifier through the SQL sandbox. The world is a pure function of
``(seed, num_databases)`` and the version, so two processes or machines agree on every database and question.
"""

from __future__ import annotations

import datetime
import os
import random
import sqlite3
import tempfile
import threading
from functools import partial
from pathlib import Path

from toolgym.core.task import ProceduralSource, Task
from toolgym.sql.compare import has_outer_order_by
from toolgym.sql.databases import DatabaseCatalog, describe_database, open_read_only
from toolgym.sql.world_domains import DOMAINS, Table
from toolgym.sql.world_questions import draw_question
from toolgym.sql.world_schema import DatabaseSpec, SharedConnection, WorldColumn, WorldTable
from toolgym.util.paths import cache_root
from toolgym.util.world_vocabulary import ADJECTIVES, NOUNS, invented_word, splitmix

#: bump when generation changes: the cache directory is named after it, so stale files are never reused
WORLD_VERSION = 1
DEFAULT_NUM_DATABASES = 64
LEVELS = (1, 2, 3)
_DOMAIN_NAMES = sorted(DOMAINS)


class SqlWorld(DatabaseCatalog):
    """``num_databases`` seeded databases and the questions over them (see the module docstring)."""

    def __init__(
        self, num_databases: int = DEFAULT_NUM_DATABASES, seed: int = 0, cache_dir: str | Path | None = None
    ):
        if not 1 <= num_databases <= 100_000:
            raise ValueError(f"num_databases must be between 1 and 100000, got {num_databases}")
        self.num_databases = num_databases
        self.seed = seed
        self._key = splitmix(0x5A17 ^ splitmix(seed))
        self._dir = Path(cache_dir) if cache_dir is not None else cache_root() / f"sql-world-v{WORLD_VERSION}"
        self._root: Path | None = None

    # -- the catalog ---------------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        if self._root is None:  # (made and resolved once: every query asks)
            try:
                self._dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise OSError(
                    f"cannot make the SQL world's database folder {self._dir} ({exc.strerror}): set "
                    "TOOLGYM_CACHE to a writable folder"
                ) from exc
            self._root = self._dir.resolve()
        return self._root

    def db_id(self, index: int) -> str:
        return f"w{self.seed}-{index}"

    def index_of(self, db_id: str) -> int:
        prefix, _, index = db_id.rpartition("-")
        if prefix != f"w{self.seed}" or not index.isdigit() or int(index) >= self.num_databases:
            raise FileNotFoundError(
                f"no database {db_id!r} in the SQL world of seed {self.seed} ({self.num_databases} databases)"
            )
        return int(index)

    def path(self, db_id: str) -> Path:
        """The database's file, built into the cache first if it is not there yet."""
        index = self.index_of(db_id)
        final = self.root / f"{db_id}.sqlite"
        if not final.exists():
            self._build(self.spec(index), final)
        return final

    # -- databases -----------------------------------------------------------------------------------------

    def spec(self, index: int) -> DatabaseSpec:
        """Database ``index``'s domain, tables and names (deterministic in the world and the index)."""
        rng = random.Random(splitmix(self._key ^ (index * 0x9E37)))
        domain = _DOMAIN_NAMES[rng.randrange(len(_DOMAIN_NAMES))]
        templates = _connected_tables(rng, DOMAINS[domain])
        tables = []
        for template in templates:
            name, singular, plural = rng.choice(template.names)
            columns = tuple(WorldColumn(rng.choice(c.names), c) for c in template.columns)
            rows = rng.randint(*template.rows)
            tables.append(WorldTable(template.key, name, singular, plural, columns, rows))
        return DatabaseSpec(self.db_id(index), domain, tuple(tables), rng.randrange(2**63))

    def _build(self, spec: DatabaseSpec, final: Path) -> None:
        """Write the database to a temporary file and rename it into place (another process may race us to
        the same file; both write the same bytes, the rename is atomic)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", dir=final.parent)
        os.close(fd)
        try:
            con = sqlite3.connect(tmp)
            try:
                _fill(con, spec)
                con.commit()
            finally:
                con.close()
            os.chmod(tmp, 0o644)
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def connection(self, db_id: str) -> SharedConnection:
        """The question generator's read-only connection to a database: one per file per process, shared by
        every env (a trainer makes an env per concurrent episode)."""
        path = str(self.path(db_id))
        with _CONNECTIONS_LOCK:
            con = _CONNECTIONS.get(path)
            if con is None:
                con = _CONNECTIONS[path] = SharedConnection(open_read_only(path))
        return con

    # -- questions -----------------------------------------------------------------------------------------

    def tasks(self, levels: int | tuple[int, ...] = LEVELS, sample_rows: int = 0) -> ProceduralSource:
        """The world's questions as a task source (task ``s`` is ``task(s, levels)``)."""
        allowed = check_levels(levels)
        name = f"sqlworld-s{self.seed}-n{self.num_databases}-L{''.join(map(str, allowed))}"
        if sample_rows:
            name += f"-r{sample_rows}"
        return ProceduralSource(name, partial(self.task, levels=allowed, sample_rows=sample_rows))

    def task(self, seed: int, levels: int | tuple[int, ...] = LEVELS, sample_rows: int = 0) -> Task:
        """The question for ``seed``: a database, a level and a template drawn from the seed, instantiated on
        the database's values; deterministic in ``(world, seed, levels)``."""
        allowed = check_levels(levels)
        rng = random.Random(splitmix(self._key ^ 0xD1CE ^ int(seed)))
        index = rng.randrange(self.num_databases)
        level = rng.choice(allowed)
        spec = self.spec(index)
        question = draw_question(rng, spec, self.connection(spec.db_id), level)
        schema = describe_database(self.path(spec.db_id), sample_rows)
        return Task(
            id=str(seed),
            prompt=sql_prompt(question.text, schema),
            answer=question.sql,
            data={
                "db_id": spec.db_id,
                "order_matters": has_outer_order_by(question.sql),
                "level": level,
                "template": question.template,
            },
        )


_CONNECTIONS: dict[str, SharedConnection] = {}
_CONNECTIONS_LOCK = threading.Lock()


def sql_prompt(question: str, schema: str, evidence: str | None = None) -> str:
    """The task prompt every SQL task shows: the question, the hint if there is one, the schema."""
    hint = f"\n\nHint: {evidence.strip()}" if evidence and evidence.strip() else ""
    return (
        f"{question.strip()}{hint}\n\nThe SQLite database has these tables:\n\n{schema}\n\n"
        "Explore the data with the sql tool if it helps, then give one SQL query that answers the question "
        "as your final answer."
    )


def check_levels(levels: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    allowed = (levels,) if isinstance(levels, int) else tuple(levels)
    if not allowed or any(level not in LEVELS for level in allowed):
        raise ValueError(f"level must be 1, 2 or 3 (or several of them), got {levels!r}")
    return allowed


def _connected_tables(rng: random.Random, domain: tuple[Table, ...]) -> list[Table]:
    """3-8 tables of the domain, connected through foreign keys and closed under them (a table's parents
    are always in), in the domain's order (parents before children)."""
    by_key = {t.key: t for t in domain}

    def closure(key: str) -> set[str]:
        out, todo = set(), [key]
        while todo:
            k = todo.pop()
            if k not in out:
                out.add(k)
                todo += [c.ref for c in by_key[k].columns if c.kind == "fk"]
        return out

    def linked(key: str, chosen: set[str]) -> bool:
        refs = {c.ref for c in by_key[key].columns if c.kind == "fk"}
        return bool(refs & chosen) or any(key in {c.ref for c in by_key[k].columns} for k in chosen)

    target = rng.randint(3, min(8, len(domain)))
    chosen = closure(rng.choice([t.key for t in domain]))
    candidates = [t.key for t in domain]
    rng.shuffle(candidates)
    while len(chosen) < target:  # grow by the linked table that adds the fewest tables (first in a shuffle)
        growth = [(len(closure(k) - chosen), i, k) for i, k in enumerate(candidates) if k not in chosen]
        growth = [g for g in growth if linked(g[2], chosen)]
        if not growth:
            break
        chosen |= closure(min(growth)[2])
    return [t for t in domain if t.key in chosen]


# ------------------------------------------------------------------------------------------ values


def _fill(con: sqlite3.Connection, spec: DatabaseSpec) -> None:
    rng = random.Random(spec.seed)
    pools: dict[str, list[str]] = {}
    ids: dict[str, list[int]] = {}
    for create in spec.create_statements():
        con.execute(create)
    for table in spec.tables:  # parents come first (the domain's order)
        columns = [_column_values(rng, c, table.rows, pools, ids) for c in table.columns]
        names = ", ".join(["id", *(c.name for c in table.columns)])
        marks = ", ".join("?" * (len(table.columns) + 1))
        rows = [(i + 1, *(col[i] for col in columns)) for i in range(table.rows)]
        con.executemany(f"INSERT INTO {table.name} ({names}) VALUES ({marks})", rows)
        ids[table.key] = [r[0] for r in rows]


def _column_values(
    rng: random.Random, column: WorldColumn, n: int, pools: dict[str, list[str]], ids: dict[str, list[int]]
) -> list:
    spec = column.spec
    lo, hi = spec.span
    if spec.kind == "label":
        return _labels(rng, spec.style, n)
    if spec.kind == "category":
        values = list(spec.values)
        if values[0].startswith("@"):  # invented cities, countries, ... shared by the database's tables
            values = pools.setdefault(values[0], _invented(rng, values[0], rng.randint(4, 7)))
        weights = [rng.uniform(0.3, 3.0) for _ in values]
        return rng.choices(values, weights, k=n)
    if spec.kind == "fk":
        parents = ids[spec.ref]
        active = rng.sample(parents, max(1, round(len(parents) * rng.uniform(0.7, 0.95))))
        weights = [rng.uniform(0.2, 3.0) for _ in active]
        return rng.choices(active, weights, k=n)
    if spec.kind in ("int", "year"):
        return [rng.randint(int(lo), int(hi)) for _ in range(n)]
    if spec.kind == "real":
        return [round(rng.uniform(lo, hi), 2) for _ in range(n)]
    first = datetime.date(int(lo), 1, 1)
    days = (datetime.date(int(hi), 12, 31) - first).days
    return [(first + datetime.timedelta(days=rng.randrange(days + 1))).isoformat() for _ in range(n)]


def _invented(rng: random.Random, kind: str, n: int) -> list[str]:
    syllables = {"@city": 3, "@country": 2, "@place": 2, "@company": 2}[kind]
    suffix = {"@place": " Hall", "@company": " Works"}.get(kind, "")
    return _unique(rng, n, lambda: invented_word(rng.randrange(10**9), syllables) + suffix)


def _labels(rng: random.Random, style: str, n: int) -> list[str]:
    kind, _, arg = style.partition(":")
    if kind == "person":
        return _unique(rng, n, lambda: f"{invented_word(rng.randrange(10**9), 2, coda=False)} "
                       f"{invented_word(rng.randrange(10**9), 2)}")  # fmt: skip
    if kind == "company":
        kinds = arg.split(",")
        return _unique(rng, n, lambda: f"{invented_word(rng.randrange(10**9), 2)} {rng.choice(kinds)}")
    if kind == "pair":
        return _unique(rng, n, lambda: f"{rng.choice(ADJECTIVES)} {rng.choice(NOUNS)}")
    if kind == "place":
        return _unique(rng, n, lambda: invented_word(rng.randrange(10**9), 3))
    if kind == "code":
        return _unique(rng, n, lambda: f"{arg}{rng.randint(100, 9999)}")
    if kind == "list":
        words = arg.split(",")
        rng.shuffle(words)
        return [
            words[i % len(words)] + (f" {i // len(words) + 1}" if i >= len(words) else "") for i in range(n)
        ]
    raise ValueError(f"unknown label style {style!r}")


def _unique(rng: random.Random, n: int, make) -> list[str]:
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(make(), None)
    return list(seen)
