"""Where an env's or a server's documents come from: a generated world, a corpus file, a saved index or a
remote service, resolved in one place and cached per process.

Why a cache: every env instance of a rollout worker searches the same documents, and building an index per env
(or per step) would multiply memory and start-up time by the number of envs. Indexes are keyed by what
determines their content: ``(size, seed)`` for a world, the file's path, size and modification time for a
corpus, the directory for a saved index.
"""

from __future__ import annotations

import functools
from pathlib import Path

from toolgym.search.base import Retriever
from toolgym.search.bm25 import BM25Index
from toolgym.search.remote import RemoteRetriever
from toolgym.search.world import KnowledgeWorld

#: The default world of the Search envs: a couple of thousand documents index in well under a second.
DEFAULT_WORLD_SIZE = 2_000


def world_index(size: int = DEFAULT_WORLD_SIZE, seed: int = 0) -> BM25Index:
    """The BM25 index over a generated world's documents (built once per process)."""
    return _world_index(int(size), int(seed))


@functools.lru_cache(maxsize=4)
def _world_index(size: int, seed: int) -> BM25Index:
    return BM25Index.build(KnowledgeWorld(size, seed).documents())


def corpus_index(path: str | Path) -> BM25Index:
    """The BM25 index over a JSONL corpus file (rebuilt only when the file changes)."""
    resolved = Path(path).resolve()
    stat = resolved.stat()
    return _corpus_index(resolved, stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _corpus_index(path: Path, size: int, mtime_ns: int) -> BM25Index:
    return BM25Index.from_jsonl(path)


@functools.lru_cache(maxsize=4)
def saved_index(directory: str | Path, mmap: bool = False) -> BM25Index:
    """A saved index (``BM25Index.save``), loaded once per process."""
    return BM25Index.load(directory, mmap=mmap)


def make_retriever(
    retriever: Retriever | str | None = None,
    *,
    corpus: str | Path | None = None,
    index: str | Path | None = None,
    world_size: int = DEFAULT_WORLD_SIZE,
    world_seed: int = 0,
) -> Retriever:
    """One retriever from at most one of: a ``Retriever`` or a service URL, a JSONL ``corpus``, a saved
    ``index`` directory; with none of them, the generated world ``(world_size, world_seed)``."""
    given = [
        name for name, value in (("retriever", retriever), ("corpus", corpus), ("index", index)) if value
    ]
    if len(given) > 1:
        raise ValueError(f"pass one document source, not {' and '.join(given)}")
    if isinstance(retriever, str):
        return RemoteRetriever(retriever)
    if retriever is not None:
        if not isinstance(retriever, Retriever):
            raise TypeError(f"retriever must be a URL or have retrieve(queries, topk), got {type(retriever)}")
        return retriever
    if corpus is not None:
        return corpus_index(corpus)
    if index is not None:
        return saved_index(str(Path(index).resolve()))
    return world_index(world_size, world_seed)
