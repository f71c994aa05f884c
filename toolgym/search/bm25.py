"""A local BM25 index (bm25s) over a Search-R1 corpus: build, save, load, retrieve top-k with scores.

Why BM25 and bm25s: toolgym must search offline with no GPU and no model download, and bm25s keeps the index
as sparse precomputed scores in numpy, so a query is a few array slices (milliseconds on 100k documents) and
a saved index loads with ``np.load`` (optionally memory-mapped, for corpora larger than RAM).

Documents are ``{"id", "contents"}`` rows whose first ``contents`` line is the title (Search-R1's
``wiki-18.jsonl`` format); ``{"title", "text"}`` rows are accepted too. Text is lower-cased, split into words
of two or more characters and English stop words are dropped (bm25s' tokenizer), the same way for the corpus
and for queries. Documents that share no word with the query are not hits (rather than arbitrary zero-score
documents), so a query with no indexed word has none.

Ranking is the same on every machine, because a seed must name one episode and search results are part of
it. bm25s' own top-k (``np.argpartition`` then an unstable ``argsort``, or ``jax.lax.top_k`` where jax is
installed) returns tied documents in an order that depends on the CPU's sort kernels and library versions, so
``retrieve`` scores and selects itself (``_scores``, ``_top``): higher score first, then lower document index
(the corpus order).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from toolgym.search.base import Hit
from toolgym.util.jsonl import read_jsonl

if TYPE_CHECKING:
    import bm25s


def _import_bm25s() -> Any:
    """``import bm25s`` without letting it start jax.

    Where jax is installed, bm25s runs ``jax.lax.top_k`` at import time, which starts jax's default backend:
    on a GPU host that claims most of the GPU's memory in every process that imports toolgym's search (rollout
    workers beside vLLM and the trainer), and where jax's CUDA plugin cannot start, the import itself fails
    (seen on an H100 host: ``RuntimeError: Unable to initialize backend 'cuda'``). toolgym ranks documents
    itself and never uses bm25s' top-k, so bm25s is imported with jax hidden from it, unless this process
    already imported jax (its backend is then the process's own business)."""
    if "jax" in sys.modules:
        import bm25s

        return bm25s
    sys.modules["jax"] = None  # type: ignore[assignment]  # `import jax.lax` -> ImportError in bm25s
    try:
        import bm25s
    finally:
        if sys.modules.get("jax", 0) is None:
            del sys.modules["jax"]
    return bm25s


bm25s = _import_bm25s()

_META = "toolgym_index.json"
_FORMAT = "toolgym-bm25/1"
#: ranking rounds scores to this many decimals: documents within float noise of each other tie (see ``_top``)
SCORE_DECIMALS = 4


class BM25Index:
    """A BM25 index over a corpus; implements the ``Retriever`` protocol."""

    def __init__(self, model: bm25s.BM25, corpus: Sequence[Mapping[str, Any]], stopwords: str = "en"):
        if model.scores["num_docs"] != len(corpus):
            raise ValueError(
                f"the index has {model.scores['num_docs']} documents but the corpus {len(corpus)}"
            )
        self.model = model
        self.corpus = corpus
        self.stopwords = stopwords

    def __len__(self) -> int:
        return len(self.corpus)

    def __repr__(self) -> str:
        return f"BM25Index({len(self):,} documents)"

    # -- building ------------------------------------------------------------------------------------------

    @classmethod
    def build(
        cls,
        documents: Iterable[Mapping[str, Any]],
        *,
        k1: float = 1.5,
        b: float = 0.75,
        stopwords: str = "en",
    ) -> BM25Index:
        """Index documents (``{"id", "contents"}`` or ``{"title", "text"}`` mappings)."""
        corpus = [Hit.from_document(doc).document() for doc in documents]
        if not corpus:
            raise ValueError("cannot build a search index over an empty corpus")
        tokens = bm25s.tokenize([d["contents"] for d in corpus], stopwords=stopwords, show_progress=False)
        model = bm25s.BM25(k1=k1, b=b)
        model.index(tokens, create_empty_token=False, show_progress=False)
        return cls(model, corpus, stopwords)

    @classmethod
    def from_jsonl(cls, path: str | Path, **kwargs: Any) -> BM25Index:
        """Index a JSONL corpus file (one document per line, blank lines ignored)."""
        return cls.build(read_jsonl(path), **kwargs)

    def save(self, directory: str | Path) -> Path:
        """Write the index and its corpus to ``directory`` (created if missing); ``load`` reads it back."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.model.save(str(directory), corpus=list(self.corpus), show_progress=False)
        meta = {"format": _FORMAT, "num_docs": len(self), "stopwords": self.stopwords}
        (directory / _META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        return directory

    @classmethod
    def load(cls, directory: str | Path, *, mmap: bool = False) -> BM25Index:
        """Read an index written by ``save``; ``mmap`` maps the arrays and the corpus instead of reading them,
        for corpora larger than memory."""
        directory = Path(directory)
        meta_path = directory / _META
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{directory} is not a toolgym search index (no {_META}); build one first"
            )
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if meta.get("format") != _FORMAT:
            raise ValueError(
                f"{directory}: unsupported index format {meta.get('format')!r} (expected {_FORMAT})"
            )
        model = bm25s.BM25.load(str(directory), load_corpus=True, mmap=mmap, show_progress=False)
        corpus, model.corpus = model.corpus, None  # retrieve() then returns row numbers, which we map
        return cls(model, corpus, meta.get("stopwords", "en"))

    # -- searching -----------------------------------------------------------------------------------------

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]:
        """The best ``topk`` documents for each query, best first, with their BM25 scores."""
        if isinstance(queries, str):
            raise TypeError("retrieve takes a list of queries; use search() for one")
        results: list[list[Hit]] = [[] for _ in queries]
        if not queries:
            return results
        topk = max(1, min(int(topk), len(self)))
        tokens = bm25s.tokenize(
            list(queries), stopwords=self.stopwords, return_ids=False, show_progress=False
        )
        vocab = self.model.vocab_dict
        for i, query in enumerate(tokens):
            token_ids = [vocab[t] for t in query if t in vocab]
            if token_ids:
                rows, scores = _top(self._scores(token_ids), topk)
                results[i] = [
                    Hit.from_document(self.corpus[int(row)], float(score))
                    for row, score in zip(rows, scores, strict=True)
                ]
        return results

    def _scores(self, token_ids: list[int]) -> np.ndarray:
        """Every document's BM25 score for the query: the sum of its precomputed per-word scores.

        Computed here rather than by bm25s so that a score cannot depend on the order its terms are added in
        (float addition is not associative): the float32 per-word scores are summed in float64 (exact for a
        query's few terms of similar magnitude), in one canonical order (sorted word ids), in one thread.
        """
        data, indices, indptr = (self.model.scores[key] for key in ("data", "indices", "indptr"))
        scores = np.zeros(len(self), dtype=np.float64)
        for token_id in sorted(token_ids):  # a repeated query word counts again, as in bm25s
            start, end = int(indptr[token_id]), int(indptr[token_id + 1])
            np.add.at(scores, indices[start:end], data[start:end].astype(np.float64))
        return scores

    def search(self, query: str, topk: int = 3) -> list[Hit]:
        """The best ``topk`` documents for one query."""
        return self.retrieve([query], topk)[0]


def _top(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows and scores of the ``k`` best documents with a positive score: higher score first, then lower
    row, on any machine.

    Each candidate gets one integer key: its score in units of ``10**-SCORE_DECIMALS`` (so documents within
    float noise of each other, such as a last-bit difference in another platform's ``log``, tie), then its row
    reversed in the low bits. Keys are distinct, so the partition and the sort of the ``k`` best cannot order
    anything differently on another CPU, and no sort of all documents is needed. The scores returned are the
    rounded ones, which is what the order follows.
    """
    n = len(scores)
    shift = n.bit_length()  # the low bits hold n - 1 - row (< 2**shift); a score fits the 63 - shift above
    rows = np.flatnonzero(scores > 0)
    ticks = np.rint(scores[rows] * 10**SCORE_DECIMALS).astype(np.int64)
    keys = (ticks << shift) | (n - 1 - rows)
    if len(keys) > k:
        keys = np.partition(keys, len(keys) - k)[len(keys) - k :]
    keys = np.sort(keys)[::-1]
    return (n - 1) - (keys & ((1 << shift) - 1)), (keys >> shift) / 10**SCORE_DECIMALS
