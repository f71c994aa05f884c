"""The search tool: Search-R1 rendering, observation limits, and failures as observations."""

import pytest

from toolgym.core.types import ToolCall
from toolgym.search.base import Hit, RetrieverError
from toolgym.search.sources import world_index
from toolgym.tools.base import make_tool
from toolgym.tools.search import SearchTool, format_hits


class BrokenRetriever:
    def __init__(self):
        self.calls = 0

    def retrieve(self, queries, topk):
        self.calls += 1
        raise RetrieverError("retriever http://gpu-box:8000/retrieve failed after 4 attempts: HTTP 503", 4)


class FixedRetriever:
    def __init__(self, hits):
        self.hits, self.seen = hits, []

    def retrieve(self, queries, topk):
        self.seen.append((queries, topk))
        return [list(self.hits) for _ in queries]


def test_results_are_rendered_like_search_r1(world, index):
    tool = SearchTool(index, topk=3)
    query = f"{world.name(3)} born"  # "born" matches every person, so there are three documents
    result = tool(ToolCall(name="search", arguments={"query": query}))
    assert result.ok and result.metadata["query"] == query
    lines = result.output.split("\n")
    assert len(lines) == 3 and lines[0].startswith(f"Doc 1 (Title: {world.name(3)}) {world.name(3)} is")
    assert [line.split(" (")[0] for line in lines] == ["Doc 1", "Doc 2", "Doc 3"]
    assert result.metadata["doc_ids"][0] == "3" and len(result.metadata["scores"]) == 3


def test_documents_and_the_whole_observation_are_cut():
    hits = [Hit(id=str(i), contents=f"Title {i}\n" + "word " * 200) for i in range(5)]
    short = SearchTool(FixedRetriever(hits), topk=5, max_doc_chars=50)("query")
    assert all(len(line) < 80 and line.endswith("…") for line in short.output.split("\n"))
    clipped = SearchTool(FixedRetriever(hits), topk=5, max_doc_chars=10_000, max_chars=1_000)("query")
    assert len(clipped.output) <= 1_000 and "characters cut" in clipped.output
    assert clipped.output.startswith("Doc 1 (Title: Title 0)") and clipped.output.rstrip().endswith("word")


def test_the_tool_asks_for_topk_and_keeps_at_most_topk():
    retriever = FixedRetriever([Hit(id=str(i), contents=f"T{i}\nx") for i in range(6)])
    result = SearchTool(retriever, topk=2)("  several   spaces ")
    assert retriever.seen == [(["several spaces"], 2)] and result.metadata["doc_ids"] == ["0", "1"]


def test_a_retriever_failure_is_an_infra_error_observation_not_an_empty_success():
    result = SearchTool(BrokenRetriever())(ToolCall(name="search", arguments={"query": "x"}, id="c1"))
    assert result.status == "infra_error" and result.call_id == "c1"
    assert "search service failed" in result.output and "HTTP 503" in result.output
    assert result.metadata["attempts"] == 4 and "HTTP 503" in result.metadata["infra_error"]


def test_an_unreachable_url_is_an_infra_error(closed_port_url):
    tool = SearchTool(closed_port_url)
    tool.retriever.retries = 0
    result = tool("anything")
    assert result.status == "infra_error" and "cannot reach it" in result.output
    tool.close()


def test_no_hits_is_said_plainly(index):
    result = SearchTool(index)("zzqxv")
    assert result.ok and result.output.startswith('No documents found for "zzqxv"')
    assert result.metadata["doc_ids"] == []


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_queries_are_the_models_error(index, query):
    result = SearchTool(index)({"query": query})
    assert result.status == "error" and "empty" in result.output


def test_registered_tool_defaults_to_the_generated_world():
    tool = make_tool("search")
    assert tool.retriever is world_index()
    assert tool.schema()["function"]["parameters"]["required"] == ["query"]
    assert tool("Drelmar").ok


def test_format_hits_unquotes_wikipedia_titles():
    text = format_hits([Hit(id="1", contents='"Paris"\nParis is the capital of France.')])
    assert text == "Doc 1 (Title: Paris) Paris is the capital of France."
