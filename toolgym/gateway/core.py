"""The gateway's work, without HTTP: open a session (on a toolgym task or free), answer a chat call with the
engine while recording its exact tokens, run the env's tools, judge the final answer, end or expire it.

The HTTP app (``app.py``) and the trainers' in-process runner (``agents.py``) both call this, so a session
means the same thing to an agent program over HTTP and to a trainer reading its tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolgym.core.types import ParsedAction, ToolResult, Verdict
from toolgym.gateway.protocol import ChatRequest, FinishBody, OpenSession
from toolgym.gateway.sessions import GatewaySession, SessionStore
from toolgym.parsers.openai_calls import ToolCallReader
from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import Generation, LLMClient, Sampling
from toolgym.rollout.host import EpisodeHost
from toolgym.rollout.session import EnvSession
from toolgym.rollout.token_record import CallRecord, Context, TokenRecord


class GatewayConfig(BaseModel):
    """What a gateway serves and its limits (``toolgym serve gateway``'s options)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: the model's path or HF id (or ``tiny``): its tokenizer and chat template render every call
    model: str
    #: OpenAI-compatible servers running the model (several: sessions are spread over them); none: an
    #: in-process vLLM engine
    servers: list[str] = Field(default_factory=list)
    #: the name ``/v1/models`` lists (any name is accepted in requests: the session is what matters)
    served_model_name: str | None = None
    #: the context the engine has: a call whose prompt plus ``max_tokens`` exceed it is refused (400)
    max_model_len: int = Field(4096, ge=16)
    #: a call's ``max_tokens`` when it sends none (capped by what the context leaves)
    default_max_tokens: int = Field(1024, ge=1)
    #: sessions open at once; more are refused with 429 and ``Retry-After``
    max_sessions: int = Field(1024, ge=1)
    #: seconds a session may sit unused before it expires (its env is given back)
    idle_timeout_s: float = Field(600.0, gt=0)
    #: engine calls in flight at once (others wait)
    max_concurrent_calls: int = Field(256, ge=1)
    #: the action format that reads tool calls out of the model's text
    tool_format: str = "hermes"
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.served_model_name or self.model


class GatewayError(Exception):
    """A request the gateway refuses: ``status`` is its HTTP status."""

    def __init__(self, status: int, message: str, **headers: str):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


@dataclass
class Completion:
    """One answered chat call: what the engine saw and sampled, and the reply the client gets."""

    context: Context
    generation: Generation
    reply: dict[str, Any]
    finish_reason: str
    call: CallRecord


@dataclass
class ToolRun:
    """What ``POST /sessions/{id}/tools/{name}`` answers: the observation and its parts as fields, so that a
    client (mini-swe-agent's environment) never reads them out of the text.

    ``output`` is the observation the model should see (the env's result text: its error marker, the bash
    tool's status line, clipped to the env's limit); ``status`` the tool result's (``ok``, ``error``: the
    model's mistake, ``infra_error``: ours); ``exit_code`` the command's exit code for a tool that runs one
    (negative: killed by that signal; ``None``: no command ran, or not such a tool); ``timed_out`` whether
    the command hit the tool's time limit; ``command_output`` the command's own output, without toolgym's
    note and status line (``None`` for a tool that runs no command, or when no command ran)."""

    name: str
    status: str
    output: str
    exit_code: int | None = None
    timed_out: bool = False
    command_output: str | None = None

    @classmethod
    def of(cls, name: str, observation: str, result: ToolResult | None) -> ToolRun:
        if result is None:
            return cls(name, "error", observation)
        meta = result.metadata
        code = meta.get("exit_code")
        span = meta.get("output_span")
        return cls(
            name,
            result.status,
            observation,
            exit_code=code if isinstance(code, int) else None,
            timed_out=bool(meta.get("timed_out", False)),
            command_output=result.output[span[0] : span[1]] if span else None,
        )

    def body(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class GatewayCore:
    """Sessions over one engine (``client``) and one chat template (``renderer``)."""

    def __init__(
        self,
        config: GatewayConfig,
        client: LLMClient | None = None,
        renderer: ChatRenderer | None = None,
        host: EpisodeHost | None = None,
    ):
        self.config = config
        self.client, self.owns_client = client, client is None
        self.renderer = renderer
        self.host = host or EpisodeHost(max_concurrent_episodes=config.max_sessions, name="gateway")
        self.owns_host = host is None
        self.store = SessionStore(max_sessions=config.max_sessions, idle_timeout_s=config.idle_timeout_s)
        self.created = int(time.time())
        self._lock = asyncio.Lock()
        self._calls: asyncio.Semaphore | None = None
        self.completions = 0
        self.tokens_recorded = 0

    # -- the engine ------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the renderer and start the engine (before the first request, not in it)."""
        async with self._lock:
            if self.renderer is None:
                from toolgym.rollout.models import make_renderer

                kwargs = self.config.chat_template_kwargs
                self.renderer = await asyncio.to_thread(
                    make_renderer, self.config.model, template_tools=True, chat_template_kwargs=kwargs
                )
            if self.client is None:
                from toolgym.rollout.models import make_client

                servers = self.config.servers
                engine: dict[str, Any] = {} if servers else {"max_model_len": self.config.max_model_len}
                self.client = make_client(self.config.model, server=servers or None, **engine)
        if self._calls is None:
            self._calls = asyncio.Semaphore(self.config.max_concurrent_calls)

    async def close(self) -> None:
        for session_id in list(self.store.open):
            session = self.store.end(session_id, "ended: the gateway shut down")
            if session is not None and session.env is not None:
                session.env.close()
        if self.owns_client and self.client is not None:
            await self.client.close()
            self.client = None
        if self.owns_host:
            self.host.close()

    # -- sessions --------------------------------------------------------------------------------------

    async def open(self, body: OpenSession) -> GatewaySession:
        """A free session, or one on a toolgym task: its env is leased and reset, and the task's prompt
        (the env's preamble and the task, without a tool-format lesson: tools travel as OpenAI functions)
        and the env's tools come back with it."""
        await self.start()
        renderer = self.renderer
        assert renderer is not None
        if body.env_id is None:
            if body.task_id is not None or body.env_kwargs:
                raise GatewayError(422, "task_id and env_kwargs need an env_id")
            return self.store.add(
                body.session_id,
                lambda sid: GatewaySession(sid, TokenRecord(renderer, task_id=sid), metadata=body.metadata),
            )
        env_session, prompt = await self._env_session(body)
        try:
            task = env_session.inner.task
            assert task is not None
            task_id = task.id
            session = self.store.add(
                body.session_id,
                lambda sid: GatewaySession(
                    sid,
                    TokenRecord(renderer, task_id=task_id, env_id=body.env_id or ""),
                    env=env_session,
                    env_id=body.env_id,
                    task_id=task_id,
                    metadata=body.metadata,
                ),
            )
        except BaseException:
            env_session.close()
            raise
        inner = env_session.inner
        session.prompt = [
            *([{"role": "system", "content": inner.preamble}] if inner.preamble else []),
            {"role": "user", "content": prompt},
        ]
        session.tools = [tool.schema() for tool in inner.tools.values()]
        return session

    async def _env_session(self, body: OpenSession) -> tuple[EnvSession, str]:
        """The env leased and reset on the task ``body`` names, and the task's text."""
        import gymnasium as gym

        import toolgym  # noqa: F401 - registers the envs

        env_id = body.env_id or ""
        if env_id not in gym.registry:
            raise GatewayError(404, f"unknown env {env_id!r}; `toolgym list` shows the registered envs")
        if len(self.store.open) >= self.config.max_sessions:  # before leasing an env for nothing
            raise GatewayError(429, "every session place is taken; retry later", **{"Retry-After": "1"})
        try:
            env_session = await self.host.call(self.host.session, env_id, body.env_kwargs)
        except (TypeError, ValueError) as exc:  # kwargs the env does not take, or values it refuses
            raise GatewayError(422, str(exc)) from None
        options: dict[str, Any] | None = None
        if body.task is not None:
            options = {"task": body.task}
        elif body.task_id is not None:
            options = {"task_id": body.task_id}
        try:
            prompt, _ = await self.host.call(lambda: env_session.reset(seed=body.seed, options=options))
        except KeyError as exc:
            env_session.close()
            message = exc.args[0] if exc.args else body.task_id
            raise GatewayError(404, f"{env_id} has no task {body.task_id!r}: {message}") from None
        except BaseException:
            env_session.close()
            raise
        return env_session, prompt

    def get(self, session_id: str) -> GatewaySession:
        from toolgym.gateway.sessions import SessionGone

        try:
            session = self.store.get(session_id)
        except SessionGone as exc:
            raise GatewayError(410, str(exc.args[0])) from None
        except KeyError as exc:
            raise GatewayError(404, str(exc.args[0])) from None
        session.touch()
        return session

    async def end(self, session_id: str, why: str = "was ended (DELETE)") -> dict[str, Any]:
        session = self.get(session_id)
        async with session.lock:
            self.store.end(session_id, why)
            if session.env is not None:
                await self.host.call(session.env.close)
        return session.trajectory("ended")

    async def reap(self) -> int:
        """Expire the idle sessions and give their envs back; how many."""
        gone = self.store.expire()
        for session in gone:
            if session.env is not None:
                await self.host.call(session.env.close)
        return len(gone)

    # -- chat ------------------------------------------------------------------------------------------

    async def complete(self, session: GatewaySession, request: ChatRequest) -> Completion:
        """Answer one chat call of ``session`` and record it (see ``rollout/token_record.py``)."""
        if request.n != 1:
            raise GatewayError(400, "n must be 1: a session records one reply per call")
        try:
            mode, _ = request.choice_mode()
        except ValueError as exc:
            raise GatewayError(422, str(exc)) from None
        await self.start()
        renderer, client, calls = self.renderer, self.client, self._calls
        assert renderer is not None and client is not None and calls is not None
        messages = [_plain(m) for m in request.messages]
        tools = request.tools
        async with session.lock:
            session.touch()
            record = session.record
            try:
                context = await self.host.call(record.context, messages, tools)
            except ValueError as exc:  # a template that cannot render the messages
                raise GatewayError(422, f"the chat template cannot render these messages: {exc}") from None
            max_tokens = self._max_tokens(request, len(context.ids))
            sampling = Sampling(
                max_tokens=max_tokens,
                temperature=1.0 if request.temperature is None else request.temperature,
                top_p=1.0 if request.top_p is None else request.top_p,
                stop=request.stops(),
                seed=request.seed,
            )
            started, clock = time.time(), time.perf_counter()
            async with calls:
                generation = await client.generate(context.ids, sampling, request_id=session.id)
            generation_s = time.perf_counter() - clock
            text = renderer.action_text(generation.token_ids)
            if generation.stop_text and text.endswith(generation.stop_text):
                text = text[: -len(generation.stop_text)]  # OpenAI leaves the stop string out
            content: str | None = text
            tool_calls: list[dict[str, Any]] = []
            parsed = ParsedAction.final(text)
            if mode != "none" and tools:
                content, tool_calls, parsed = ToolCallReader(tools, self.config.tool_format).read(text)
            reply: dict[str, Any] = {"role": "assistant", "content": content}
            if tool_calls:
                reply["tool_calls"] = tool_calls
                finish = "tool_calls"
            else:
                finish = "length" if generation.finish_reason == "length" else "stop"
            call = record.commit(
                context,
                messages,
                tools,
                generation,
                reply,
                parsed,
                started_s=started,
                generation_s=generation_s,
            )
            session.touch()
        self.completions += 1
        self.tokens_recorded += len(context.added) + len(generation.token_ids)
        return Completion(context, generation, reply, finish, call)

    def _max_tokens(self, request: ChatRequest, context_tokens: int) -> int:
        room = self.config.max_model_len - context_tokens
        asked = request.max_completion_tokens or request.max_tokens
        if room < 1:
            raise GatewayError(
                400,
                f"the messages take {context_tokens} tokens, the model's context is "
                f"{self.config.max_model_len}: nothing is left to generate",
            )
        if asked is not None and asked > room:
            raise GatewayError(
                400,
                f"max_tokens {asked} is past the context: the messages take {context_tokens} of the model's "
                f"{self.config.max_model_len} tokens, which leaves {room}",
            )
        return asked if asked is not None else min(self.config.default_max_tokens, room)

    # -- the env's tools and verdict -------------------------------------------------------------------

    async def run_tool(self, session: GatewaySession, name: str, arguments: dict[str, Any]) -> ToolRun:
        """Run the env's tool ``name`` in its sandbox (the agent's function call, relayed): its observation
        text and, as fields, its status, exit code and the command's own output (see :class:`ToolRun`)."""
        env = session.env
        if env is None:
            raise GatewayError(409, "this session plays no toolgym env: its tools run in the client")
        if name not in env.inner.tools:
            raise GatewayError(
                404, f"{session.env_id} has no tool {name!r}; it has {', '.join(env.inner.tools)}"
            )
        async with session.lock:
            clock = time.perf_counter()
            try:
                output = await self.host.call(env.call_tool, name, arguments)
            except RuntimeError as exc:  # the session's env was closed or its episode is over
                raise GatewayError(409, str(exc)) from None
            env_traj = env.trajectory
            result = None
            if env_traj is not None and env_traj.turns:  # call_tool recorded the call as the env's turn
                session.record.attach_tool_results(env_traj.turns[-1].tool_results)
                result = env_traj.turns[-1].tool_results[-1]
            session.tool_calls.append(
                {"name": name, "arguments": arguments, "seconds": time.perf_counter() - clock}
            )
            session.touch()
        return ToolRun.of(name, output, result)

    async def finish(self, session: GatewaySession, body: FinishBody) -> Verdict:
        """The session's verdict: the env's verifier on the final answer, or the client's reward."""
        async with session.lock:
            if session.verdict is not None:
                raise GatewayError(409, "the session already has a verdict")
            if body.reward is not None:
                verdict = Verdict(
                    reward=body.reward, passed=body.reward > 0, details={"source": "client", **body.details}
                )
            elif session.env is None:
                raise GatewayError(422, "a free session has no verifier: post a reward")
            else:
                answer = (
                    None
                    if body.no_answer
                    else (body.answer if body.answer is not None else session.last_reply_text())
                )
                if answer is None and not body.no_answer:
                    raise GatewayError(422, "no answer given and the session has no reply to judge")
                env = session.env
                try:
                    verdict = await self.host.call(env.judge, answer)
                except RuntimeError as exc:
                    raise GatewayError(409, str(exc)) from None
            session.verdict = verdict
            stop = "answer" if not body.no_answer else "no_answer"
            session.record.set_verdict(verdict, stop)
            session.touch()
        return verdict


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message as the chat template takes it: ``None`` values dropped (clients send ``"refusal": null``
    and the like), tool-call arguments kept as the client sent them."""
    return {k: v for k, v in message.items() if v is not None or k == "content"}


__all__ = ["Completion", "GatewayConfig", "GatewayCore", "GatewayError", "ToolRun"]
