"""Retrieval for the search tool: a local BM25 index (bm25s), a client for Search-R1 retriever services, the
procedural knowledge world used as the default corpus and task source. (QA task files are read by
``toolgym.envs.qa_tasks``, beside the other task-file loaders.)

Names are imported on first use (PEP 562), so ``import toolgym`` (which registers the Search envs) does not
import bm25s or httpx until a search index or a remote client is actually built.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Hit": "base",
    "Retriever": "base",
    "RetrieverError": "base",
    "BM25Index": "bm25",
    "RemoteRetriever": "remote",
    "DEFAULT_WORLD_SIZE": "sources",
    "corpus_index": "sources",
    "make_retriever": "sources",
    "saved_index": "sources",
    "world_index": "sources",
    "KnowledgeWorld": "world",
    "Question": "world",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolgym.search' has no attribute {name!r}")
    return getattr(importlib.import_module(f"toolgym.search.{module}"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
