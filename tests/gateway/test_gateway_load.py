"""The gateway under load and bad input: 256 concurrent sessions on one gateway (none lost, none crossed), the
session cap (429 with ``Retry-After``), malformed requests (400/422 with a message, as the ``openai`` SDK's
exceptions), a client that disconnects mid-stream, and idle sessions that expire and say so.

Each test runs its own in-process gateway (their limits differ) in front of a scripted engine."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from toolgym.gateway import Gateway, GatewayConfig
from toolgym.gateway.protocol import ChatRequest, OpenSession
from toolgym.rollout.models import make_renderer
from toolgym.rollout.session import SessionClosed
from toolgym.testing.scripted import ScriptedClient
from toolgym.util.http import pool_limits

CALC = "toolgym/Calculator-v0"
SESSIONS = 256
#: HTTP clients the sessions share (as many agent processes would)
CLIENTS = 16
TOOL = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def renderer():
    return make_renderer("tiny", template_tools=True)


class InFlight:
    """The engine's client, counting the calls in flight at once (to show the sessions overlapped)."""

    def __init__(self, inner: ScriptedClient):
        self.inner, self.now, self.most = inner, 0, 0

    async def generate(self, prompt_ids, sampling, request_id):
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            return await self.inner.generate(prompt_ids, sampling, request_id)
        finally:
            self.now -= 1

    async def close(self):
        await self.inner.close()


@contextlib.asynccontextmanager
async def serving(renderer, engine, **config: Any) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """An in-process gateway on ``engine`` (``config``: GatewayConfig's limits), and an HTTP client for it."""
    gateway = Gateway(GatewayConfig(model="tiny", **config), client=engine, renderer=renderer)
    async with gateway as gw, httpx.AsyncClient(base_url=gw.url, timeout=120) as http:
        yield gw, http


def masked(record: dict[str, Any], keep: int) -> list[int]:
    return [i for i, m in zip(record["response_ids"], record["response_mask"], strict=True) if m == keep]


def number_of(i: int) -> int:
    return (i * 7919) % 100_003


