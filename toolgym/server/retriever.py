"""``toolgym serve retriever``: a Search-R1 compatible retriever service over a BM25 index.

``POST /retrieve`` takes ``{"queries": [...], "topk": k, "return_scores": bool}`` and returns
``{"result": [[...], ...]}``, one list per query: ``{"document": {"id", "contents"}, "score": s}`` items with
``return_scores``, bare documents without, exactly as Search-R1's ``retrieval_server.py``. So one process
can serve a whole cluster of rollout workers, and Search-R1's own clients (and ``RemoteRetriever``) work
against it unchanged. ``GET /health`` reports the number of documents. The lists are ``BM25Index``'s: equal
scores in corpus order, so a reply is the same on every machine.

Documents come from a JSONL corpus (``--corpus``), a saved index (``--index``; build one with
``--save-index``) or a generated knowledge world (``--world SIZE``).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence, Sized
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, Field

from toolgym.search.base import Retriever
from toolgym.search.bm25 import BM25Index
from toolgym.search.world import KnowledgeWorld
from toolgym.server.serving import serve_app


class RetrieveRequest(BaseModel):
    queries: list[str]
    topk: int | None = Field(default=None, description="documents per query; the server's default if absent")
    return_scores: bool = False


def create_app(retriever: Retriever, *, topk: int = 3, topk_max: int = 100) -> FastAPI:
    """The FastAPI app serving ``retriever``. ``topk`` is the default per query, ``topk_max`` the most a
    request may ask for (a larger request is refused with HTTP 422 rather than silently cut)."""
    app = FastAPI(title="toolgym retriever", description=__doc__)

    @app.post("/retrieve")
    def retrieve(request: RetrieveRequest) -> dict[str, Any]:
        k = topk if request.topk is None else request.topk
        if not 1 <= k <= topk_max:
            raise HTTPException(status_code=422, detail=f"topk must be between 1 and {topk_max}, got {k}")
        hits = retriever.retrieve(request.queries, k)
        if request.return_scores:
            return {"result": [[{"document": h.document(), "score": h.score} for h in q] for q in hits]}
        return {"result": [[h.document() for h in q] for q in hits]}

    @app.get("/health")
    def health() -> dict[str, Any]:
        size = len(retriever) if isinstance(retriever, Sized) else None
        return {"status": "ok", "documents": size}

    return app


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    return _build_parser().parse_args(argv)


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym serve retriever",
        description="Serve Search-R1's POST /retrieve over a BM25 index.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--corpus", metavar="FILE", help='a JSONL corpus: {"id", "contents"} per line')
    source.add_argument("--index", metavar="DIR", help="a saved index (see --save-index)")
    source.add_argument(
        "--world", type=int, metavar="SIZE", help="a generated knowledge world of SIZE documents"
    )
    p.add_argument("--world-seed", type=int, default=0, help="the seed of --world (default 0)")
    p.add_argument("--save-index", metavar="DIR", help="save the index built from --corpus/--world to DIR")
    p.add_argument("--mmap", action="store_true", help="memory-map a saved --index instead of reading it")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000, as Search-R1)")
    p.add_argument("--topk", type=int, default=3, help="documents per query when a request names none")
    p.add_argument("--topk-max", type=int, default=100, help="the most documents a request may ask for")
    p.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    return p


def load_index(args: argparse.Namespace) -> BM25Index:
    if args.index:
        if args.save_index:
            raise ValueError("--save-index applies to --corpus or --world, not --index")
        return BM25Index.load(args.index, mmap=args.mmap)
    if args.corpus:
        index = BM25Index.from_jsonl(args.corpus)
    else:
        index = BM25Index.build(KnowledgeWorld(args.world, args.world_seed).documents())
    if args.save_index:
        index.save(args.save_index)
    return index


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not 1 <= args.topk <= args.topk_max:
        raise ValueError(f"--topk must be between 1 and --topk-max ({args.topk_max}), got {args.topk}")
    started = time.perf_counter()
    index = load_index(args)
    banner = (
        f"toolgym retriever: {len(index):,} documents ready in {time.perf_counter() - started:.1f} s; "
        f"POST http://{args.host}:{args.port}/retrieve"
    )
    return serve_app(create_app(index, topk=args.topk, topk_max=args.topk_max), args, banner)


if __name__ == "__main__":
    raise SystemExit(main())
