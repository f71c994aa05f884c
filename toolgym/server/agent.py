"""``toolgym serve agent``: an env and a model as one OpenAI-compatible chat model, tools run server-side.

``POST /v1/chat/completions`` plays one whole episode per request through the episode runner (the same
``run_episode`` the collector and the trainer adapters call; the env's own ``step`` runs the tools and the
verifier) and answers with the agent's final answer as the assistant message. Any OpenAI client can call an
agent that uses a calculator, a Python sandbox or a search index without implementing a tool loop itself.

What the request means:

- the task is the last ``user`` message (earlier messages and the request's ``tools`` are not replayed: the
  env brings its own system prompt and tools), unless the request pins one of the env's tasks with a
  ``task_id`` field (``extra_body={"task_id": ...}`` in the ``openai`` client) or ``metadata.task_id``; a
  pinned task is verified and its verdict returned;
- ``max_completion_tokens`` (or ``max_tokens``) is the episode's token budget after the prompt, model turns
  and tool outputs together; ``temperature``, ``top_p``, ``seed`` and the engine's other sampling fields
  (``top_k``, ``min_p``, the penalties) set the sampling (the seed also seeds ``env.reset``); ``stream``
  and ``n > 1`` are refused.

The response is a ``chat.completion`` whose ``usage`` counts the prompt and the generated tokens (tool output
tokens are not completion tokens) and adds ``turns`` and ``tool_calls``, and whose ``toolgym`` field carries
the episode: env and task id, turns, tool calls and errors, stop reason, the transcript (``messages``) and,
for a pinned task, ``reward`` and ``verdict``. ``finish_reason`` is ``stop`` when the agent answered and
``length`` when it ran out of turns or tokens (the content is then its last turn's text). An episode that
failed (the engine, the env) is HTTP 502 with the reason; an unknown task id is 404, an unknown model 404.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from toolgym.core.task import Task
from toolgym.core.types import Trajectory
from toolgym.rollout.clients.base import LLMClient
from toolgym.rollout.episode import RolloutConfig
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.samples import sampling_from
from toolgym.server.serving import add_listen_options, add_model_options, quiet_model_engine, serve_app
from toolgym.util.kwargs import positive_int

__all__ = ["AgentConfig", "ChatRequest", "create_app", "main"]


class AgentConfig(BaseModel):
    """What ``toolgym serve agent`` serves: an env (id and ``gym.make`` kwargs) played by a model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    env_id: str
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    #: the model's path or HF id (or ``tiny``): its tokenizer and chat template render the episode, and the
    #: in-process engine runs it unless ``servers`` are given
    model: str
    #: OpenAI-compatible server URLs that run the model (several: episodes are spread over them)
    servers: list[str] = Field(default_factory=list)
    #: the name ``/v1/models`` lists and requests must use; default the env id
    served_model_name: str | None = None
    max_response_tokens: int = Field(2048, ge=1)
    max_tokens_per_turn: int = Field(512, ge=1)
    #: episodes played at once; more requests wait their turn
    concurrency: int = Field(32, ge=1)
    max_model_len: int = Field(4096, ge=1)

    @property
    def name(self) -> str:
        return self.served_model_name or self.env_id


