"""The ``search`` tool: a query in, the top documents out, rendered as Search-R1 renders them.

``Doc 1 (Title: …) text`` lines, one per document, best first; with the ``xml`` format and
``result_tag="information"`` (the Search envs' default) the observation is Search-R1's
``<information>…</information>``, so prompts and SFT data from Search-R1 carry over. Each document is cut to
``max_doc_chars`` (its head: documents put the important part first), the whole observation to
``max_chars``.

The tool is stateless; the retriever behind it (a shared BM25 index or a remote service, see
``toolgym.search``) is built once and shared. A retriever failure is an ``infra_error`` result that says the
search service failed, never an empty success, so trainers can drop the episode instead of scoring the policy.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from toolgym.core.types import ToolResult
from toolgym.search.base import Hit, Retriever, RetrieverError
from toolgym.tools.base import Tool, register_tool
from toolgym.util.text import clip_middle

MAX_QUERY_CHARS = 1_000


def format_hits(hits: list[Hit], max_doc_chars: int = 1_000) -> str:
    """Search-R1's rendering: ``Doc i (Title: …) text`` per document."""
    return "\n".join(
        f"Doc {i} (Title: {h.title}) {_head(h.text, max_doc_chars)}" for i, h in enumerate(hits, 1)
    )


def _head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 0)].rstrip() + "…"


@register_tool
class SearchTool(Tool):
    """Search a document collection; see the module docstring.

    ``retriever`` is a ``Retriever`` (shared: the tool closes it only if ``owns_retriever``), the URL of a
    retriever service, or None for the default generated world's index.
    """

    name = "search"
    description = (
        "Search the knowledge base and return the most relevant documents, each with its title and text. "
        "Search for one thing at a time, such as a name (e.g. 'Drelmar Institute')."
    )
    primary_arg = "query"

    class Args(BaseModel):
        query: str = Field(
            description="What to look for: a name or a few keywords.", max_length=MAX_QUERY_CHARS
        )

    def __init__(
        self,
        retriever: Retriever | str | None = None,
        *,
        topk: int = 3,
        max_doc_chars: int = 1_000,
        max_chars: int = 4_000,
        owns_retriever: bool | None = None,
    ):
        if topk < 1:
            raise ValueError(f"topk must be >= 1, got {topk}")
        from toolgym.search.sources import make_retriever  # lazily: bm25s and httpx load only when used

        self.retriever = make_retriever(retriever)
        #: whether ``close`` closes the retriever: by default only a client the tool opened from a URL
        self.owns_retriever = isinstance(retriever, str) if owns_retriever is None else owns_retriever
        self.topk = int(topk)
        self.max_doc_chars = int(max_doc_chars)
        self.max_chars = int(max_chars)

    def run(self, args: SearchTool.Args) -> ToolResult:
        query = " ".join(args.query.split())
        if not query:
            return ToolResult(
                name=self.name, status="error", output="the query is empty: write what to look for"
            )
        try:
            hits = self.retriever.retrieve([query], self.topk)[0]
        except RetrieverError as exc:
            return ToolResult(
                name=self.name,
                status="infra_error",
                output=f"the search service failed, this is not your fault: {exc}",
                metadata={"query": query, "infra_error": str(exc), "attempts": exc.attempts},
            )
        hits = hits[: self.topk]
        metadata = {"query": query, "doc_ids": [h.id for h in hits], "scores": [h.score for h in hits]}
        if not hits:
            output = (
                f'No documents found for "{query}". Try other words, such as the exact name of what you want.'
            )
            return ToolResult(name=self.name, output=output, metadata=metadata)
        output = clip_middle(format_hits(hits, self.max_doc_chars), self.max_chars)
        return ToolResult(name=self.name, output=output, metadata=metadata)

    def close(self) -> None:
        close = getattr(self.retriever, "close", None)
        if self.owns_retriever and callable(close):
            close()
