"""A local BM25 index (bm25s) over a Search-R1 corpus: build, save, load, retrieve top-k with scores.

Why BM25 and bm25s: toolgym must search offline with no GPU and no model download, and bm25s keeps the index
as sparse precomputed scores in numpy, so a query is a few array slices (milliseconds on 100k documents) and
a saved index loads with ``np.load`` (optionally memory-mapped, for corpora larger than RAM).

Documents are ``{"id", "contents"}`` rows whose first ``contents`` line is the title (Search-R1's
``wiki-18.jsonl`` format); ``{"title", "text"}`` rows are accepted too. Text is lower-cased, split into words
of two or more characters and English stop words are dropped (bm25s' tokenizer), the same way for the corpus
and for queries. Documents that share no word with the query are not hits (rather than arbitrary zero-score
documents), so a query with no indexed word has none.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import bm25s

from toolgym.core.task import read_jsonl
from toolgym.search.base import Hit

_META = "toolgym_index.json"
_FORMAT = "toolgym-bm25/1"


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
        ids = [[vocab[t] for t in query if t in vocab] for query in tokens]
        searchable = [i for i, query_ids in enumerate(ids) if query_ids]
        if not searchable:
            return results
        found = self.model.retrieve([ids[i] for i in searchable], k=topk, show_progress=False, n_threads=0)
        for i, rows, scores in zip(searchable, found.documents, found.scores, strict=True):
            results[i] = [
                Hit.from_document(self.corpus[int(row)], float(score))
                for row, score in zip(rows, scores, strict=True)
                if score > 0
            ]
        return results

    def search(self, query: str, topk: int = 3) -> list[Hit]:
        """The best ``topk`` documents for one query."""
        return self.retrieve([query], topk)[0]
