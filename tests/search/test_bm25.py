"""The local BM25 index: retrieval quality on the generated world, top-k with scores, save/load, corpora."""

import json

import pytest

from toolgym.search.base import Hit
from toolgym.search.bm25 import BM25Index
from toolgym.search.world import KnowledgeWorld
from toolgym.util.jsonl import read_jsonl


def _top3_rate(index: BM25Index, pairs: list[tuple[str, str]]) -> float:
    """The share of (query, gold doc id) pairs whose gold document is in the top 3."""
    results = index.retrieve([q for q, _ in pairs], topk=3)
    return sum(gold in [h.id for h in hits] for (_, gold), hits in zip(pairs, results, strict=True)) / len(
        pairs
    )


def test_single_hop_gold_document_is_in_the_top3_by_entity_name(world, index):
    questions = [world.question(seed, hops=1) for seed in range(600)]
    rate = _top3_rate(index, [(q.queries[0], q.doc_ids[0]) for q in questions])
    assert rate >= 0.95, f"gold document in the top 3 for only {rate:.1%} of single-hop questions"


def test_single_hop_quality_holds_on_a_larger_world():
    world = KnowledgeWorld(20_000, seed=11)
    index = BM25Index.build(world.documents())
    questions = [world.question(seed, hops=1) for seed in range(400)]
    assert _top3_rate(index, [(q.queries[0], q.doc_ids[0]) for q in questions]) >= 0.95


def test_every_hop_of_multi_hop_questions_is_findable_by_name(world, index):
    pairs = []
    for seed in range(300):
        question = world.question(seed, hops=(2, 3))
        pairs += zip(question.queries, question.doc_ids, strict=True)
    assert _top3_rate(index, pairs) >= 0.95


def test_hits_are_ranked_with_positive_scores_and_topk_respected(world, index):
    hits = index.search(f"{world.name(0)} born", topk=5)  # "born" matches every person
    assert len(hits) == 5 and hits[0].id == "0" and hits[0].title == world.name(0)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    assert index.retrieve([], topk=3) == []
    assert len(index.retrieve(["a", "b", "c"], topk=2)) == 3


def test_no_matching_word_means_no_hits_not_arbitrary_documents(index):
    assert index.retrieve(["", "the of and", "zzqxv unknownword"], topk=3) == [[], [], []]


def test_topk_larger_than_the_corpus_is_clamped():
    index = BM25Index.build(
        [{"id": "a", "contents": "Alpha\nred apple"}, {"id": "b", "contents": "Beta\nred"}]
    )
    assert [h.id for h in index.search("red apple", topk=10)] == ["a", "b"]


def test_a_single_string_is_refused(index):
    with pytest.raises(TypeError, match="list of queries"):
        index.retrieve("Drelmar", topk=3)


@pytest.mark.parametrize("mmap", [False, True])
def test_save_and_load_give_the_same_results(tmp_path, mmap):
    world = KnowledgeWorld(400, seed=2)
    index = BM25Index.build(world.documents())
    index.save(tmp_path / "idx")
    loaded = BM25Index.load(tmp_path / "idx", mmap=mmap)
    queries = [world.name(i) for i in range(0, 400, 13)] + ["cartographer born"]
    assert len(loaded) == 400
    assert loaded.retrieve(queries, topk=4) == index.retrieve(queries, topk=4)


def test_loading_a_directory_that_is_not_an_index_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a toolgym search index"):
        BM25Index.load(tmp_path)


def test_corpus_files_in_both_row_shapes(tmp_path):
    path = tmp_path / "corpus.jsonl"
    rows = [
        {"id": "1", "contents": '"Paris"\nParis is the capital of France.'},
        {"id": "2", "title": "Berlin", "text": "Berlin is the capital of Germany."},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    index = BM25Index.from_jsonl(path)
    (paris,) = index.search("capital France", topk=1)
    assert (paris.id, paris.title, paris.text) == ("1", "Paris", "Paris is the capital of France.")
    assert index.search("Germany", topk=1)[0].contents == "Berlin\nBerlin is the capital of Germany."


def test_bad_corpus_lines_name_their_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "1", "contents": "A\\nb"}\n{not json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.jsonl:2: not valid JSON"):
        list(read_jsonl(path))
    with pytest.raises(ValueError, match="needs 'contents'"):
        Hit.from_document({"id": "1", "body": "x"})
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Index.build([])