class ChatRequest(BaseModel):
    """The OpenAI chat-completions body, the fields the agent reads; other OpenAI fields are accepted and
    ignored."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[dict[str, Any]] = Field(default_factory=list)
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    seed: int | None = None
    stream: bool = False
    n: int = 1
    metadata: dict[str, Any] | None = None
    #: pin one of the env's tasks: it is played and verified (``extra_body={"task_id": ...}``)
    task_id: str | None = None

    def pinned_task_id(self) -> str | None:
        if self.task_id is not None:
            return self.task_id
        value = (self.metadata or {}).get("task_id")
        return None if value is None else str(value)

    def prompt(self) -> str:
        users = [m for m in self.messages if m.get("role") == "user"]
        if not users:
            raise HTTPException(422, "the request has no user message and pins no task_id: nothing to solve")
        content = users[-1].get("content")
        if isinstance(content, list):  # content parts: the text ones
            content = "\n".join(p.get("text", "") for p in content if p.get("type") == "text")
        if not isinstance(content, str) or not content.strip():
            raise HTTPException(422, "the last user message has no text")
        return content


def create_app(config: AgentConfig, client: LLMClient | None = None, renderer: Any = None) -> FastAPI:
    """The agent app. ``client``/``renderer`` default to the ones ``config`` names (the client is built on
    the server's event loop at startup, or by the first request, and closed at shutdown); tests pass a
    scripted client."""
    import gymnasium as gym

    import toolgym  # noqa: F401 - registers the envs

    if config.env_id not in gym.registry:
        raise KeyError(f"unknown env {config.env_id!r}; `toolgym list` shows the registered envs")
    state = _AgentState(config, client, renderer)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        await state.get_client()  # start the engine before the first request
        try:
            yield
        finally:
            await state.close()

    app = FastAPI(title=f"toolgym agent: {config.env_id}", lifespan=lifespan)
    app.state.agent = state

    @app.exception_handler(HTTPException)
    async def openai_error(_request: Any, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {"id": config.name, "object": "model", "created": state.created, "owned_by": "toolgym"}
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "env": config.env_id, "model": config.name}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: ChatRequest) -> JSONResponse:
        if request.model != config.name:
            return _error(
                404, f"the model {request.model!r} does not exist; this server serves {config.name!r}"
            )
        if request.stream:
            return _error(400, "stream=true is not supported: the agent answers once its episode is over")
        if request.n != 1:
            return _error(400, "n must be 1: one episode per request")
        traj = await state.play(request)
        if traj.error is not None:
            return _error(502, f"the episode failed: {traj.error}", "episode_error")
        return JSONResponse(_completion(config.name, request, traj))

    return app


class _AgentState:
    """The shared pieces of one agent server: its episode host (env pool, threads, the bound on episodes in
    flight) and the client (built lazily)."""

    def __init__(self, config: AgentConfig, client: LLMClient | None, renderer: Any):
        self.config = config
        self.client = client
        self.owns_client = client is None
        self.renderer = renderer
        self.host = EpisodeHost(max_concurrent_episodes=config.concurrency, name="agent")
        self.created = int(time.time())
        self._lock = asyncio.Lock()

    async def get_client(self) -> LLMClient:
        async with self._lock:
            if self.renderer is None:
                from toolgym.rollout.models import make_renderer

                self.renderer = await asyncio.to_thread(make_renderer, self.config.model)
            if self.client is None:
                from toolgym.rollout.models import make_client

                engine: dict[str, Any] = (
                    {} if self.config.servers else {"max_model_len": self.config.max_model_len}
                )
                self.client = make_client(self.config.model, server=self.config.servers or None, **engine)
        return self.client

    async def play(self, request: ChatRequest) -> Trajectory:
        client = await self.get_client()
        task_id = request.pinned_task_id()
        options: dict[str, Any] = {"task_id": task_id} if task_id else {}
        budget = request.max_completion_tokens or request.max_tokens or self.config.max_response_tokens
        rollout = RolloutConfig(
            max_response_tokens=budget,
            max_tokens_per_turn=min(self.config.max_tokens_per_turn, budget),
            sampling=sampling_from(request),
        )
        host = self.host
        async with host.slots(), host.lease(self.config.env_id, self.config.env_kwargs) as env:
            if task_id:
                await self._check_task(env, task_id)
            else:
                options["task"] = Task(id=f"request-{uuid.uuid4().hex[:12]}", prompt=request.prompt())
            traj = await host.run(
                env,
                client,
                self.renderer,
                rollout,
                seed=request.seed,
                options=options,
                request_id=f"chatcmpl-{uuid.uuid4().hex}",
                sampling_seed=request.seed,
            )
        return traj.model_copy(update={"env_id": self.config.env_id})

    async def _check_task(self, env: Any, task_id: str) -> None:
        try:
            await self.host.call(env.unwrapped.tasks.get, task_id)
        except KeyError as exc:
            message = exc.args[0] if exc.args else task_id
            raise HTTPException(404, f"{self.config.env_id} has no task {task_id!r}: {message}") from None

    async def close(self) -> None:
        if self.owns_client and self.client is not None:
            await self.client.close()
            self.client = None
        self.host.close()


def _completion(name: str, request: ChatRequest, traj: Trajectory) -> dict[str, Any]:
    """The ``chat.completion`` body for a played episode."""
    last = traj.turns[-1] if traj.turns else None
    answered = last is not None and last.parsed.kind == "answer"
    content = (last.parsed.answer if answered else last.action) if last is not None else ""
    generated = sum(traj.response_mask)
    pinned = request.pinned_task_id() is not None
    episode: dict[str, Any] = {
        "env_id": traj.env_id,
        "task_id": traj.task_id,
        "turns": traj.num_turns,
        "tool_calls": traj.tool_calls,
        "tool_errors": traj.tool_errors,
        "stop_reason": traj.stop_reason,
        "messages": traj.messages,
        "reward": traj.reward if pinned else None,
        "verdict": traj.verdict.model_dump() if pinned and traj.verdict is not None else None,
    }
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": name,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content or ""},
                "finish_reason": "stop" if answered else "length",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": len(traj.prompt_ids),
            "completion_tokens": generated,
            "total_tokens": len(traj.prompt_ids) + generated,
            "turns": traj.num_turns,
            "tool_calls": traj.tool_calls,
        },
        "toolgym": episode,
    }


def _error(status: int, message: str, kind: str = "invalid_request_error") -> JSONResponse:
    """An OpenAI-style error body, which the ``openai`` client turns into its exception with this message."""
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status_code=status)


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym serve agent",
        description="Serve an env played by a model as an OpenAI-compatible chat model (tools run here): "
        "POST /v1/chat/completions, GET /v1/models. See toolgym.server.agent.",
    )
    p.add_argument("--env", required=True, help="env id, e.g. toolgym/Calculator-v0")
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE", help="extra env kwarg")
    p.add_argument("--format", dest="action_format", default=None, help="the env's action format")
    p.add_argument("--max-turns", type=positive_int, default=None)
    add_model_options(p, served_name_help="the model name clients use (default the env id)")
    p.add_argument(
        "--max-response-tokens", type=positive_int, default=2048, help="default episode token budget"
    )
    p.add_argument("--max-tokens-per-turn", type=positive_int, default=512)
    p.add_argument("--concurrency", type=positive_int, default=32, help="episodes at once (default 32)")
    add_listen_options(p)
    return p


def config_from_args(args: argparse.Namespace) -> AgentConfig:
    from toolgym.util.kwargs import env_kwargs_from_args

    return AgentConfig(
        env_id=args.env,
        env_kwargs=env_kwargs_from_args(args),
        model=args.model,
        servers=args.server,
        served_model_name=args.served_model_name,
        max_response_tokens=args.max_response_tokens,
        max_tokens_per_turn=args.max_tokens_per_turn,
        max_model_len=args.max_model_len,
        concurrency=args.concurrency,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    quiet_model_engine(args)
    config = config_from_args(args)
    app = create_app(config)
    banner = (
        f"toolgym agent: POST http://{args.host}:{args.port}/v1/chat/completions (model {config.name!r}, "
        f"env {config.env_id})"
    )
    return serve_app(app, args, banner)


if __name__ == "__main__":
    raise SystemExit(main())
