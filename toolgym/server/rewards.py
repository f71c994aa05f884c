"""``toolgym serve rewards``: toolgym's verifiers over HTTP, for trainers that score remotely.

``POST /score`` takes ``{"response": str, "verification_info": {"type": ..., ...}}`` and returns
``{"score", "passed", "details", "error"}``; ``POST /score_batch`` takes ``{"items": [...]}`` and returns
``{"results": [...]}`` in order; ``GET /health`` lists the scorer types. The bodies are in ``reward_api``,
the scorers in ``toolgym.rewards.scorers`` (the same table verl's ``compute_score`` uses).

Errors are never rewards: a malformed body, an unknown ``type`` or a ``verification_info`` without what its
scorer needs is HTTP 422 (nothing is scored); a verifier that cannot judge gives a result with ``error``
set; an unexpected failure inside a scorer is also an ``error`` result, never a plain 0.

Concurrency is bounded: scoring runs on ``max_concurrency`` threads (math-verify itself on its own process
pool, see ``toolgym.rewards.worker_pool``); requests beyond that wait their turn, none are dropped.

``save_dir`` records every computation (request, result, latency) as JSON lines in
``save_dir/rewards-<time>-<pid>.jsonl``, written every ``save_freq`` records and on shutdown, for debugging.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException

from toolgym.rewards.scorers import BadVerificationInfo, UnknownScorer, get_scorer, score, scorer_names
from toolgym.server.reward_api import BatchRequest, BatchResult, ScoreRequest, ScoreResult
from toolgym.server.serving import serve_app


class Recorder:
    """Appends one JSON line per computation to a file in ``save_dir``, every ``save_freq`` records."""

    def __init__(self, save_dir: str | Path, save_freq: int = 100):
        if save_freq < 1:
            raise ValueError(f"save_freq must be >= 1, got {save_freq}")
        directory = Path(save_dir)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"rewards-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.jsonl"
        self.save_freq = save_freq
        self._lines: list[str] = []
        self._lock = threading.Lock()

    def add(self, request: ScoreRequest, result: ScoreResult, seconds: float) -> None:
        record = {
            "time": time.time(),
            "latency_ms": round(seconds * 1000, 3),
            "response": request.response,
            "verification_info": request.verification_info,
            "result": result.model_dump(),
        }
        line = json.dumps(record, default=str)
        with self._lock:
            self._lines.append(line)
            if len(self._lines) >= self.save_freq:
                self._write()

    def flush(self) -> None:
        with self._lock:
            self._write()

    def _write(self) -> None:
        if self._lines:
            with self.path.open("a", encoding="utf-8") as fh:
                fh.write("\n".join(self._lines) + "\n")
            self._lines.clear()


def _check(request: ScoreRequest, where: str = "") -> None:
    """Refuse a request no scorer can take, before anything is scored (HTTP 422)."""
    kind = request.verification_info.get("type")
    if not isinstance(kind, str) or not kind:
        raise HTTPException(
            422, f'{where}verification_info needs a "type" (one of: {", ".join(scorer_names())})'
        )
    try:
        get_scorer(kind)
    except UnknownScorer as exc:
        raise HTTPException(422, f"{where}{exc}") from None


def _score_one(request: ScoreRequest, recorder: Recorder | None) -> ScoreResult:
    started = time.perf_counter()
    try:
        verdict = score(request.response, request.verification_info)
    except (BadVerificationInfo, UnknownScorer):
        raise
    except Exception as exc:  # a scorer bug: an explicit error result, never a silent 0
        result = ScoreResult(
            score=0.0, passed=False, error=f"internal scorer error: {type(exc).__name__}: {exc}"
        )
    else:
        result = ScoreResult(
            score=verdict.reward, passed=verdict.passed, details=verdict.details, error=verdict.error
        )
    if recorder is not None:
        recorder.add(request, result, time.perf_counter() - started)
    return result


def create_app(
    *,
    max_concurrency: int = 32,
    save_dir: str | Path | None = None,
    save_freq: int = 100,
    warm: bool = True,
) -> FastAPI:
    """The reward server app; ``warm`` starts the math-verify workers with the app, not on a request."""
    if max_concurrency < 1:
        raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
    threads: dict[str, ThreadPoolExecutor] = {}  # created on first use, so the app can be started again
    recorder = Recorder(save_dir, save_freq) if save_dir is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if warm:
            from toolgym.rewards.math import math_pool

            math_pool().start()
        yield
        executor = threads.pop("executor", None)
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)
        if recorder is not None:
            recorder.flush()

    app = FastAPI(title="toolgym rewards", description=__doc__, lifespan=lifespan)
    app.state.recorder = recorder

    async def run(request: ScoreRequest, where: str = "") -> ScoreResult:
        if "executor" not in threads:
            threads["executor"] = ThreadPoolExecutor(max_concurrency, thread_name_prefix="toolgym-score")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(threads["executor"], _score_one, request, recorder)
        except (BadVerificationInfo, UnknownScorer) as exc:
            raise HTTPException(422, f"{where}{exc}") from None

    @app.post("/score")
    async def score_endpoint(request: ScoreRequest) -> ScoreResult:
        _check(request)
        return await run(request)

    @app.post("/score_batch")
    async def score_batch_endpoint(batch: BatchRequest) -> BatchResult:
        for i, item in enumerate(batch.items):
            _check(item, f"items[{i}]: ")
        results = await asyncio.gather(*(run(item, f"items[{i}]: ") for i, item in enumerate(batch.items)))
        return BatchResult(results=list(results))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "types": scorer_names(), "max_concurrency": max_concurrency}

    return app


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym serve rewards",
        description="Serve toolgym's verifiers: POST /score and /score_batch (see toolgym.server.rewards).",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8001, help="port (default 8001)")
    p.add_argument("--max-concurrency", type=int, default=32, help="computations at once (default 32)")
    p.add_argument(
        "--math-workers", type=int, default=None, help="math-verify processes (default min(4, cpus))"
    )
    p.add_argument(
        "--save-dir", default=None, help="record every computation as JSON lines in this directory"
    )
    p.add_argument("--save-freq", type=int, default=100, help="write the records every N computations")
    p.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    if args.math_workers is not None:
        if args.math_workers < 1:
            raise ValueError(f"--math-workers must be >= 1, got {args.math_workers}")
        os.environ["TOOLGYM_MATH_WORKERS"] = str(args.math_workers)
    app = create_app(max_concurrency=args.max_concurrency, save_dir=args.save_dir, save_freq=args.save_freq)
    banner = (
        f"toolgym rewards: POST http://{args.host}:{args.port}/score (types: {', '.join(scorer_names())})"
    )
    return serve_app(app, args, banner, backlog=4096)


if __name__ == "__main__":
    raise SystemExit(main())