@pytest.mark.slow
def test_256_concurrent_sessions_are_none_lost_none_crossed(renderer):
    def policy(session_id: str, turn: int, prompt: str) -> str:
        # what this session's user said (its number), read from the prompt the engine got
        numbers = re.findall(r"my number is (\d+)", prompt)
        return f"[{session_id}] turn {turn}: your number is {numbers[-1] if numbers else 'missing'}."

    engine = InFlight(ScriptedClient(renderer, policy, delay=0.01))

    def turns_of(i: int) -> int:
        return 2 + i % 2

    async def one(gw: Gateway, http: httpx.AsyncClient, agent: AsyncOpenAI, i: int) -> dict[str, Any]:
        sid = f"load-{i:03d}"
        opened = await http.post("/sessions", json={"session_id": sid, "metadata": {"i": i}})
        assert opened.status_code == 201, opened.text
        # even sessions use their own base URL, odd ones the shared /v1 route with the header
        if i % 2:
            client, headers = agent.with_options(base_url=f"{gw.url}/v1"), {"X-Session-Id": sid}
        else:
            client, headers = agent.with_options(base_url=gw.session_url(sid)), {}
        history = [{"role": "user", "content": f"Hello, I am {sid} and my number is {number_of(i)}."}]
        for _ in range(turns_of(i)):
            reply = await client.chat.completions.create(
                model="tiny", messages=history, extra_headers=headers
            )
            history += [
                reply.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": f"Again, {sid}."},
            ]
        record = await http.get(f"/sessions/{sid}/trajectory")
        assert record.status_code == 200
        return record.json()

    async def main():
        config = GatewayConfig(model="tiny", max_model_len=1024)
        async with Gateway(config, client=engine, renderer=renderer) as gw:
            # a connection pool per 16 sessions (httpx scans its whole pool on every request), which closes
            # no idle connection on its own: httpcore's pool can close one under a request it has just been
            # given to (pool_limits says how), and on a busy machine it did
            limits = pool_limits(SESSIONS // CLIENTS + 4)
            https = [httpx.AsyncClient(base_url=gw.url, limits=limits, timeout=120) for _ in range(CLIENTS)]
            agents = [
                AsyncOpenAI(base_url=gw.url, api_key="unused", max_retries=0, http_client=http)
                for http in https
            ]
            records = await asyncio.gather(
                *(one(gw, https[i % CLIENTS], agents[i % CLIENTS], i) for i in range(SESSIONS))
            )
            http = https[0]
            health = (await http.get("/health")).json()
            ended = [await http.delete(f"/sessions/{r['session_id']}") for r in records]
            after = (await http.get("/health")).json()
            for http in https:
                await http.aclose()
        return records, health, ended, after

    records, health, ended, after = asyncio.run(main())
    assert engine.most > 1  # the sessions' calls overlapped
    assert len(records) == SESSIONS
    assert sorted(r["session_id"] for r in records) == [f"load-{i:03d}" for i in range(SESSIONS)]
    inner = engine.inner
    for i, record in enumerate(records):
        sid = record["session_id"]
        assert record["metadata"] == {"i": i}
        assert record["num_segments"] == 1 and record["restarts"] == []
        assert len(record["segments"][0]["calls"]) == turns_of(i)
        # the mask-1 tokens are exactly what the engine sampled for this session, in order
        mine = [g for g, rid in zip(inner.generated, inner.request_ids, strict=True) if rid == sid]
        assert len(mine) == turns_of(i)
        assert masked(record, 1) == [t for g in mine for t in g]
        sampled = renderer.decode(masked(record, 1))
        expected = "".join(
            f"[{sid}] turn {t}: your number is {number_of(i)}.<|im_end|>" for t in range(turns_of(i))
        )
        assert sampled == expected
        prompt = renderer.decode(record["prompt_ids"])
        assert f"Hello, I am {sid} and my number is {number_of(i)}." in prompt
        everything = renderer.decode(record["prompt_ids"] + record["response_ids"])
        assert set(re.findall(r"load-\d{3}", everything)) == {sid}
    total_turns = sum(turns_of(i) for i in range(SESSIONS))
    assert len(inner.generated) == total_turns
    assert health["sessions_open"] == SESSIONS and health["sessions_opened"] == SESSIONS
    assert health["completions"] == total_turns
    assert health["tokens_recorded"] == sum(len(r["prompt_ids"]) + len(r["response_ids"]) for r in records)
    assert all(e.status_code == 200 and e.json()["status"] == "ended" for e in ended)
    assert after["sessions_open"] == 0 and after["sessions_expired"] == 0


def test_the_session_cap_is_a_429_with_retry_after(renderer):
    async def main():
        async with serving(renderer, ScriptedClient(renderer, []), max_sessions=4) as (gw, http):
            opened = [await http.post("/sessions") for _ in range(4)]
            fifth = await http.post("/sessions")
            on_a_task = await http.post("/sessions", json={"env_id": CALC, "seed": 0})
            sdk = AsyncOpenAI(base_url=gw.url, api_key="unused", max_retries=0)
            try:
                await sdk.post("/sessions", cast_to=object, body={})
                sdk_error = None
            except openai.APIStatusError as exc:
                sdk_error = exc
            await sdk.close()
            health = (await http.get("/health")).json()
            await http.delete(f"/sessions/{opened[0].json()['session_id']}")
            room_again = await http.post("/sessions")
            leased = len(gw.core.host.pool)
        return opened, fifth, on_a_task, sdk_error, health, room_again, leased

    opened, fifth, on_a_task, sdk_error, health, room_again, leased = asyncio.run(main())
    assert [r.status_code for r in opened] == [201] * 4
    assert fifth.status_code == 429 and fifth.headers["Retry-After"] == "1"
    message = fifth.json()["error"]["message"]
    assert "4 sessions are open" in message and "--max-sessions 4" in message
    assert fifth.json()["error"]["type"] == "rate_limit_error"
    assert on_a_task.status_code == 429 and on_a_task.headers["Retry-After"] == "1"
    assert "retry later" in on_a_task.json()["error"]["message"]
    assert on_a_task.json()["error"]["type"] == "rate_limit_error"
    assert leased == 0  # the refused task session leased no env
    assert isinstance(sdk_error, openai.RateLimitError)
    assert (
        sdk_error.response.headers["Retry-After"] == "1"
        and "4 sessions are open" in sdk_error.body["message"]
    )
    assert health["sessions_open"] == 4 and health["sessions_opened"] == 4 and health["max_sessions"] == 4
    assert room_again.status_code == 201  # an ended session frees its place


BAD = [
    ("no messages", {"messages": []}, openai.UnprocessableEntityError, ["messages is empty"]),
    (
        "a bad role",
        {"messages": [{"role": "robot", "content": "hi"}]},
        openai.UnprocessableEntityError,
        ["messages[0].role must be one of", "'robot'"],
    ),
    (
        "a tool without a name",
        {"tools": [{"type": "function", "function": {"parameters": {"type": "object"}}}]},
        openai.UnprocessableEntityError,
        ["tools[0].function.name must be"],
    ),
    (
        "parameters that are not an object",
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]},
        openai.UnprocessableEntityError,
        ["tools[0].function.parameters must be a JSON schema of type 'object'"],
    ),
    (
        "a tool that is not a function",
        {"tools": [{"type": "retrieval", "function": {"name": "f"}}]},
        openai.UnprocessableEntityError,
        ["tools[0].type must be 'function'"],
    ),
    (
        "a function declared twice",
        {"tools": [TOOL, TOOL]},
        openai.UnprocessableEntityError,
        ["tools[1]: the function name 'lookup' is declared twice"],
    ),
    (
        "tool_choice naming an undeclared function",
        {"tools": [TOOL], "tool_choice": {"type": "function", "function": {"name": "search"}}},
        openai.UnprocessableEntityError,
        ["tool_choice names the function 'search', which tools does not declare"],
    ),
    (
        "an unknown tool_choice",
        {"tools": [TOOL], "tool_choice": "sometimes"},
        openai.UnprocessableEntityError,
        ["tool_choice must be"],
    ),
    ("n=2", {"n": 2}, openai.BadRequestError, ["n must be 1"]),
    ("a temperature past 2", {"temperature": 3.0}, openai.UnprocessableEntityError, ["temperature"]),
]


