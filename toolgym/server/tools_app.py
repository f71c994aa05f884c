"""The tool server's app: toolgym's tools over HTTP, for verl-tool trainers and remote envs (``create_app``;
``toolgym.server.tools`` is its command line, ``toolgym serve tools``).

Two faces over one set of tools:

- **verl-tool's** ``POST /get_observation`` (``toolgym.server.tools_api``): a batch of trajectories' raw
  model turns. Each is read by the configured action format's parser (the env's parser: ``<python>``,
  fenced code, the generic ``<tool>`` marker, ...) and, where that finds no call and the python tool is
  served, as verl-tool's python tool reads them (``--no-code-fences`` turns it off): ```` ```python ````
  fences are python calls. Its tool calls run with that trajectory's state, and the
  observation is the parser's rendering, cut to ``max_observation_chars`` — the text ``ToolEnv.step`` would
  return for the same turn. A final answer or ``finish`` ends the trajectory and frees its state;
  ``is_last_step`` frees it after the call.
- **the typed API**: ``POST /tools/{name}`` takes the tool's arguments as the JSON body (validated by its
  pydantic ``Args``: 422 with the reason), ``?session_id=`` for a stateful tool's trajectory;
  ``POST /batch`` runs many calls; ``GET /tools`` lists schemas; ``DELETE /sessions/{id}`` frees a
  trajectory. ``RemoteTool`` (``toolgym.tools.remote``) speaks this, so envs can use a tool server.

Under load (``toolgym.server.admission``): at most ``max_concurrency`` requests run, ``max_queue`` wait,
the rest get 503 with ``Retry-After`` at once; a body over ``max_request_bytes`` is 413. ``GET /health``
and ``GET /metrics`` (JSON, or Prometheus text with ``?format=prometheus``) stay outside those limits.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.routing import Route

from toolgym.core.types import ToolCall, ToolResult
from toolgym.parsers import make_parser
from toolgym.server.admission import Admission
from toolgym.server.metrics import Metrics
from toolgym.server.tool_sessions import ToolSessions, TooManySessions
from toolgym.server.tools_api import ObservationRequest, ObservationResponse, ToolServerConfig
from toolgym.tools.base import TOOLS, Tool, make_tool
from toolgym.tools.remote import BatchCalls, BatchResults, ToolInfo, is_stateful
from toolgym.util.text import clip_middle

#: how often idle trajectories are looked for
SWEEP_INTERVAL_S = 1.0
#: the most characters of a typed-API result's output (a bound on the reply, far above any tool's own cap)
MAX_OUTPUT_CHARS = 1_000_000


class ToolRuntime:
    """The tools, the parser and the trajectories' state behind one app."""

    def __init__(self, config: ToolServerConfig, sandbox: Any = None):
        self.config = config
        self._own_sandbox = False
        self.sandbox = sandbox
        unknown = [name for name in config.tools if name not in TOOLS]
        if unknown:
            raise ValueError(f"unknown tools {unknown}; registered tools: {', '.join(sorted(TOOLS))}")
        stray = set(config.tool_options) - set(config.tools)
        if stray:
            raise ValueError(f"tool_options for tools not served: {sorted(stray)}")
        if sandbox is None and any(_takes_sandbox(name) for name in config.tools):
            from toolgym.sandbox import LocalSandbox
            from toolgym.sandbox.capacity import MAX_SESSIONS

            sessions = config.sandbox_sessions or min(config.max_sessions, MAX_SESSIONS)
            self.sandbox = LocalSandbox(workers=config.sandbox_workers, max_sessions=sessions)
            self._own_sandbox = True
        factories = {name: self._factory(name) for name in config.tools}
        #: one instance per tool: the parser's and the schemas' source, and the shared stateless instances
        self.templates: dict[str, Tool] = {name: make() for name, make in factories.items()}
        stateful = {name for name, tool in self.templates.items() if is_stateful(tool)}
        self.parser = make_parser(
            config.action_format,
            list(self.templates.values()),
            max_action_chars=config.max_action_chars,
            **config.parser_options,
        )
        #: verl-tool's python tool reads ```python fences where it finds no <python> tag, its code ending at
        #: the first ``` wherever it stands; so does this server
        fences = config.code_fences and "python" in self.templates and config.action_format != "markdown"
        self.fence_parser = (
            make_parser("markdown", [self.templates["python"]], close_anywhere=True) if fences else None
        )
        self.sessions = ToolSessions(
            {name: factories[name] for name in stateful},
            {name: tool for name, tool in self.templates.items() if name not in stateful},
            idle_timeout=config.session_idle_timeout,
            max_sessions=config.max_sessions,
        )
        self.metrics = Metrics("toolgym_tools", self.gauges)
        self._last_sweep = time.monotonic()

    def _factory(self, name: str) -> Callable[[], Tool]:
        options = dict(self.config.tool_options.get(name, {}))
        if self.sandbox is not None and _takes_sandbox(name):
            options.setdefault("sandbox", self.sandbox)
        return lambda: make_tool(name, **options)

    def info(self) -> list[ToolInfo]:
        return [
            ToolInfo(
                name=t.name,
                description=t.description,
                parameters=t.parameters,
                primary_arg=t.primary_arg,
                stateful=is_stateful(t),
            )
            for t in self.templates.values()
        ]

    def gauges(self) -> dict[str, Any]:
        sessions = self.sessions
        out: dict[str, Any] = {
            "sessions": {
                "live": len(sessions),
                "opened": sessions.opened,
                "closed": sessions.closed,
                "expired": sessions.expired,
            }
        }
        sb = self.sandbox
        if sb is not None and hasattr(sb, "server_pids"):
            out["sandbox"] = {
                "workers": getattr(sb, "workers", None),
                "workers_alive": sum(1 for s in getattr(sb, "_servers", ()) if s.alive),
                "live_sessions": getattr(sb, "live_sessions", None),
            }
        return out

    # -- calls

    async def call(self, call: ToolCall, session_id: str | None) -> ToolResult:
        """Run one call with ``session_id``'s state; never raises for the tool's failures."""
        async with self.sessions.use(call.name, session_id) as tool:
            result = await tool.acall(call)
        self.metrics.count("tool_calls", call.name, result.status)
        exec_status = result.metadata.get("exec_status")
        if exec_status is not None:
            self.metrics.count("sandbox_status", call.name, str(exec_status))
        return result

    async def observe(self, request: ObservationRequest, i: int) -> tuple[str, bool, bool]:
        """(observation, done, valid) for trajectory ``i``: what ``ToolEnv.step`` shows for the same turn."""
        tid = request.trajectory_ids[i]
        if request.flag("finish", i):
            await self.sessions.close(tid)
            return "", True, True
        parsed = self.parser.parse(request.actions[i])
        if parsed.kind == "invalid" and self.fence_parser is not None:
            fenced = self.fence_parser.parse(request.actions[i])
            if fenced.kind == "tool_calls":  # only a fence that is a call; an answer stays the format's own
                parsed = fenced
        if parsed.kind == "answer":
            observation, done, valid = "", True, True
        elif parsed.kind == "invalid":
            reason = parsed.reason or "unrecognised action"
            observation, done, valid = self.parser.render_invalid(reason), self.config.done_if_invalid, False
        else:
            results = [await self.call(c, tid) for c in parsed.tool_calls]  # in order, as the env does
            observation = clip_middle(self.parser.render(results), self.config.max_observation_chars)
            done, valid = False, True
        self.metrics.count("actions", parsed.kind)
        if done or request.flag("is_last_step", i):
            await self.sessions.close(tid)
        return observation, done, valid

    async def maybe_sweep(self) -> None:
        now = time.monotonic()
        if now - self._last_sweep >= SWEEP_INTERVAL_S:
            self._last_sweep = now
            await self.sessions.sweep(now)

    async def aclose(self) -> None:
        await self.sessions.close_all()
        if self._own_sandbox and self.sandbox is not None:
            await asyncio.to_thread(self.sandbox.close)


