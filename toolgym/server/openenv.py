"""``toolgym serve openenv``: any toolgym env behind OpenEnv's own HTTP + WebSocket server.

Built on OpenEnv's own server from the ``openenv`` package (``create_app``, its ``Environment`` base class,
its session manager), so the protocol is OpenEnv's and any OpenEnv client works, ``GenericEnvClient``
included, with no toolgym code on the client side::

    toolgym serve openenv --env toolgym/Calculator-v0 --port 8000

    from openenv.core.generic_client import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=0)                       # result.observation["text"]: the task prompt
        result = env.step({"message": "<calculator>2+2</calculator>"})

Routes (OpenEnv's): ``/ws`` (a WebSocket session: its own env instance, reset/step/state), ``/mcp`` (JSON-RPC
``tools/list`` and ``tools/call`` over the env's tools: POST, or WebSocket, or ``{"type": "mcp"}`` messages
inside a ``/ws`` session, which use that session's tools), stateless ``POST /reset``, ``/step`` (a fresh env
per request, so ``/step`` answers 409: play episodes over ``/ws``), ``GET /state``, ``/schema``,
``/metadata``, ``/health``. The models are in ``toolgym.server.openenv_env``.

Sessions: up to ``--max-sessions`` at once (256 by default), each with its own env instance from the
server's episode host (``toolgym.rollout.host``; reused across sessions, so a new one does not rebuild it);
a session idle for ``--idle-timeout`` seconds is closed by OpenEnv's reaper (it checks every
``max(timeout / 4, 5)`` seconds); a new session beyond the limit gets OpenEnv's busy error
(``CAPACITY_REACHED``). The env is the same as in process: the same seed and actions give the same
observations and rewards.

Text in, text out: OpenEnv carries no token ids, so a trainer that needs the exact tokens rebuilds them from
``messages`` with the chat template (see docs/openenv.md), or runs toolgym's episode runner in process.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping, Sequence
from typing import Any

from toolgym.util.kwargs import parse_kwargs, positive_int

DEFAULT_MAX_SESSIONS = 256
DEFAULT_IDLE_TIMEOUT = 600.0


def create_app(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
) -> Any:
    """OpenEnv's FastAPI app serving ``env_id`` (made with ``env_kwargs``) to up to ``max_sessions``
    concurrent sessions; ``idle_timeout`` seconds without a message closes a session (None: never)."""
    from fastapi import Request
    from fastapi.responses import JSONResponse
    from openenv.core.env_server.http_server import create_app as openenv_create_app
    from openenv.core.env_server.types import ConcurrencyConfig

    import toolgym
    from toolgym.core.registry import ENVS
    from toolgym.rollout.host import EpisodeHost
    from toolgym.server.openenv_env import (
        EnvSource,
        RequestError,
        SessionError,
        TextAction,
        ToolgymEnvironment,
        ToolgymObservation,
    )

    if max_sessions < 1:
        raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
    if idle_timeout is not None and idle_timeout <= 0:
        raise ValueError(f"idle_timeout must be > 0 seconds (or None for never), got {idle_timeout}")
    kwargs = dict(env_kwargs or {})
    host = EpisodeHost(max_concurrent_episodes=max_sessions, max_idle=max_sessions, name="openenv")
    host.session(env_id, kwargs).close()  # fail now on a bad id or kwargs, and warm one instance
    spec = ENVS.get(env_id)
    description = spec.description if spec is not None else ""
    source = EnvSource(env_id, kwargs, host, description=description, version=toolgym.__version__)
    app = openenv_create_app(
        functools.partial(ToolgymEnvironment, source),  # a class partial: OpenEnv reads its concurrency flag
        TextAction,
        ToolgymObservation,
        env_name=env_id,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout),
    )

    # over WebSocket these are OpenEnv's EXECUTION_ERROR with the same message; over HTTP, client errors
    @app.exception_handler(SessionError)
    async def _session_error(request: Request, exc: SessionError) -> JSONResponse:
        return JSONResponse(status_code=409, content={"detail": str(exc)})

    @app.exception_handler(RequestError)
    async def _request_error(request: Request, exc: RequestError) -> JSONResponse:
        return JSONResponse(status_code=422, content={"detail": str(exc)})

    app.add_middleware(_QuietClientClose)
    app.router.on_shutdown.append(host.close)
    app.state.toolgym_source = source
    return app


class _QuietClientClose:
    """OpenEnv's ``/ws`` handler (seen in openenv-core 0.3) closes the socket after the client has already
    closed it (every ``EnvClient.close()``) and lets the resulting ``WebSocketDisconnect`` escape, which
    uvicorn logs as an error. A disconnect at that point is the normal end of a session, so it is dropped
    here."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope["type"] != "websocket":
                raise


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym serve openenv",
        description="Serve a toolgym env over OpenEnv's protocol (HTTP + WebSocket sessions + MCP tools).",
    )
    p.add_argument("--env", required=True, metavar="ID", help="env id, e.g. toolgym/Calculator-v0")
    p.add_argument(
        "-k",
        "--env-kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="gym.make kwarg (JSON value or str), e.g. -k max_turns=6 (repeatable)",
    )
    p.add_argument(
        "--max-sessions",
        type=positive_int,
        default=DEFAULT_MAX_SESSIONS,
        help=f"concurrent sessions, each its own env instance (default {DEFAULT_MAX_SESSIONS})",
    )
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULT_IDLE_TIMEOUT,
        help=f"close a session idle this many seconds (default {DEFAULT_IDLE_TIMEOUT:g}; 0: never)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000, as OpenEnv)")
    p.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    from toolgym.server.serving import serve_app

    args = _build_parser().parse_args(argv)

    app = create_app(
        args.env,
        parse_kwargs(args.env_kwarg),
        max_sessions=args.max_sessions,
        idle_timeout=args.idle_timeout or None,
    )
    banner = (
        f"toolgym openenv: {args.env} on ws://{args.host}:{args.port}/ws "
        f"(up to {args.max_sessions} sessions; MCP tools at /mcp)"
    )
    return serve_app(app, args, banner, backlog=4096)


if __name__ == "__main__":
    raise SystemExit(main())