def test_malformed_requests_are_refused_with_a_message_and_leave_no_record(renderer):
    hello = [{"role": "user", "content": "Hello."}]
    hello_tokens = len(renderer.prompt_ids(hello))
    long_message = [{"role": "user", "content": "word " * 100}]
    long_tokens = len(renderer.prompt_ids(long_message))
    engine = ScriptedClient(renderer, ["Hi there. " * 40])

    async def main():
        async with serving(renderer, engine, max_model_len=64) as (gw, http):
            sid = (await http.post("/sessions")).json()["session_id"]
            agent = AsyncOpenAI(base_url=gw.session_url(sid), api_key="unused", max_retries=0)
            refused = {}
            cases = [(name, body) for name, body, _, _ in BAD]
            cases += [("max_tokens past the context", {"max_tokens": 1000})]
            cases += [("messages past the context", {"messages": long_message})]
            for name, body in cases:
                try:
                    await agent.chat.completions.create(**{"model": "tiny", "messages": hello, **body})
                    refused[name] = None
                except openai.APIStatusError as exc:
                    refused[name] = exc
            untouched = (await http.get(f"/sessions/{sid}/trajectory")).json()
            prompts_then = len(engine.prompts)
            # the session is still good: a valid call gets what the context leaves
            reply = await agent.chat.completions.create(model="tiny", messages=hello)
            await agent.close()
            record = (await http.get(f"/sessions/{sid}/trajectory")).json()
        return refused, untouched, prompts_then, reply, record

    refused, untouched, prompts_then, reply, record = asyncio.run(main())
    for name, _, kind, words in BAD:
        error = refused[name]
        assert isinstance(error, kind), (name, error)
        for word in words:
            assert word in error.body["message"], (name, error.body)
    past = refused["max_tokens past the context"]
    assert isinstance(past, openai.BadRequestError)
    assert past.body["message"] == (
        f"max_tokens 1000 is past the context: the messages take {hello_tokens} of the model's 64 tokens, "
        f"which leaves {64 - hello_tokens}"
    )
    full = refused["messages past the context"]
    assert isinstance(full, openai.BadRequestError)
    assert f"the messages take {long_tokens} tokens, the model's context is 64" in full.body["message"]
    # nothing refused reached the engine or the record
    assert prompts_then == 0 and untouched["segments"] == [] and untouched["num_segments"] == 0
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 64 - hello_tokens
    assert record["num_segments"] == 1 and masked(record, 1) == engine.generated[0]


