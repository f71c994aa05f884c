"""What every retriever shares: a ``Hit``, the ``Retriever`` protocol and ``RetrieverError``.

The search tool talks to one small protocol, ``retrieve(queries, topk) -> list[list[Hit]]``, so the local BM25
index and a remote Search-R1 server (e5 + faiss on a GPU box, or ``toolgym serve retriever``) are
interchangeable. A retriever that cannot answer raises ``RetrieverError``: it never returns an empty list in
place of a failure, because an empty result reads to the policy as "nothing matched" and to a trainer as a
legitimate zero reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict


class RetrieverError(RuntimeError):
    """The retriever could not answer (unreachable, timed out, malformed reply). The message says why."""

    def __init__(self, message: str, attempts: int = 1):
        super().__init__(message)
        self.attempts = attempts


class Hit(BaseModel):
    """A retrieved document in the Search-R1 corpus format: ``contents`` is the title line, then the text."""

    model_config = ConfigDict(frozen=True)

    id: str
    contents: str
    score: float | None = None

    @property
    def title(self) -> str:
        return _unquote(self.contents.split("\n", 1)[0].strip())

    @property
    def text(self) -> str:
        _, _, text = self.contents.partition("\n")
        return text.strip()

    @classmethod
    def from_document(cls, doc: Mapping[str, Any], score: float | None = None) -> Hit:
        """A hit from a corpus row: ``{"id", "contents"}``, or ``{"title", "text"}`` as in some corpora."""
        if "contents" in doc:
            contents = str(doc["contents"])
        elif "text" in doc:
            contents = f"{doc.get('title', '')}\n{doc['text']}"
        else:
            raise ValueError(f"a document needs 'contents' (or 'title' and 'text'); got keys {sorted(doc)}")
        doc_id = doc.get("id", doc.get("_id", ""))
        return cls(id=str(doc_id), contents=contents, score=None if score is None else float(score))

    def document(self) -> dict[str, str]:
        return {"id": self.id, "contents": self.contents}


def _unquote(title: str) -> str:
    """Wikipedia dumps in the Search-R1 format quote the title line (``"Paris"``)."""
    return title[1:-1] if len(title) >= 2 and title[0] == title[-1] == '"' else title


@runtime_checkable
class Retriever(Protocol):
    """Anything that maps a batch of queries to the top ``topk`` hits of each, best first."""

    def retrieve(self, queries: list[str], topk: int) -> list[list[Hit]]: ...
