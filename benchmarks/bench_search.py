"""Local search: bm25s (toolgym's ``BM25Index``) against rank-bm25 on one 100,000-document knowledge world.

Both get the same documents, the same tokens (bm25s' tokenizer) and the same queries: half entity names (what
a search-then-answer policy sends), half whole questions. Measured: the time from documents to a queryable
index, and the latency of a batch of 64 queries returning the top 3 (p50 and p99 over batches). rank-bm25
scores every document in Python for each query word, so it gets fewer batches; the table says how many.

Run (a few minutes on 2 cores)::

    .venv/bin/pytest benchmarks/bench_search.py -q -s
    TOOLGYM_BENCH_DOCS=10000 .venv/bin/pytest benchmarks/bench_search.py -q -s   # a quick look
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import bm25s
import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from toolgym.search.bm25 import BM25Index
from toolgym.search.world import KnowledgeWorld

N_DOCS = int(os.environ.get("TOOLGYM_BENCH_DOCS", "100000"))
BATCH, TOPK = 64, 3
BATCHES = {"bm25s": 100, "rank-bm25": 10}


@dataclass
class Measured:
    build_s: float = float("nan")
    batch_s: list[float] = field(default_factory=list)
    top1: list[str] = field(default_factory=list)


RESULTS = {name: Measured() for name in BATCHES}


@pytest.fixture(scope="module")
def corpus(request):
    world = KnowledgeWorld(N_DOCS, seed=0)
    docs = list(world.documents())
    questions = [world.question(seed) for seed in range(BATCH * max(BATCHES.values()))]
    queries = [q.queries[0] if i % 2 == 0 else q.text for i, q in enumerate(questions)]
    batches = [queries[i : i + BATCH] for i in range(0, len(queries), BATCH)]
    yield docs, batches
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in table().splitlines():
        reporter.write_line(line)


def _timed(benchmark, fn, inputs, record):
    """Run ``fn`` on each input as one benchmark round, keeping our own timings (for p99) in ``record``."""
    feed = iter(inputs)

    def round_():
        started = time.perf_counter()
        out = fn(next(feed))
        record.append(time.perf_counter() - started)
        return out

    return benchmark.pedantic(round_, rounds=len(inputs), iterations=1)


# -- bm25s ---------------------------------------------------------------------------------------------------

INDEXES: dict[str, object] = {}


def test_bm25s_build(benchmark, corpus):
    docs, _ = corpus
    times: list[float] = []
    INDEXES["bm25s"] = _timed(benchmark, BM25Index.build, [docs], times)
    RESULTS["bm25s"].build_s = times[0]


def test_bm25s_query_batch(benchmark, corpus):
    _, batches = corpus
    index: BM25Index = INDEXES["bm25s"]
    search = lambda b: index.retrieve(b, TOPK)  # noqa: E731
    last = _timed(benchmark, search, batches[: BATCHES["bm25s"]], RESULTS["bm25s"].batch_s)
    assert len(last) == BATCH
    RESULTS["bm25s"].top1 = [hits[0].id if hits else "" for hits in index.retrieve(batches[0], TOPK)]


# -- rank-bm25 -----------------------------------------------------------------------------------------------


def _tokens(texts: list[str]) -> list[list[str]]:
    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=False)


def _rank_bm25_build(docs):
    return BM25Okapi(_tokens([d["contents"] for d in docs]))


def _rank_bm25_search(model: BM25Okapi, queries: list[str]) -> list[list[int]]:
    out = []
    for tokens in _tokens(queries):
        scores = model.get_scores(tokens)
        top = np.argpartition(-scores, TOPK)[:TOPK]
        out.append([int(i) for i in top[np.argsort(-scores[top])]])
    return out


def test_rank_bm25_build(benchmark, corpus):
    docs, _ = corpus
    times: list[float] = []
    INDEXES["rank-bm25"] = _timed(benchmark, _rank_bm25_build, [docs], times)
    RESULTS["rank-bm25"].build_s = times[0]


def test_rank_bm25_query_batch(benchmark, corpus):
    docs, batches = corpus
    model: BM25Okapi = INDEXES["rank-bm25"]
    search = lambda b: _rank_bm25_search(model, b)  # noqa: E731
    last = _timed(benchmark, search, batches[: BATCHES["rank-bm25"]], RESULTS["rank-bm25"].batch_s)
    assert len(last) == BATCH
    RESULTS["rank-bm25"].top1 = [docs[hits[0]]["id"] for hits in _rank_bm25_search(model, batches[0])]


# -- the table -----------------------------------------------------------------------------------------------


def table() -> str:
    fast, slow = RESULTS["bm25s"], RESULTS["rank-bm25"]

    def pct(m: Measured, q: float) -> float:
        return float(np.percentile(m.batch_s, q)) if m.batch_s else float("nan")

    rows = [
        ("index build (s)", fast.build_s, slow.build_s),
        (f"batch of {BATCH} p50 (ms)", pct(fast, 50) * 1e3, pct(slow, 50) * 1e3),
        (f"batch of {BATCH} p99 (ms)", pct(fast, 99) * 1e3, pct(slow, 99) * 1e3),
        ("queries / s (p50)", BATCH / pct(fast, 50), BATCH / pct(slow, 50)),
    ]
    lines = [
        f"Local BM25 on a {N_DOCS:,}-document knowledge world, top-{TOPK}, {os.cpu_count()} CPU(s); "
        f"batches timed: bm25s {len(fast.batch_s)}, rank-bm25 {len(slow.batch_s)}",
        f"{'':24} {'bm25s':>12} {'rank-bm25':>12} {'bm25s speed-up':>18}",
    ]
    for label, a, b in rows:
        ratio = a / b if label.startswith("queries") else b / a
        lines.append(f"{label:24} {a:12.1f} {b:12.1f} {ratio:17.1f}x")
    if fast.top1 and slow.top1:
        agree = np.mean([a == b for a, b in zip(fast.top1, slow.top1, strict=True)])
        lines.append(f"top-1 agreement on the first batch: {agree:.0%} (BM25 variants differ in idf)")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
