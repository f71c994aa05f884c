"""toolgym/Search-v0 and toolgym/SearchMultiHop-v0: Search-R1 style question answering with a search tool.

The model searches a document collection (``<search>query</search>`` in the xml format), reads the top
documents (``<information>Doc 1 (Title: …) …</information>``) and answers (``<answer>…</answer>``), scored by
exact match (or token F1) against the gold answers.

By default the questions and documents come from a procedural knowledge world of fictional entities
(``toolgym.search.world``), so no question is answerable from pre-training and the env works offline with a
BM25 index built in well under a second. At scale, point it at your own data: ``tasks=`` a QA file
(``question``, ``golden_answers``) and ``corpus=`` a JSONL corpus, ``index=`` a saved index, or
``retriever=`` the URL of a Search-R1 retriever service (e5 + faiss, or ``toolgym serve retriever``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.core.registry import register_env
from toolgym.core.task import Task, TaskSource
from toolgym.core.types import ToolCall
from toolgym.envs.base import ToolEnv
from toolgym.envs.qa_tasks import lazy_qa_source
from toolgym.rewards.qa import Mode, QAVerifier
from toolgym.search.base import Retriever
from toolgym.search.world import KnowledgeWorld
from toolgym.tools.search import SearchTool

SYSTEM_PROMPT = (
    "Answer the question using the search tool. The questions are about facts you cannot know without "
    "searching, and some need several searches: find one fact at a time, searching for the exact name of the "
    "person, place, organisation or work the fact is about. When you know the answer, give only the answer "
    "itself (a name, a number or a few words), without explanation."
)
DEFAULT_WORLD_SIZE = 2_000  # also toolgym.search.sources.DEFAULT_WORLD_SIZE (not imported: it loads bm25s)


def search_oracle(task: Task) -> Sequence[ToolCall | str]:
    """A correct search-then-answer solution: search each entity on the path to the answer, then answer."""
    searches = [ToolCall(name="search", arguments={"query": q}) for q in task.data["queries"]]
    return [*searches, str(task.answer)]


def make_search_env(
    world_size: int = DEFAULT_WORLD_SIZE,
    world_seed: int = 0,
    hops: int | Sequence[int] = (1, 2, 3),
    tasks: TaskSource | str | Path | None = None,
    corpus: str | Path | None = None,
    index: str | Path | None = None,
    retriever: Retriever | str | None = None,
    topk: int = 3,
    max_doc_chars: int = 1_000,
    reward: Mode = "em",
    action_format: str = "xml",
    max_turns: int = 6,
    **env_kwargs: Any,
) -> ToolEnv:
    """A Search env.

    Args:
        world_size, world_seed: the generated world (documents and questions) used without ``tasks``.
        hops: documents per generated question: 1, 2 or 3, or several to draw from uniformly.
        tasks: QA tasks instead of the world's (a ``TaskSource`` or a QA file for ``qa_source``, read once per
            process on the first draw); they need a
            ``corpus``, ``index`` or ``retriever`` holding their answers.
        corpus, index, retriever: where to search instead of the world's BM25 index: a JSONL corpus
            (``{"id", "contents"}``), a saved ``BM25Index`` directory, a retriever URL or object.
        topk: documents per search. max_doc_chars: each document's cut.
        reward: ``"em"`` (exact match) or ``"f1"`` (token F1).
    """
    if reward not in ("em", "f1"):
        raise ValueError(f"reward must be 'em' (exact match) or 'f1' (token F1), got {reward!r}")
    own_documents = corpus is not None or index is not None or retriever is not None
    if tasks is None:
        source: TaskSource = KnowledgeWorld(world_size, world_seed).tasks(hops)
    elif not own_documents:
        raise ValueError("QA tasks need documents to search: pass corpus=, index= or retriever=")
    else:
        source = tasks if isinstance(tasks, TaskSource) else lazy_qa_source(tasks)
    from toolgym.search.sources import make_retriever  # here, not at the top: it loads bm25s and httpx

    searcher = make_retriever(
        retriever, corpus=corpus, index=index, world_size=world_size, world_seed=world_seed
    )
    owns = isinstance(retriever, str)  # a client opened from a URL is this env's to close
    tool = SearchTool(searcher, topk=topk, max_doc_chars=max_doc_chars, owns_retriever=owns)
    if action_format == "xml" and "parser_options" not in env_kwargs:
        env_kwargs["parser_options"] = {"result_tag": "information"}
    env_kwargs.setdefault("system_prompt", SYSTEM_PROMPT)
    return ToolEnv(source, [tool], QAVerifier(reward), action_format, max_turns=max_turns, **env_kwargs)


@register_env(
    "toolgym/Search-v0",
    tools=["search"],
    task_source="procedural fictional knowledge world, 1-3 hops (or QA files)",
    description="Search-R1 style QA: search documents (local BM25 or a retriever service), answer; EM or F1.",
    oracle=search_oracle,
)
def make_search_v0(**kwargs: Any) -> ToolEnv:
    return make_search_env(**kwargs)


@register_env(
    "toolgym/SearchMultiHop-v0",
    tools=["search"],
    task_source="procedural fictional knowledge world, 2-3 hops",
    description="Multi-hop Search-R1 style QA: each question needs 2-3 documents found one after another.",
    oracle=search_oracle,
)
def make_search_multihop_v0(hops: int | Sequence[int] = (2, 3), max_turns: int = 8, **kwargs: Any) -> ToolEnv:
    return make_search_env(hops=hops, max_turns=max_turns, **kwargs)