def create_app(config: ToolServerConfig | None = None, *, sandbox: Any = None) -> FastAPI:
    """The tool server app. ``sandbox``: run the python tool there (not closed with the app); by default the
    app starts its own ``LocalSandbox`` when a served tool needs one."""
    config = config or ToolServerConfig()
    runtime = ToolRuntime(config, sandbox)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        async def sweeper() -> None:
            while True:
                await asyncio.sleep(SWEEP_INTERVAL_S)
                await runtime.maybe_sweep()

        task = asyncio.create_task(sweeper())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await runtime.aclose()

    app = FastAPI(title="toolgym tools", description=__doc__, lifespan=lifespan)
    app.state.runtime = runtime
    admission = _admission(app, runtime)
    app.state.admission = admission
    app.add_middleware(_Bind, admission=admission)

    def refuse_busy(exc: TooManySessions) -> HTTPException:
        return HTTPException(503, str(exc), headers={"Retry-After": str(config.retry_after)})

    def check_batch(n: int, what: str) -> None:
        if n > config.max_batch:
            raise HTTPException(422, f"{n} {what} in one request; the limit is {config.max_batch} (split it)")

    async def observe(request: ObservationRequest) -> Response:
        """verl-tool's batch: each trajectory's action parsed, run in its session and rendered."""
        check_batch(len(request.trajectory_ids), "trajectories")
        started = time.perf_counter()
        await runtime.maybe_sweep()
        try:
            if len(request.actions) == 1:  # the common case: one trajectory, no gather
                triples = [await runtime.observe(request, 0)]
            else:
                triples = await asyncio.gather(
                    *(runtime.observe(request, i) for i in range(len(request.actions)))
                )
        except TooManySessions as exc:
            raise refuse_busy(exc) from None
        answer = ObservationResponse(
            observations=[t[0] for t in triples],
            dones=[t[1] for t in triples],
            valids=[t[2] for t in triples],
            processing_time_ms=(time.perf_counter() - started) * 1000,
        )
        # written by pydantic directly: FastAPI would validate the model it was just built from again
        return Response(answer.model_dump_json(), media_type="application/json")

    @app.post("/get_observation", response_model=ObservationResponse)
    async def get_observation(request: ObservationRequest) -> Response:
        return await observe(request)

    # what serves it: the same contract read with pydantic directly, without FastAPI's dependency solving
    # (the route above stays for the OpenAPI schema; this one, first, answers), as for /tools/{name}
    app.router.routes.insert(
        0, Route("/get_observation", _direct(ObservationRequest, observe), methods=["POST"])
    )

    @app.get("/tools")
    async def list_tools() -> dict[str, list[ToolInfo]]:
        return {"tools": runtime.info()}

    @app.post("/batch", response_model=BatchResults)
    async def batch(body: BatchCalls) -> BatchResults:
        check_batch(len(body.calls), "calls")
        calls = []
        for i, item in enumerate(body.calls):
            tool = runtime.templates.get(item.name)
            if tool is None:
                raise HTTPException(
                    422, f"calls[{i}]: no tool {item.name!r}; served: {', '.join(runtime.templates)}"
                )
            try:
                tool.validate(item.arguments)
            except ValueError as exc:
                raise HTTPException(422, f"calls[{i}]: {exc}") from None
            calls.append((ToolCall(name=item.name, arguments=item.arguments), item.session_id))
        await runtime.maybe_sweep()
        try:
            results = await asyncio.gather(*(runtime.call(c, sid) for c, sid in calls))
        except TooManySessions as exc:
            raise refuse_busy(exc) from None
        return BatchResults(results=[_capped(r) for r in results])

    for tool in runtime.templates.values():
        app.post(
            f"/tools/{tool.name}",
            response_model=ToolResult,
            summary=f"call {tool.name}",
            description=tool.description,
        )(_typed_endpoint(runtime, tool, refuse_busy))
        # what serves the calls: the same contract without FastAPI's dependency solving and response
        # re-validation (the route above stays for the OpenAPI schema; this one, first, answers)
        app.router.routes.insert(
            0, Route(f"/tools/{tool.name}", _direct_endpoint(runtime, tool, refuse_busy), methods=["POST"])
        )

    @app.post("/tools/{name}", include_in_schema=False)
    async def unknown_tool(name: str) -> None:
        raise HTTPException(404, f"no tool {name!r}; served: {', '.join(runtime.templates)}")

    @app.delete("/sessions/{session_id:path}")
    async def close_session(session_id: str) -> dict[str, bool]:
        return {"closed": await runtime.sessions.close(session_id)}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {
            "status": "ok",
            "tools": list(runtime.templates),
            "action_format": config.action_format,
            **admission.gauges(),
            **runtime.gauges(),
        }

    @app.get("/metrics")
    async def metrics(format: str = Query("json", pattern="^(json|prometheus)$")) -> Any:
        await runtime.maybe_sweep()
        if format == "prometheus":
            labels = {
                "tool_calls": ("tool", "status"),
                "sandbox_status": ("tool", "status"),
                "actions": ("kind",),
            }
            return PlainTextResponse(
                runtime.metrics.as_prometheus(labels), media_type="text/plain; version=0.0.4"
            )
        return JSONResponse(runtime.metrics.as_json())

    return app