def test_a_client_gone_mid_stream_leaves_a_consistent_record(renderer):
    long_reply = "This reply is long enough to be streamed in many pieces. " * 40
    engine = ScriptedClient(renderer, [long_reply, "Short again.", "And on."])

    async def main():
        async with serving(renderer, engine) as (gw, http):
            sid = (await http.post("/sessions")).json()["session_id"]
            history = [{"role": "user", "content": "Tell me everything."}]
            url = f"/sessions/{sid}/v1/chat/completions"
            body = {"model": "tiny", "messages": history, "stream": True}
            async with http.stream("POST", url, json=body) as response:
                assert response.status_code == 200
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        first = line
                        break
            # the client is gone; give the server a few turns of the loop to notice
            for _ in range(20):
                await asyncio.sleep(0.01)
            dropped = (await http.get(f"/sessions/{sid}/trajectory")).json()
            # the client never got the reply: it asks again, then goes on from the new answer
            agent = AsyncOpenAI(base_url=gw.session_url(sid), api_key="unused", max_retries=0)
            again = await agent.chat.completions.create(model="tiny", messages=history)
            history += [
                again.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "More."},
            ]
            await agent.chat.completions.create(model="tiny", messages=history)
            await agent.close()
            record = (await http.get(f"/sessions/{sid}/trajectory")).json()
        return first, dropped, record

    first, dropped, record = asyncio.run(main())
    assert '"role": "assistant"' in first
    # the sampled turn is recorded (it was sampled), marked undelivered
    assert dropped["num_segments"] == 1
    assert [c["delivered"] for c in dropped["segments"][-1]["calls"]] == [False]
    assert masked(dropped, 1) == engine.generated[0]
    # the retry starts a new segment (counted, with its reason); the old one keeps its undelivered turn
    assert record["num_segments"] == 2 and len(record["restarts"]) == 1
    assert "not more than" in record["restarts"][0]
    first_segment, second_segment = record["segments"]
    assert [c["delivered"] for c in first_segment["calls"]] == [False]
    assert first_segment["response_ids"] == engine.generated[0]
    assert [c["delivered"] for c in second_segment["calls"]] == [True, True]
    # the record's top level is the segment that went on, token-faithful
    assert record["prompt_ids"] == engine.prompts[1] == first_segment["prompt_ids"]
    assert masked(record, 1) == [*engine.generated[1], *engine.generated[2]]
    full = record["prompt_ids"] + record["response_ids"]
    assert full[: len(engine.prompts[2])] == engine.prompts[2]


class Gated:
    """The engine's client, holding each call until ``go`` is set (``started`` says a call is in)."""

    def __init__(self, inner: ScriptedClient):
        self.inner = inner
        self.started, self.go = asyncio.Event(), asyncio.Event()

    async def generate(self, prompt_ids, sampling, request_id):
        self.started.set()
        await self.go.wait()
        return await self.inner.generate(prompt_ids, sampling, request_id)

    async def close(self):
        await self.inner.close()


def test_idle_sessions_expire_give_their_env_back_and_say_so(renderer):
    engine = Gated(ScriptedClient(renderer, ["<answer>1</answer>"]))

    async def main():
        async with serving(renderer, engine, idle_timeout_s=0.2) as (gw, http):
            core = gw.core
            # a session whose call is still in the engine while the others expire
            busy = await core.open(OpenSession())
            call = asyncio.create_task(
                core.complete(busy, ChatRequest(messages=[{"role": "user", "content": "Hi."}]))
            )
            await engine.started.wait()
            # a session on a task (opened in process, so its env is known before it can expire) and a free
            # one opened over HTTP
            on_task = await core.open(OpenSession(env_id=CALC, seed=4))
            env_session = on_task.env
            env = env_session.env
            opened = (await http.post("/sessions")).json()
            health = (await http.get("/health")).json()
            for _ in range(1000):  # a hang guard, not a time bound
                if health["sessions_expired"] >= 2:
                    break
                await asyncio.sleep(0.05)
                health = (await http.get("/health")).json()
            busy_kept = busy.id in core.store.open
            engine.go.set()
            completion = await call
            states = [await http.get(f"/sessions/{sid}") for sid in (on_task.id, opened["session_id"])]
            agent = AsyncOpenAI(base_url=gw.session_url(on_task.id), api_key="unused", max_retries=0)
            try:
                await agent.chat.completions.create(model="tiny", messages=on_task.prompt)
                chat_error = None
            except openai.APIStatusError as exc:
                chat_error = exc
            await agent.close()
            # its env is back in the pool: the next lease of that env gets it
            pool = core.host.pool
            again = pool.acquire(CALC, {})
            pool.release(again)
        return opened, health, busy_kept, completion, states, chat_error, env_session, env, again

    opened, health, busy_kept, completion, states, chat_error, env_session, env, again = asyncio.run(main())
    assert opened["idle_timeout_s"] == 0.2
    # the two idle sessions expired; the one in a call did not
    assert health["sessions_expired"] == 2 and health["sessions_open"] == 1 and busy_kept
    assert completion.reply["content"] == "<answer>1</answer>"
    for state in states:
        assert state.status_code == 410
        message = state.json()["error"]["message"]
        assert "expired at" in message and "after 0.2 s idle" in message
    assert isinstance(chat_error, openai.APIStatusError) and chat_error.status_code == 410
    assert "expired" in chat_error.body["message"]
    with pytest.raises(SessionClosed):
        _ = env_session.env
    assert again is env
