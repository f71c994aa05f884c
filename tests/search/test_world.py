"""The procedural knowledge world: unique names, consistent documents, questions with one derivable answer."""

import json
import subprocess
import sys

import pytest

from toolgym.search import world as world_module
from toolgym.search.world import KINDS, RELATIONS, KnowledgeWorld
from toolgym.util.world_vocabulary import FIRST, invented_word

_REL = {r.name: r for r in RELATIONS}


def test_type_shares_and_kinds(world):
    assert sum(world.counts.values()) == len(world) == 3_000
    assert world.counts == {"person": 1_500, "place": 300, "organisation": 600, "work": 600}
    assert [world.kind(i) for i in (0, 1_499, 1_500, 1_799, 1_800, 2_399, 2_400, 2_999)] == [
        "person", "person", "place", "place", "organisation", "organisation", "work", "work",
    ]  # fmt: skip
    with pytest.raises(IndexError):
        world.kind(3_000)


def test_names_are_unique_and_types_cannot_collide():
    w = KnowledgeWorld(20_000, seed=3)
    names = [w.name(i) for i in range(len(w))]
    assert len(set(names)) == len(names)
    shapes = {kind: set() for kind in KINDS}
    for i, name in enumerate(names):
        words = name.split()
        shapes[w.kind(i)].add((len(words), words[-1][0] in "AEIOU", words[0] == "The"))
    assert shapes["place"] == {(1, False, False)}
    assert shapes["person"] == {(2, False, False)}
    assert shapes["organisation"] == {(2, True, False)}
    assert {(n, the) for n, _, the in shapes["work"]} == {(5, True)}


def test_invented_words_are_injective_over_the_whole_first_name_space():
    words = {invented_word(code, 2, coda=False) for code in range(FIRST)}
    assert len(words) == FIRST
    assert all(w[0] not in "AEIOU" for w in words)  # so no organisation kind can be an invented word


def test_the_world_is_a_pure_function_of_seed_and_size(world):
    again = KnowledgeWorld(3_000, 7)
    assert [again.document(i) for i in range(0, 3_000, 97)] == [
        world.document(i) for i in range(0, 3_000, 97)
    ]
    assert [again.question(s) for s in range(20)] == [world.question(s) for s in range(20)]
    other = KnowledgeWorld(3_000, 8)
    assert sum(other.name(i) == world.name(i) for i in range(3_000)) < 10


def test_documents_are_in_search_r1_format_and_state_every_fact(world):
    for i in range(0, len(world), 37):
        doc = world.document(i)
        assert set(doc) == {"id", "contents"} and doc["id"] == str(i)
        title, text = doc["contents"].split("\n")
        entity = world.entity(i)
        assert title == entity.name and entity.name in text  # named in the title and the text: BM25 finds it
        for relation, value in entity.values.items():
            rel = _REL.get(relation)
            shown = world.name(value) if rel is not None and rel.target else value
            shown = f"{shown:,}" if isinstance(shown, int) and relation == "population" else str(shown)
            assert shown in text, (relation, shown, text)


def test_facts_are_consistent_in_time(world):
    for org in range(1_800, 2_400, 7):
        founder = world.value(org, "founder")
        assert world.value(org, "established_year") >= world.value(founder, "birth_year") + 22
    for work in range(2_400, 3_000, 7):
        author = world.value(work, "author")
        assert world.value(work, "published_year") >= world.value(author, "birth_year") + 20
    assert all(world.value(p, "mentor") != p for p in range(1_500))


def test_streaming_equals_random_access_and_writes_jsonl(tmp_path):
    w = KnowledgeWorld(150, seed=1)
    path = tmp_path / "corpus.jsonl"
    assert w.write_jsonl(path) == 150
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert rows == list(w.documents()) and rows[42] == w.document(42)


