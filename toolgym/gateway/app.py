"""The gateway's HTTP face: OpenAI's chat completions per session, and the session's life around them.

- ``POST /sessions``: open a session (free, or on a toolgym task: its prompt and tools come back);
- ``POST /sessions/{id}/v1/chat/completions``: OpenAI chat completions, recorded token by token (stream too);
  ``GET /sessions/{id}/v1/models``: the served model;
- ``POST /v1/chat/completions`` with an ``X-Session-Id`` header: the same, for clients that cannot change
  the path;
- ``POST /sessions/{id}/tools/{name}``: run the env's tool in its sandbox (the agent's function call): its
  observation, status, exit code and the command's own output (``ToolRun``);
- ``POST /sessions/{id}/finish``: the env's verdict on the final answer, or the client's own reward;
- ``GET /sessions/{id}`` and ``/trajectory``: its state, and its record (the rollout JSONL's episode plus
  every segment);
- ``DELETE /sessions/{id}``: end it (its env is given back), answered with the final record;
- ``GET /health``: status and counts.

Errors are OpenAI's error body: 404 for an unknown session, 410 for one that ended or expired (saying which),
422 for a malformed request, 400 for a budget past the context, 429 with ``Retry-After`` when every session
place is taken, 502 when the engine failed.

Streaming (``stream: true``) sends OpenAI's ``chat.completion.chunk`` events. The turn is sampled first and
then streamed, so the record is written once the engine is done: a client that goes away mid-stream leaves
the sampled turn recorded with ``delivered: false``, and its next call (without that turn) starts a new
segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse

from toolgym.gateway.core import Completion, GatewayConfig, GatewayCore, GatewayError
from toolgym.gateway.protocol import ChatRequest, FinishBody, OpenSession, ToolCallBody, error
from toolgym.rollout.clients.errors import ClientError

SESSION_HEADER = "X-Session-Id"


def create_app(
    config: GatewayConfig, client: Any = None, renderer: Any = None, core: GatewayCore | None = None
) -> FastAPI:
    """The gateway app over ``core`` (default: one built from ``config``, ``client`` and ``renderer``; the
    engine starts with the app)."""
    core = core or GatewayCore(config, client, renderer)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await core.start()
        reaper = asyncio.create_task(_reap(core))
        try:
            yield
        finally:
            reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reaper
            await core.close()

    app = FastAPI(title="toolgym gateway", lifespan=lifespan)
    app.state.gateway = core

    @app.exception_handler(GatewayError)
    async def gateway_error(_request: Request, exc: GatewayError) -> JSONResponse:
        kind = "rate_limit_error" if exc.status == 429 else "invalid_request_error"
        return error(exc.status, exc.message, kind, **exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(_problem(e) for e in exc.errors())
        return error(422, f"invalid request: {problems}")

    @app.get("/health")
    async def health() -> dict[str, Any]:
        store = core.store
        return {
            "status": "ok",
            "model": config.name,
            "sessions_open": len(store.open),
            "sessions_opened": store.opened_count,
            "sessions_expired": store.expired_count,
            "max_sessions": config.max_sessions,
            "completions": core.completions,
            "tokens_recorded": core.tokens_recorded,
        }

    @app.post("/sessions", status_code=201)
    async def open_session(body: OpenSession | None = None) -> JSONResponse:
        from toolgym.gateway.sessions import SessionsFull

        try:
            session = await core.open(body or OpenSession())
        except SessionsFull as exc:
            return error(429, str(exc), "rate_limit_error", **{"Retry-After": "1"})
        except ValueError as exc:
            return error(409, str(exc))
        return JSONResponse(
            {
                "session_id": session.id,
                "base_url": f"/sessions/{session.id}/v1",
                "env_id": session.env_id,
                "task_id": session.task_id,
                "messages": session.prompt,
                "tools": session.tools,
                "idle_timeout_s": config.idle_timeout_s,
            },
            status_code=201,
        )

    @app.get("/sessions/{session_id}")
    async def session_state(session_id: str) -> dict[str, Any]:
        session = core.get(session_id)
        return {
            "session_id": session.id,
            "env_id": session.env_id,
            "task_id": session.task_id,
            "segments": len(session.record.segments),
            "calls": sum(len(s.calls) for s in session.record.segments),
            "verdict": session.verdict.model_dump(mode="json") if session.verdict else None,
            "idle_s": time.monotonic() - session.last_used,
        }

    @app.get("/sessions/{session_id}/trajectory")
    async def trajectory(session_id: str) -> dict[str, Any]:
        session = core.get(session_id)
        async with session.lock:
            return session.trajectory("open")

    @app.delete("/sessions/{session_id}")
    async def end_session(session_id: str) -> dict[str, Any]:
        return await core.end(session_id)

    @app.post("/sessions/{session_id}/tools/{name}")
    async def run_tool(session_id: str, name: str, body: ToolCallBody) -> dict[str, Any]:
        run = await core.run_tool(core.get(session_id), name, body.arguments)
        return run.body()

    @app.post("/sessions/{session_id}/finish")
    async def finish(session_id: str, body: FinishBody) -> dict[str, Any]:
        verdict = await core.finish(core.get(session_id), body)
        return {
            "session_id": session_id,
            "reward": verdict.reward,
            "verdict": verdict.model_dump(mode="json"),
        }

    def models_body() -> dict[str, Any]:
        card = {"id": config.name, "object": "model", "created": core.created, "owned_by": "toolgym"}
        return {"object": "list", "data": [card]}

    @app.get("/sessions/{session_id}/v1/models")
    async def session_models(session_id: str) -> dict[str, Any]:
        core.get(session_id)
        return models_body()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return models_body()

    @app.post("/sessions/{session_id}/v1/chat/completions")
    async def session_chat(session_id: str, request: ChatRequest) -> Any:
        return await _answer(core, session_id, request)

    @app.post("/v1/chat/completions")
    async def header_chat(request: ChatRequest, x_session_id: str | None = Header(None)) -> Any:
        if not x_session_id:
            raise GatewayError(
                400, f"name the session in the {SESSION_HEADER} header, or post to /sessions/{{id}}/v1/..."
            )
        return await _answer(core, x_session_id, request)

    return app


async def _answer(core: GatewayCore, session_id: str, request: ChatRequest) -> Any:
    session = core.get(session_id)
    try:
        completion = await core.complete(session, request)
    except ClientError as exc:
        raise GatewayError(502, f"the engine failed: {exc}") from None
    name = core.config.name
    if request.stream:
        completion.call.delivered = False
        return StreamingResponse(_chunks(core, name, request, completion), media_type="text/event-stream")
    return JSONResponse(_completion_body(core, name, request, completion))


def _completion_body(core: GatewayCore, name: str, request: ChatRequest, done: Completion) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": done.reply,
        "finish_reason": done.finish_reason,
        "logprobs": _logprobs(core, done) if request.logprobs else None,
    }
    body: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [choice],
        "usage": _usage(done),
    }
    if request.return_token_ids:
        body["prompt_token_ids"] = list(done.context.ids)
        choice["token_ids"] = list(done.generation.token_ids)
    return body


def _usage(done: Completion) -> dict[str, int]:
    prompt, completion = len(done.context.ids), len(done.generation.token_ids)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _logprobs(core: GatewayCore, done: Completion) -> dict[str, Any]:
    ids = list(done.generation.token_ids)
    values = done.generation.logprobs or [0.0] * len(ids)
    tokenizer = core.renderer.tokenizer if core.renderer is not None else None
    tokens = tokenizer.convert_ids_to_tokens(ids) if tokenizer is not None else [str(i) for i in ids]
    return {
        "content": [
            {"token": str(t), "logprob": float(lp), "bytes": list(str(t).encode()), "top_logprobs": []}
            for t, lp in zip(tokens, values, strict=True)
        ]
    }


#: characters per streamed content delta
_PIECE = 32


async def _chunks(core: GatewayCore, name: str, request: ChatRequest, done: Completion) -> AsyncIterator[str]:
    """The reply as OpenAI's ``chat.completion.chunk`` events; the call is marked delivered at the end."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
    }
    base["model"] = name

    def event(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        choice.update(extra)
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"

    first: dict[str, Any] = {"role": "assistant", "content": ""}
    yield event(first)
    content = done.reply.get("content") or ""
    for at in range(0, len(content), _PIECE):
        yield event({"content": content[at : at + _PIECE]})
        await asyncio.sleep(0)
    for index, call in enumerate(done.reply.get("tool_calls") or []):
        yield event({"tool_calls": [{"index": index, **call}]})
    extra: dict[str, Any] = {}
    if request.return_token_ids:
        extra["token_ids"] = list(done.generation.token_ids)
    if request.logprobs:
        extra["logprobs"] = _logprobs(core, done)
    final = event({}, done.finish_reason, **extra)
    if request.return_token_ids:
        final = final.replace(
            '"choices"', f'"prompt_token_ids": {json.dumps(done.context.ids)}, "choices"', 1
        )
    yield final
    if (request.stream_options or {}).get("include_usage"):
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': _usage(done)})}\n\n"
    done.call.delivered = True  # the reply's last chunk went out (the generator resumes once it is sent)
    yield "data: [DONE]\n\n"


async def _reap(core: GatewayCore) -> None:
    """Expire idle sessions, checking a few times per timeout."""
    period = min(max(core.config.idle_timeout_s / 4, 0.05), 5.0)
    while True:
        await asyncio.sleep(period)
        await core.reap()


def _problem(err: dict[str, Any]) -> str:
    where = ".".join(str(p) for p in err.get("loc", ()) if p != "body")
    message = str(err.get("msg", "invalid"))
    return f"{where}: {message}" if where else message


__all__ = ["SESSION_HEADER", "create_app"]
