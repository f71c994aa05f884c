"""Ranking is the same on every machine: documents with equal scores come in corpus order, on every path.

A seed names an episode only if a query always gives the same list, and equal BM25 scores are common (two
people trained by the same mentor mention that name equally). The planted corpus below has documents with
identical texts, and with the same words in another order, at rows whose ids do not sort in row order (so
"document order" cannot pass by sorting on ids).
"""

from __future__ import annotations

import numpy as np
import pytest

from toolgym.search.bm25 import SCORE_DECIMALS, BM25Index, _top
from toolgym.search.remote import RemoteRetriever
from toolgym.server.retriever import create_app
from toolgym.testing.servers import serve_in_thread

TWIN = "Twin\nan amber lantern over the harbour"
TWIN_SHUFFLED = "Twin\nthe harbour over an amber lantern"  # the same words: the same score, summed alike
PLANTED = [
    {"id": "z-best", "contents": "Amber Lantern\namber lantern amber lantern harbour"},  # row 0: the best
    {"id": "y", "contents": TWIN},  # row 1
    {"id": "noise-1", "contents": "Noise\na grey stone bridge"},
    {"id": "x", "contents": TWIN_SHUFFLED},  # row 3
    {"id": "a", "contents": TWIN},  # row 4
    {"id": "noise-2", "contents": "Noise\na long harbour wall with a lamp and a bell"},
    {"id": "m", "contents": TWIN},  # row 6
    {"id": "b", "contents": TWIN_SHUFFLED},  # row 7
]
QUERY = "amber lantern harbour"
TIED_IN_ROW_ORDER = ["y", "x", "a", "m", "b"]


@pytest.fixture(scope="module")
def planted() -> BM25Index:
    return BM25Index.build(PLANTED)


@pytest.fixture(scope="module")
def planted_url(planted):
    """``toolgym serve retriever``'s app over the planted corpus, one server for the module."""
    with serve_in_thread(create_app(planted, topk_max=20)) as url:
        yield url


def _check_planted(retriever) -> None:
    """The best document, then the tied ones in row order; a cut inside the ties keeps the earliest rows."""
    hits = retriever.retrieve([QUERY], 10)[0]
    assert [h.id for h in hits[:6]] == ["z-best", *TIED_IN_ROW_ORDER]
    assert len({h.score for h in hits[1:6]}) == 1 and hits[0].score > hits[1].score > hits[-1].score
    for k in (1, 2, 3, 4):
        assert [h.id for h in retriever.retrieve([QUERY], k)[0]] == ["z-best", *TIED_IN_ROW_ORDER][:k]


def test_the_local_index_returns_ties_in_document_order(planted):
    _check_planted(planted)


@pytest.mark.parametrize("mmap", [False, True])
def test_a_saved_and_loaded_index_returns_ties_in_document_order(planted, tmp_path, mmap):
    planted.save(tmp_path / "idx")
    _check_planted(BM25Index.load(tmp_path / "idx", mmap=mmap))


def test_the_retriever_service_and_its_client_return_ties_in_document_order(planted_url):
    client = RemoteRetriever(planted_url)
    try:
        _check_planted(client)
    finally:
        client.close()


def test_a_score_does_not_depend_on_the_order_of_the_query_words(planted, world, index):
    assert planted.search(QUERY, 8) == planted.search("harbour lantern amber", 8)
    name = world.name(42)
    first, last = name.split(" ", 1)
    assert index.search(name, 5) == index.search(f"{last} {first}", 5)


def test_many_ties_beyond_the_cut_are_taken_in_row_order():
    """Every 7th of 3,000 equally long documents holds the query word: the top 5 are the first 5 of them."""
    docs = [
        {"id": f"doc-{2_999 - i}", "contents": f"Filler\nfiller{i:04d} {'needle' if i % 7 == 0 else 'hay'}"}
        for i in range(3_000)
    ]
    index = BM25Index.build(docs)
    hits = index.search("needle", topk=5)
    assert [h.id for h in hits] == [f"doc-{2_999 - i}" for i in (0, 7, 14, 21, 28)]
    assert len({h.score for h in hits}) == 1


def test_selection_matches_a_full_sort_by_score_then_row(world, index):
    """``_top`` (partition, then a sort of the few best) against sorting every document by the same key."""
    queries = [world.name(i) for i in range(0, 3_000, 97)] + ["born", "city founded", "novel published by"]
    vocab = index.model.vocab_dict
    for query in queries:
        token_ids = [vocab[w] for w in query.lower().split() if w in vocab]
        scores = index._scores(token_ids)
        rounded = np.round(scores, SCORE_DECIMALS)
        ranked = sorted(np.flatnonzero(scores > 0), key=lambda row: (-rounded[row], row))
        for k in (1, 3, 10):
            rows, top_scores = _top(scores, k)
            assert rows.tolist() == ranked[:k], query
            assert top_scores.tolist() == pytest.approx([rounded[row] for row in ranked[:k]])
