"""A procedural, uncontaminated knowledge world: fictional entities, one document each, and QA over them.

Why: a search-RL policy should learn to *search*, and real QA sets (NQ, HotpotQA) are largely answerable from
pre-training. Here every name is invented and every fact is drawn from a seed, so the only way to the answer
is through the documents. The world is a pure function of ``(seed, size)``: entity ``i`` (its name, attributes
and relations) is computed from hashes of ``(seed, i)`` alone, so any document or question is available in
O(1) without building the rest, a corpus of any size streams to JSONL in constant memory, and two processes
that agree on ``(seed, size)`` agree on every fact.

Entities (shares of ``size``): people 50%, places (cities) 10%, organisations 20%, works (books) 20%.

=================  ===========================================================================================
type               attributes; relations (each one *function*: exactly one value per entity)
=================  ===========================================================================================
person             birth_year, occupation; born_in → place, employer → organisation, mentor → another person
place              region, founded_year, population; mayor → person
organisation       field, established_year (after its founder's birth); founder → person, headquarters → place
work               form, published_year (after its author's birth); author → person, publisher → organisation,
                   set_in → place
=================  ===========================================================================================

Questions start from one entity named in the text and follow 0–2 relations to an intermediate entity, then ask
one relation or attribute of it: "Where was the mentor of the founder of Drelmar Institute born?" needs three
documents (Drelmar Institute → its founder → their mentor → birthplace).

Why each gold answer is unique:

- *Names are unique strings.* Each type's names come from an injective code: a seeded bijection (an affine map
  modulo the size of the type's name space) followed by a mixed-radix decoding into syllables. Invented words
  are runs of consonant clusters and vowel clusters (onset, vowel, onset, vowel, optional coda), so a word
  splits back into its syllables in exactly one way, and distinct codes give distinct words. Types cannot
  collide: places are one three-syllable word, people two invented words, organisations an invented word and
  an English kind that starts with a vowel (invented words start with a consonant), works five words starting
  with "The".
- *Relations and attributes are functions*, and questions only follow them forwards (never "who was born in
  X?", which has many answers). So the chain "start entity → relation → … → final relation" denotes exactly
  one value, and the documents state each fact exactly once, from the same function.
- Chains never revisit an entity, so a question never points back at something it names.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from toolgym.core.task import ProceduralSource, Task
from toolgym.util.world_vocabulary import (
    ADJECTIVES,
    FIELDS,
    FIRST,
    FORMS,
    NOUNS,
    OCCUPATIONS,
    ORG_KINDS,
    WORD2,
    WORD3,
    Bijection,
    a_or_an,
    invented_word,
    splitmix,
)

MIN_SIZE = 100
# -- the schema ----------------------------------------------------------------------------------------------

KINDS = ("person", "place", "organisation", "work")


@dataclass(frozen=True)
class Relation:
    """A functional edge or attribute, with the phrases that put it into questions."""

    name: str
    domain: str
    target: str | None  #: the entity kind it points to, or None for an attribute (a value)
    phrase: str  #: the noun phrase for the value, from the subject's phrase: "the founder of {x}"
    question: str  #: asking for the value directly: "Who founded {x}?"


RELATIONS: tuple[Relation, ...] = (
    Relation("born_in", "person", "place", "the birthplace of {x}", "Where was {x} born?"),
    Relation("employer", "person", "organisation", "the employer of {x}", "Which organisation employs {x}?"),
    Relation("mentor", "person", "person", "the mentor of {x}", "Who was the mentor of {x}?"),
    Relation("birth_year", "person", None, "", "In what year was {x} born?"),
    Relation("occupation", "person", None, "", "What is the occupation of {x}?"),
    Relation("mayor", "place", "person", "the mayor of {x}", "Who is the mayor of {x}?"),
    Relation("region", "place", None, "", "In which region is {x}?"),
    Relation("founded_year", "place", None, "", "In what year was {x} founded?"),
    Relation("population", "place", None, "", "What is the population of {x}?"),
    Relation("founder", "organisation", "person", "the founder of {x}", "Who founded {x}?"),
    Relation(
        "headquarters", "organisation", "place", "the city where {x} is headquartered",
        "In which city is {x} headquartered?",
    ),
    Relation("field", "organisation", None, "", "In which field does {x} work?"),
    Relation("established_year", "organisation", None, "", "In what year was {x} established?"),
    Relation("author", "work", "person", "the author of {x}", "Who wrote {x}?"),
    Relation("publisher", "work", "organisation", "the publisher of {x}", "Who published {x}?"),
    Relation("set_in", "work", "place", "the city in which {x} is set", "In which city is {x} set?"),
    Relation("published_year", "work", None, "", "In what year was {x} first published?"),
)  # fmt: skip
_BY_DOMAIN: dict[str, list[Relation]] = {k: [r for r in RELATIONS if r.domain == k] for k in KINDS}
#: a distinct hash stream per relation or attribute, so facts are independent of each other
_SALT = {name: i + 1 for i, name in enumerate([*(r.name for r in RELATIONS), "form"])}


@dataclass(frozen=True)
class Question:
    """A question with its unique gold answer and the path to it.

    ``queries`` are the names of the entities whose documents hold each fact, in order (what a correct
    search-then-answer policy looks up); ``doc_ids`` are those documents.
    """

    text: str
    answer: str
    golden_answers: list[str]
    hops: int
    relations: list[str]
    queries: list[str]
    doc_ids: list[str]

    def task_data(self) -> dict[str, Any]:
        return {
            "golden_answers": self.golden_answers,
            "hops": self.hops,
            "relations": self.relations,
            "queries": self.queries,
            "gold_doc_ids": self.doc_ids,
        }


@dataclass(frozen=True)
class Entity:
    index: int
    kind: str
    name: str
    values: dict[str, Any] = field(default_factory=dict)  #: relation name -> entity index or value


class KnowledgeWorld:
    """The fictional world for ``(seed, size)``; ``size`` is the number of entities, which is the number of
    documents. Everything is computed on demand from hashes; see the module docstring.
    """

    def __init__(self, size: int = 2_000, seed: int = 0):
        if size < MIN_SIZE:
            raise ValueError(f"a knowledge world needs at least {MIN_SIZE} entities, got {size}")
        self.size, self.seed = int(size), int(seed)
        self._key = splitmix(self.seed * 0x9E3779B1 + 0x5EED)
        places, orgs, works = size // 10, size // 5, size // 5
        people = size - places - orgs - works
        self.counts = {"person": people, "place": places, "organisation": orgs, "work": works}
        self._start: dict[str, int] = {}
        start = 0
        for kind in KINDS:
            self._start[kind] = start
            start += self.counts[kind]
        capacity = {
            "person": FIRST * WORD2,
            "place": WORD3,
            "organisation": WORD2 * len(ORG_KINDS),
            "work": len(ADJECTIVES) * len(NOUNS) * WORD2,
        }
        self._names = {k: Bijection(capacity[k], self._key ^ (i + 1) * 0x51ED) for i, k in enumerate(KINDS)}
        self._regions = max(4, places // 20)
        self._region_names = Bijection(WORD2, self._key ^ 0x4E6)

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"KnowledgeWorld(size={self.size}, seed={self.seed})"

    # -- entities ------------------------------------------------------------------------------------------

    def kind(self, index: int) -> str:
        if not 0 <= index < self.size:
            raise IndexError(f"entity {index} is outside this world of {self.size}")
        for kind in reversed(KINDS):
            if index >= self._start[kind]:
                return kind
        raise AssertionError("unreachable")

    def _h(self, salt: str, index: int) -> int:
        return splitmix(self._key ^ splitmix(_SALT[salt] * 0x100000001B3 + index))

    def _pick(self, kind: str, salt: str, index: int) -> int:
        return self._start[kind] + self._h(salt, index) % self.counts[kind]

    def name(self, index: int) -> str:
        """The entity's unique name (a work's name is its title)."""
        kind = self.kind(index)
        code = self._names[kind](index - self._start[kind])
        if kind == "person":
            last, first = divmod(code, FIRST)
            return f"{invented_word(first, 2, coda=False)} {invented_word(last, 2)}"
        if kind == "place":
            return invented_word(code, 3)
        if kind == "organisation":
            word, org_kind = divmod(code, len(ORG_KINDS))
            return f"{invented_word(word, 2)} {ORG_KINDS[org_kind]}"
        code, adjective = divmod(code, len(ADJECTIVES))
        word, noun = divmod(code, len(NOUNS))
        return f"The {ADJECTIVES[adjective]} {NOUNS[noun]} of {invented_word(word, 2)}"

    def value(self, index: int, relation: str) -> Any:
        """One relation (an entity index) or attribute (an int or str) of an entity."""
        h = self._h(relation, index)
        match relation:
            case "born_in" | "headquarters" | "set_in":
                return self._pick("place", relation, index)
            case "employer" | "publisher":
                return self._pick("organisation", relation, index)
            case "founder" | "author" | "mayor":
                return self._pick("person", relation, index)
            case "mentor":  # any other person
                people, first = self.counts["person"], self._start["person"]
                return first + (index - first + 1 + h % (people - 1)) % people
            case "birth_year":
                return 1700 + h % 251
            case "occupation":
                return OCCUPATIONS[h % len(OCCUPATIONS)]
            case "region":
                return invented_word(self._region_names(h % self._regions), 2)
            case "founded_year":
                return 600 + h % 1151
            case "population":
                return int(800 * 4000 ** ((h % 10_000) / 10_000))  # 800 .. 3.2 million, log-uniform
            case "field":
                return FIELDS[h % len(FIELDS)]
            case "established_year":
                return self.value(self.value(index, "founder"), "birth_year") + 22 + h % 37
            case "published_year":
                return self.value(self.value(index, "author"), "birth_year") + 20 + h % 46
            case "form":
                return FORMS[h % len(FORMS)]
        raise KeyError(f"no relation or attribute {relation!r}")

    def entity(self, index: int) -> Entity:
        kind = self.kind(index)
        names = [r.name for r in _BY_DOMAIN[kind]] + (["form"] if kind == "work" else [])
        return Entity(index, kind, self.name(index), {n: self.value(index, n) for n in names})

    # -- documents -----------------------------------------------------------------------------------------

    def document(self, index: int) -> dict[str, str]:
        """The entity's document in the Search-R1 corpus format: ``contents`` is the title, newline, text."""
        e = self.entity(index)
        v, n = e.values, self.name
        if e.kind == "person":
            text = (
                f"{e.name} is {a_or_an(v['occupation'])} born in {n(v['born_in'])} in {v['birth_year']}. "
                f"{e.name} works for {n(v['employer'])} and was trained by the mentor {n(v['mentor'])}."
            )
        elif e.kind == "place":
            text = (
                f"{e.name} is a city in the {v['region']} region, founded in {v['founded_year']}. "
                f"{e.name} has a population of {v['population']:,}. The mayor of {e.name} is {n(v['mayor'])}."
            )
        elif e.kind == "organisation":
            text = (
                f"{e.name} is an organisation working in {v['field']}, established in "
                f"{v['established_year']} by {n(v['founder'])}. {e.name} is headquartered in the city of "
                f"{n(v['headquarters'])}."
            )
        else:
            text = (
                f'"{e.name}" is {a_or_an(v["form"])} written by {n(v["author"])}, first published in '
                f"{v['published_year']} by {n(v['publisher'])}. The {v['form']} is set in the city of "
                f"{n(v['set_in'])}."
            )
        return {"id": str(index), "contents": f"{e.name}\n{text}"}

    def documents(self) -> Iterator[dict[str, str]]:
        return (self.document(i) for i in range(self.size))

    def write_jsonl(self, path: str | Path) -> int:
        """Stream the corpus to a JSONL file (one ``{"id", "contents"}`` per line); returns the count."""
        with Path(path).open("w", encoding="utf-8") as fh:
            for doc in self.documents():
                fh.write(json.dumps(doc, ensure_ascii=False) + "\n")
        return self.size

    # -- questions -----------------------------------------------------------------------------------------

    def tasks(self, hops: int | Sequence[int] = (1, 2, 3)) -> ProceduralSource:
        """The world's questions as a task source: the task for seed ``s`` is ``question(s, hops)``."""
        allowed = hop_counts(hops)
        name = f"kworld-s{self.seed}-n{self.size}-h{''.join(map(str, allowed))}"
        return ProceduralSource(name, partial(self.task, hops=allowed))

    def task(self, seed: int, hops: int | Sequence[int] = (1, 2, 3)) -> Task:
        question = self.question(seed, hops)
        return Task(id=str(seed), prompt=question.text, answer=question.answer, data=question.task_data())

    def question(self, seed: int, hops: int | Sequence[int] = (1, 2, 3)) -> Question:
        """The question for ``seed``: a uniformly drawn start entity and a random chain of ``hops`` documents
        (one hop count, or drawn uniformly from several). Deterministic in ``(world, seed, hops)``."""
        allowed = hop_counts(hops)
        rng = random.Random(splitmix(self._key ^ 0xC0FFEE ^ int(seed)))
        n_hops = rng.choice(allowed)
        while True:  # a chain that revisits an entity is redrawn (rare); see the module docstring
            question = self._chain(rng, n_hops)
            if question is not None:
                return question

    def _chain(self, rng: random.Random, n_hops: int) -> Question | None:
        start = rng.randrange(self.size)
        path, relations, current = [start], [], start
        for _ in range(n_hops - 1):
            relation = rng.choice([r for r in _BY_DOMAIN[self.kind(current)] if r.target])
            current = self.value(current, relation.name)
            if current in path:
                return None
            path.append(current)
            relations.append(relation)
        final = rng.choice(_BY_DOMAIN[self.kind(current)])
        value = self.value(current, final.name)
        if final.target and value in path:
            return None
        phrase = self._mention(start)
        for relation in relations:
            phrase = relation.phrase.format(x=phrase)
        text = final.question.format(x=phrase)
        answer, golden = self._answer(final, value)
        return Question(
            text=text,
            answer=answer,
            golden_answers=golden,
            hops=n_hops,
            relations=[r.name for r in [*relations, final]],
            queries=[self.name(i) for i in path],
            doc_ids=[str(i) for i in path],
        )

    def _mention(self, index: int) -> str:
        name = self.name(index)
        return f'the {self.value(index, "form")} "{name}"' if self.kind(index) == "work" else name

    def _answer(self, relation: Relation, value: Any) -> tuple[str, list[str]]:
        if relation.target:
            return self.name(value), [self.name(value)]
        if relation.name == "population":
            return str(value), [str(value), f"{value:,}"]
        if relation.name == "region":
            return value, [value, f"{value} region"]
        return str(value), [str(value)]


def hop_counts(hops: int | Sequence[int]) -> tuple[int, ...]:
    """The allowed hop counts of ``hops`` (one count or several), or a ValueError naming the choices."""
    allowed = (hops,) if isinstance(hops, int) or not isinstance(hops, Sequence) else tuple(hops)
    if not allowed or any(isinstance(h, bool) or h not in (1, 2, 3) for h in allowed):
        raise ValueError(f"hops must be 1, 2 or 3, or a list of them (drawn uniformly), got {hops!r}")
    return allowed


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    """Write a knowledge world's corpus to a JSONL file (``python -m toolgym.search``)."""
    import argparse
    import time

    p = argparse.ArgumentParser(prog=prog, description="Write a knowledge world's corpus to a JSONL file.")
    p.add_argument("--size", type=int, default=100_000, help="number of documents (default 100000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="the JSONL file to write")
    args = p.parse_args(argv)
    started = time.perf_counter()
    count = KnowledgeWorld(args.size, args.seed).write_jsonl(args.out)
    print(f"wrote {count:,} documents to {args.out} in {time.perf_counter() - started:.1f} s")
    return 0