def python_calls(fn) -> int:
    """How many Python functions ``fn()`` calls: an operation count, the same on any machine."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def test_a_million_document_world_needs_no_pregeneration_and_streams_in_constant_work_per_document():
    """Counted in Python calls: a world of a million costs what one of a thousand costs to make, a document
    costs the same wherever it is in either world, and 10,000 documents cost 1,000 times what 10 do."""
    made = python_calls(lambda: KnowledgeWorld(1_000, seed=0))
    assert python_calls(lambda: KnowledgeWorld(1_000_000, seed=0)) == made
    big, small = KnowledgeWorld(1_000_000, seed=0), KnowledgeWorld(1_000, seed=0)
    assert big.document(999_999)["id"] == "999999"
    # the last entities of both worlds are works, entities 500.. of the small one and 500,000.. of the big
    # one are places: the same kind of document, the same work
    assert python_calls(lambda: big.document(999_999)) == python_calls(lambda: small.document(999))
    ten = python_calls(lambda: [small.document(i) for i in range(500, 510)])
    assert python_calls(lambda: [big.document(i) for i in range(500_000, 500_010)]) == ten
    question = big.question(5, hops=3)
    assert question.hops == 3 and all(0 <= int(d) < 1_000_000 for d in question.doc_ids)
    docs = []
    streamed = python_calls(lambda: docs.extend([big.document(i) for i in range(500_000, 510_000)]))
    assert len({d["contents"].split("\n")[0] for d in docs}) == 10_000
    assert streamed <= 1_000 * ten


def _follow(world, question):
    """Recompute the answer from the world's functions along the question's path."""
    current = int(question.doc_ids[0])
    for relation in question.relations[:-1]:
        current = world.value(current, relation)
    final = question.relations[-1]
    value = world.value(current, final)
    return current, (world.name(value) if _REL[final].target else str(value))


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_questions_have_one_derivable_answer_along_their_path(world, hops):
    for seed in range(150):
        q = world.question(seed, hops=hops)
        assert q.hops == hops == len(q.relations) == len(q.queries) == len(q.doc_ids)
        assert len(set(q.doc_ids)) == hops  # no entity visited twice
        last, answer = _follow(world, q)
        assert q.answer == answer and answer in q.golden_answers
        assert int(q.doc_ids[-1]) == last and q.queries == [world.name(int(d)) for d in q.doc_ids]
        assert q.queries[0] in q.text and q.answer not in q.text
        for doc_id, next_name in zip(q.doc_ids, [*q.queries[1:], None], strict=True):
            text = world.document(int(doc_id))["contents"]
            assert (next_name or q.golden_answers[-1]) in text  # each document gives the next step


def test_hop_mix_and_question_variety(world):
    mixed = [world.question(s) for s in range(300)]
    assert {q.hops for q in mixed} == {1, 2, 3}
    assert {r for q in mixed for r in q.relations} == set(_REL)
    assert len({q.text for q in mixed}) >= 295  # the same question may come up twice, as in any sampler
    assert {world.question(s, hops=(2, 3)).hops for s in range(50)} == {2, 3}


def test_world_tasks_are_rebuilt_from_their_ids(world):
    source = world.tasks(hops=(1, 2))
    task = source.task_for_seed(11)
    assert task.id == "kworld-s7-n3000-h12/11" and source.get(task.id) == task
    assert task.prompt == world.question(11, (1, 2)).text
    assert task.data["golden_answers"][0] == task.answer and task.data["queries"]


def test_bad_sizes_and_hops_are_refused():
    with pytest.raises(ValueError, match="at least 100"):
        KnowledgeWorld(99)
    with pytest.raises(ValueError, match="hops"):
        KnowledgeWorld(100).question(0, hops=4)


def test_python_m_toolgym_search_writes_a_corpus(tmp_path):
    out = tmp_path / "w.jsonl"
    python = [sys.executable, "-W", "error::RuntimeWarning"]  # `-m` of an imported module would warn
    command = [*python, "-m", "toolgym.search", "--size", "100", "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert len(out.read_text().splitlines()) == 100


def test_cli_writes_a_corpus(tmp_path, capsys):
    out = tmp_path / "w.jsonl"
    assert world_module.main(["--size", "120", "--seed", "2", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 120 and "wrote 120 documents" in capsys.readouterr().out