def _typed_endpoint(
    runtime: ToolRuntime, tool: Tool, refuse_busy: Callable[[TooManySessions], HTTPException]
) -> Callable[..., Any]:
    """``POST /tools/{name}``: the body is the tool's ``Args`` (FastAPI validates it: 422 with the reason)."""
    name = tool.name

    async def endpoint(args: BaseModel, session_id: str | None = None) -> ToolResult:
        await runtime.maybe_sweep()
        try:
            result = await runtime.call(ToolCall(name=name, arguments=args.model_dump()), session_id)
        except TooManySessions as exc:
            raise refuse_busy(exc) from None
        return _capped(result)

    # FastAPI reads the body model from the signature (typeshed does not declare __signature__)
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter("args", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=tool.Args),
            inspect.Parameter(
                "session_id",
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=Query(None, description="the trajectory whose state a stateful tool uses"),
                annotation=str | None,
            ),
        ],
        return_annotation=ToolResult,
    )
    endpoint.__name__ = f"call_{name}"
    return endpoint


def _direct_endpoint(
    runtime: ToolRuntime, tool: Tool, refuse_busy: Callable[[TooManySessions], HTTPException]
) -> Callable[[Request], Awaitable[Response]]:
    """``POST /tools/{name}`` as ``_typed_endpoint`` answers it (the body validated against the tool's
    ``Args``, FastAPI's 422 body for a bad one, ``session_id`` from the query, the result capped), read and
    written with pydantic directly: at 256 concurrent calculator calls FastAPI's request and response
    handling around the call took more of the server's time than the call (tool server profile)."""
    name, args_model = tool.name, tool.Args

    async def endpoint(request: Request) -> Response:
        try:
            args = args_model.model_validate_json(await request.body())
        except ValidationError as exc:
            return _unprocessable(exc)
        await runtime.maybe_sweep()
        try:
            result = await runtime.call(
                ToolCall(name=name, arguments=args.model_dump()), request.query_params.get("session_id")
            )
        except TooManySessions as exc:
            busy = refuse_busy(exc)
            return JSONResponse({"detail": busy.detail}, status_code=busy.status_code, headers=busy.headers)
        return Response(_capped(result).model_dump_json(), media_type="application/json")

    return endpoint


