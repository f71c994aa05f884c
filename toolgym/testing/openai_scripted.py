"""Scripted OpenAI-compatible servers: ``POST /v1/chat/completions`` answered by a scripted policy
(``scripted_chat_app``), and ``POST /v1/completions`` with token ids answered by a ``ScriptedClient``
(``scripted_completions_app``: what ``toolgym rollout --server URL`` talks to, without an engine).

Frameworks that talk to a model only over the OpenAI HTTP API (verifiers' clients, agent harnesses) can
then be driven by an env's oracle end to end, offline, with rewards of 1.0 as well as 0.0: serve
``scripted_chat_app(oracle_policy(...))`` with ``toolgym.testing.servers.serve_in_thread`` and point the
framework's ``base_url`` at ``<url>/v1``. The policy sees the request's session id (the ``X-Session-ID``
header verifiers sends, else ``chat``), the turn (how many assistant messages the conversation has) and the
conversation's text; every request body is kept in ``app.state.requests``.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from fastapi import FastAPI, Request

from toolgym.testing.scripted import Policy


def scripted_chat_app(policy: Policy, model: str = "scripted") -> FastAPI:
    """The FastAPI app (see the module docstring)."""
    app = FastAPI()
    app.state.requests = []
    ids = itertools.count()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "toolgym"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> dict[str, Any]:
        body = await request.json()
        app.state.requests.append(body)
        messages = body.get("messages", [])
        turn = sum(m.get("role") == "assistant" for m in messages)
        text = "\n".join(_text(m.get("content")) for m in messages)
        reply = policy(request.headers.get("x-session-id", "chat"), turn, text)
        return {
            "id": f"chatcmpl-{next(ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", model),
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": len(text.split()),
                "completion_tokens": len(reply.split()),
                "total_tokens": len(text.split()) + len(reply.split()),
            },
        }

    return app


def scripted_completions_app(client: Any, model: str = "scripted") -> FastAPI:
    """vLLM's token-in/token-out completions endpoint over ``client`` (a ``ScriptedClient``): the prompt's
    token ids in, the turn's token ids and logprobs out, each request under its ``X-Request-ID`` session."""
    from toolgym.rollout.clients.base import Sampling

    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(request: Request) -> dict[str, Any]:
        body = await request.json()
        session = request.headers["x-request-id"]
        gen = await client.generate(body["prompt"], Sampling(max_tokens=body["max_tokens"]), session)
        choice = {
            "index": 0,
            "text": "",
            "token_ids": gen.token_ids,
            "logprobs": {"token_logprobs": gen.logprobs, "tokens": [f"token_id:{t}" for t in gen.token_ids]},
            "finish_reason": gen.finish_reason,
            "stop_reason": None,
        }
        return {"id": "cmpl", "object": "text_completion", "model": model, "choices": [choice]}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model"}]}

    return app


def _text(content: Any) -> str:
    """A message's text: a string, or the text parts of a content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


__all__ = ["scripted_chat_app", "scripted_completions_app"]