def _unprocessable(exc: ValidationError) -> JSONResponse:
    """FastAPI's 422 for a body that does not validate (the body's location prefixed, bytes as text)."""
    errors = [{**e, "loc": ["body", *e["loc"]]} for e in exc.errors(include_url=False)]
    for error in errors:  # a body that is not JSON comes back as its (lossy) text
        raw = error.get("input")
        if isinstance(raw, bytes):
            error["input"] = raw.decode("utf-8", "replace")
    return JSONResponse({"detail": jsonable_encoder(errors)}, status_code=422)


def _direct(
    model: type[BaseModel], handle: Callable[[Any], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """A route's body read as ``model`` with pydantic directly and handed to ``handle``; FastAPI's 422 for a
    bad body, and an ``HTTPException`` from ``handle`` answered as FastAPI would."""

    async def endpoint(request: Request) -> Response:
        try:
            body = model.model_validate_json(await request.body())
        except ValidationError as exc:
            return _unprocessable(exc)
        try:
            return await handle(body)
        except HTTPException as exc:
            return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    return endpoint


def _capped(result: ToolResult) -> ToolResult:
    if len(result.output) <= MAX_OUTPUT_CHARS:
        return result
    return result.model_copy(update={"output": clip_middle(result.output, MAX_OUTPUT_CHARS)})


def _takes_sandbox(name: str) -> bool:
    factory = TOOLS.get(name)
    try:
        return factory is not None and "sandbox" in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


_GUARDED_PREFIXES = ("/tools/",)
_GUARDED = frozenset({"/get_observation", "/batch"})


def _admission(app: FastAPI, runtime: ToolRuntime) -> Admission:
    config = runtime.config
    tool_paths = {f"/tools/{name}" for name in runtime.templates}

    def endpoint(path: str) -> str:
        if path.startswith("/sessions/"):
            return "/sessions/{id}"
        if path.startswith("/tools/") and path not in tool_paths:
            return "/tools/{unknown}"
        return path

    return Admission(
        app,  # replaced by the real inner app in _Bind
        metrics=runtime.metrics,
        guarded=lambda path: path in _GUARDED or path.startswith(_GUARDED_PREFIXES),
        max_concurrency=config.max_concurrency,
        max_queue=config.max_queue,
        queue_timeout=config.queue_timeout,
        retry_after=config.retry_after,
        max_request_bytes=config.max_request_bytes,
        endpoint=endpoint,
    )


class _Bind:
    """Starlette builds its middleware stack lazily (``add_middleware`` takes a factory of the inner app);
    this puts our one ``Admission`` object, whose gauges ``/health`` reads, around that inner app."""

    def __init__(self, app: Any, admission: Admission):
        admission.app = app
        self.admission = admission

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.admission(scope, receive, send)
