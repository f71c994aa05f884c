"""The gateway over HTTP, as agent programs use it: the real ``openai`` SDK (and httpx for the session
routes) against one in-process gateway for the module, whose engine is a scripted client answering each
session from its own script.

The gateway and every test's client run on one event loop in a thread of their own (``served.run``), as an
in-process gateway runs beside a trainer's engine."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI

from toolgym.core.types import ToolCall
from toolgym.gateway import Gateway, GatewayConfig
from toolgym.rewards.numeric import NumericVerifier
from toolgym.rollout.models import make_renderer
from toolgym.rollout.session import SessionClosed
from toolgym.testing.scripted import LOOKUP_TOOLS, ScriptedClient, oracle_script

CALC = "toolgym/Calculator-v0"
TOOLS = LOOKUP_TOOLS


def hermes(call: ToolCall) -> str:
    """A tool call as the tiny model's template teaches it (``<tool_call>`` JSON)."""
    return f"<tool_call>\n{json.dumps({'name': call.name, 'arguments': call.arguments})}\n</tool_call>"


LOOKUP = hermes(ToolCall(name="lookup", arguments={"word": "gateway"}))


class Served:
    """One gateway on a loop in its own thread; each session's turns come from ``scripts[session_id]``."""

    def __init__(self) -> None:
        self.renderer = make_renderer("tiny", template_tools=True)
        self.scripts: dict[str, list[str]] = {}
        self.engine = ScriptedClient(self.renderer, self._policy)
        self.gateway = Gateway(
            GatewayConfig(model="tiny", max_model_len=2048), client=self.engine, renderer=self.renderer
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def _policy(self, session_id: str, turn: int, _prompt: str) -> str:
        return self.scripts[session_id][turn]

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=300)

    def generated(self, session_id: str) -> list[list[int]]:
        engine = self.engine
        return [g for g, sid in zip(engine.generated, engine.request_ids, strict=True) if sid == session_id]

    def prompts(self, session_id: str) -> list[list[int]]:
        engine = self.engine
        return [p for p, sid in zip(engine.prompts, engine.request_ids, strict=True) if sid == session_id]

    @property
    def url(self) -> str:
        return self.gateway.url

    def openai(self, session_id: str | None = None, **kwargs: Any) -> AsyncOpenAI:
        base = self.gateway.session_url(session_id) if session_id else f"{self.url}/v1"
        return AsyncOpenAI(base_url=base, api_key="unused", max_retries=0, **kwargs)

    def http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=60)


@pytest.fixture(scope="module")
def served():
    served = Served()
    served.thread.start()
    served.run(served.gateway.start())
    yield served
    served.run(served.gateway.stop())
    served.loop.call_soon_threadsafe(served.loop.stop)
    served.thread.join(timeout=60)
    served.loop.close()


async def open_session(http: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await http.post("/sessions", json=body)
    assert response.status_code == 201, response.text
    return response.json()


def masked(record: dict[str, Any], keep: int) -> list[int]:
    return [i for i, m in zip(record["response_ids"], record["response_mask"], strict=True) if m == keep]


def assert_faithful(served: Served, sid: str, record: dict[str, Any]) -> None:
    """The record holds what the engine sampled for ``sid``, as sampled, and everything else masked 0; each
    prompt the engine got is the record up to that call."""
    generated = served.generated(sid)
    assert generated and masked(record, 1) == [i for g in generated for i in g]
    full = record["prompt_ids"] + record["response_ids"]
    for prompt in served.prompts(sid):
        assert full[: len(prompt)] == prompt
    # mask 1 exactly on the sampled stretches: after each prompt, for as long as that call's reply
    expected = [0] * len(record["response_ids"])
    for prompt, ids in zip(served.prompts(sid), generated, strict=True):
        at = len(prompt) - len(record["prompt_ids"])
        assert full[len(prompt) : len(prompt) + len(ids)] == ids
        expected[at : at + len(ids)] = [1] * len(ids)
    assert record["response_mask"] == expected
    assert record["logprobs"] == [-0.5 if m else 0.0 for m in expected]


def test_calculator_tool_use_through_the_sdk_is_recorded_and_judged_by_the_env(served):
    async def main():
        async with served.http() as http:
            opened = await open_session(http, env_id=CALC, seed=3)
            sid = opened["session_id"]
            task = served.gateway.core.store.open[sid].env.inner.task
            *steps, answer = oracle_script(CALC, task)
            assert steps, "the task needs the calculator"
            served.scripts[sid] = [hermes(step) for step in steps] + [f"<answer>{answer}</answer>"]
            messages = list(opened["messages"])
            outputs = []
            agent = served.openai(sid)
            for _ in range(len(steps) + 2):
                reply = await agent.chat.completions.create(
                    model="tiny", messages=messages, tools=opened["tools"]
                )
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    assert reply.choices[0].finish_reason == "stop"
                    break
                assert reply.choices[0].finish_reason == "tool_calls"
                for call in message.tool_calls:
                    ran = await http.post(
                        f"/sessions/{sid}/tools/{call.function.name}",
                        json={"arguments": json.loads(call.function.arguments)},
                    )
                    assert ran.status_code == 200, ran.text
                    outputs.append(ran.json()["output"])
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": outputs[-1]})
            await agent.close()
            finished = (await http.post(f"/sessions/{sid}/finish", json={})).json()
            record = (await http.get(f"/sessions/{sid}/trajectory")).json()
        return opened, task, steps, answer, messages, outputs, finished, record

    opened, task, steps, answer, messages, outputs, finished, record = served.run(main())
    assert opened["env_id"] == CALC and opened["task_id"] == task.id
    assert [m["role"] for m in opened["messages"]] == ["system", "user"]
    assert task.prompt in opened["messages"][-1]["content"]
    assert [t["function"]["name"] for t in opened["tools"]] == ["calculator"]
    # the env's calculator ran each step; its results reached the model as masked tokens
    assert len(outputs) == len(steps) and len(record["tool_runs"]) == len(steps)
    assert [r["arguments"] for r in record["tool_runs"]] == [s.arguments for s in steps]
    # the env tools the gateway ran join the replies' turns, so the trajectory counts them as a runner's does
    ran = [r for turn in record["turns"] for r in turn["tool_results"]]
    assert [r["name"] for r in ran] == ["calculator"] * len(steps) and all(r["status"] == "ok" for r in ran)
    observed = served.renderer.decode(masked(record, 0))
    assert all(out.strip() and out in observed for out in outputs)
    assert messages[-1]["content"] == f"<answer>{answer}</answer>"
    # the reward is the env verifier's on the final answer
    expected = NumericVerifier().verify(task, str(answer))
    assert expected.reward == 1.0
    assert finished["reward"] == expected.reward and finished["verdict"]["passed"] is True
    assert record["reward"] == expected.reward and record["verdict"] == finished["verdict"]
    assert record["num_segments"] == 1 and record["restarts"] == []
    assert len(record["segments"][0]["calls"]) == len(steps) + 1
    assert_faithful(served, opened["session_id"], record)


def test_a_wrong_answer_gets_the_verifiers_zero(served):
    async def main():
        async with served.http() as http:
            opened = await open_session(http, env_id=CALC, seed=5)
            sid = opened["session_id"]
            served.scripts[sid] = ["<answer>-1</answer>"]
            agent = served.openai(sid)
            await agent.chat.completions.create(
                model="tiny", messages=opened["messages"], tools=opened["tools"]
            )
            await agent.close()
            finished = (await http.post(f"/sessions/{sid}/finish", json={})).json()
            again = await http.post(f"/sessions/{sid}/finish", json={"reward": 1.0})
        return finished, again

    finished, again = served.run(main())
    assert finished["reward"] == 0.0 and finished["verdict"]["passed"] is False
    assert finished["verdict"]["details"]["parsed"] == "-1"
    assert again.status_code == 409 and "already has a verdict" in again.json()["error"]["message"]


def test_streaming_reassembles_what_a_plain_call_returns(served):
    long_text = "A gateway records every token. " * 5
    script = ["Let me look that up first.\n" + LOOKUP, long_text]

    async def main():
        async with served.http() as http:
            plain_id = (await open_session(http))["session_id"]
            streamed_id = (await open_session(http))["session_id"]
        served.scripts[plain_id] = served.scripts[streamed_id] = script
        plain_agent, streamed_agent = served.openai(plain_id), served.openai(streamed_id)
        plain_history = [{"role": "user", "content": "Define gateway."}]
        streamed_history = list(plain_history)
        turns = []
        for _ in script:
            plain = await plain_agent.chat.completions.create(
                model="tiny", messages=plain_history, tools=TOOLS
            )
            stream = await streamed_agent.chat.completions.create(
                model="tiny",
                messages=streamed_history,
                tools=TOOLS,
                stream=True,
                stream_options={"include_usage": True},
            )
            content, calls, finish, usage, roles = "", {}, None, None, []
            async for chunk in stream:
                if chunk.usage is not None:
                    assert chunk.choices == []
                    usage = chunk.usage
                for choice in chunk.choices:
                    delta = choice.delta
                    roles += [delta.role] if delta.role else []
                    content += delta.content or ""
                    for call in delta.tool_calls or []:
                        slot = calls.setdefault(call.index, {"id": "", "name": "", "arguments": ""})
                        slot["id"] += call.id or ""
                        slot["name"] += call.function.name or ""
                        slot["arguments"] += call.function.arguments or ""
                    finish = choice.finish_reason or finish
            turns.append((plain, content, calls, finish, usage, roles))
            message = plain.choices[0].message
            plain_history.append(message.model_dump(exclude_none=True))
            streamed = {"role": "assistant", "content": content or None}
            if calls:
                streamed["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for _, c in sorted(calls.items())
                ]
            streamed_history.append(streamed)
            for history, tool_calls in ((plain_history, message.tool_calls), (streamed_history, calls)):
                if tool_calls:
                    history.append({"role": "tool", "tool_call_id": "c1", "content": "a door"})
        await plain_agent.close()
        await streamed_agent.close()
        async with served.http() as http:
            records = {}
            for sid in (plain_id, streamed_id):
                for _ in range(100):  # the stream marks its call delivered once it has sent the end
                    records[sid] = (await http.get(f"/sessions/{sid}/trajectory")).json()
                    if all(c["delivered"] for c in records[sid]["segments"][-1]["calls"]):
                        break
                    await asyncio.sleep(0.02)
        return plain_id, streamed_id, turns, records

    plain_id, streamed_id, turns, records = served.run(main())
    for plain, content, calls, finish, usage, roles in turns:
        message = plain.choices[0].message
        assert roles == ["assistant"]
        assert content == (message.content or "")
        got = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(calls.items())]
        assert got == [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]
        assert all(c["id"].startswith("call_") for c in calls.values())
        assert finish == plain.choices[0].finish_reason
        assert usage is not None and usage.model_dump() == plain.usage.model_dump()
    first, second = turns
    assert first[1] == "Let me look that up first." and first[3] == "tool_calls"
    assert second[1] == long_text
    assert second[3] == "stop" and len(second[1]) > 32  # streamed in several pieces
    for sid in (plain_id, streamed_id):
        record = records[sid]
        assert record["num_segments"] == 1 and record["restarts"] == []
        assert [c["delivered"] for c in record["segments"][0]["calls"]] == [True, True]
        assert_faithful(served, sid, record)
    # the same conversation, streamed or not, is the same tokens
    assert records[plain_id]["prompt_ids"] == records[streamed_id]["prompt_ids"]
    assert records[plain_id]["response_ids"] == records[streamed_id]["response_ids"]


def test_return_token_ids_and_logprobs_are_the_record(served):
    tokenizer = served.renderer.tokenizer

    async def main():
        async with served.http() as http:
            sid = (await open_session(http, session_id="token-ids"))["session_id"]
        served.scripts[sid] = ["First reply.", "Second reply, longer than the first."]
        agent = served.openai(sid)
        history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello."}]
        replies = []
        for turn in range(2):
            reply = await agent.chat.completions.create(
                model="tiny",
                messages=history,
                logprobs=True,
                extra_body={"return_token_ids": True},
                max_tokens=64,
                temperature=0.7,
                seed=turn,
            )
            replies.append(reply)
            history += [
                reply.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "More."},
            ]
        await agent.close()
        async with served.http() as http:
            record = (await http.get(f"/sessions/{sid}/trajectory")).json()
        return sid, replies, record

    sid, replies, record = served.run(main())
    generated, prompts = served.generated(sid), served.prompts(sid)
    full = record["prompt_ids"] + record["response_ids"]
    for reply, ids, prompt in zip(replies, generated, prompts, strict=True):
        choice = reply.choices[0]
        assert reply.model_extra["prompt_token_ids"] == prompt
        assert choice.model_extra["token_ids"] == ids
        assert full[: len(prompt)] == prompt and full[len(prompt) : len(prompt) + len(ids)] == ids
        assert [c.logprob for c in choice.logprobs.content] == [-0.5] * len(ids)
        assert [c.token for c in choice.logprobs.content] == tokenizer.convert_ids_to_tokens(ids)
        assert reply.usage.prompt_tokens == len(prompt) and reply.usage.completion_tokens == len(ids)
    assert record["prompt_ids"] == prompts[0]
    assert_faithful(served, sid, record)


def test_without_return_token_ids_or_logprobs_the_reply_has_neither(served):
    async def main():
        async with served.http() as http:
            sid = (await open_session(http))["session_id"]
        served.scripts[sid] = ["Plain."]
        agent = served.openai(sid)
        reply = await agent.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "Hi."}]
        )
        await agent.close()
        return reply

    reply = served.run(main())
    assert "prompt_token_ids" not in (reply.model_extra or {})
    assert "token_ids" not in (reply.choices[0].model_extra or {})
    assert reply.choices[0].logprobs is None
    assert reply.choices[0].message.content == "Plain." and reply.choices[0].finish_reason == "stop"
    assert reply.model == "tiny" and reply.object == "chat.completion"


def test_the_header_route_records_into_the_named_session(served):
    async def main():
        async with served.http() as http:
            sid = (await open_session(http))["session_id"]
            other = (await open_session(http))["session_id"]
        served.scripts[sid] = ["One.", "Two."]
        agent = served.openai(default_headers={"X-Session-Id": sid})
        history = [{"role": "user", "content": "Count."}]
        for _ in range(2):
            reply = await agent.chat.completions.create(model="anything", messages=history)
            history += [
                reply.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "Go on."},
            ]
        await agent.close()
        errors = []
        for headers in ({}, {"X-Session-Id": "no-such-session"}):
            bare = served.openai(default_headers=headers)
            try:
                await bare.chat.completions.create(model="tiny", messages=history)
            except openai.APIStatusError as exc:
                errors.append(exc)
            await bare.close()
        async with served.http() as http:
            record = (await http.get(f"/sessions/{sid}/trajectory")).json()
            untouched = (await http.get(f"/sessions/{other}")).json()
        return sid, record, untouched, errors

    sid, record, untouched, errors = served.run(main())
    assert record["num_segments"] == 1 and len(record["segments"][0]["calls"]) == 2
    assert served.renderer.decode(masked(record, 1)) == "One.<|im_end|>Two.<|im_end|>"
    assert_faithful(served, sid, record)
    assert untouched["calls"] == 0 and untouched["segments"] == 0
    no_header, unknown = errors
    assert isinstance(no_header, openai.BadRequestError) and "X-Session-Id" in no_header.message
    assert isinstance(unknown, openai.NotFoundError) and "no-such-session" in unknown.message


def test_models_and_health(served):
    async def main():
        async with served.http() as http:
            before = (await http.get("/health")).json()
            sid = (await open_session(http))["session_id"]
            during = (await http.get("/health")).json()
            agent = served.openai(sid)
            listed = await agent.models.list()
            await agent.close()
            plain = (await http.get("/v1/models")).json()
            unknown = await http.get("/sessions/nobody/v1/models")
            await http.delete(f"/sessions/{sid}")
            after = (await http.get("/health")).json()
        return before, during, listed, plain, unknown, after

    before, during, listed, plain, unknown, after = served.run(main())
    assert [m.id for m in listed.data] == ["tiny"] and listed.data[0].owned_by == "toolgym"
    assert [m["id"] for m in plain["data"]] == ["tiny"]
    assert unknown.status_code == 404 and "no session 'nobody'" in unknown.json()["error"]["message"]
    assert before["status"] == "ok" and before["model"] == "tiny" and before["max_sessions"] == 1024
    assert during["sessions_open"] == before["sessions_open"] + 1
    assert during["sessions_opened"] == before["sessions_opened"] + 1
    assert after["sessions_open"] == before["sessions_open"]
    assert after["sessions_opened"] == during["sessions_opened"]
    assert after["sessions_expired"] == before["sessions_expired"] == 0


def test_a_free_session_takes_the_clients_reward(served):
    async def main():
        async with served.http() as http:
            response = await http.post("/sessions")  # no body at all
            opened = response.json()
            sid = opened["session_id"]
            too_soon = await http.post(f"/sessions/{sid}/finish", json={})
            served.scripts[sid] = ["Done."]
            agent = served.openai(sid)
            await agent.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "Do it."}]
            )
            await agent.close()
            no_reward = await http.post(f"/sessions/{sid}/finish", json={})
            no_tools = await http.post(f"/sessions/{sid}/tools/calculator", json={"arguments": {}})
            finished = await http.post(
                f"/sessions/{sid}/finish", json={"reward": 0.5, "details": {"by": "me"}}
            )
            record = (await http.get(f"/sessions/{sid}/trajectory")).json()
        return response, opened, too_soon, no_reward, no_tools, finished, record

    response, opened, too_soon, no_reward, no_tools, finished, record = served.run(main())
    assert response.status_code == 201
    assert opened["env_id"] is None and opened["messages"] == [] and opened["tools"] == []
    assert opened["base_url"] == f"/sessions/{opened['session_id']}/v1"
    for refused in (too_soon, no_reward):
        assert refused.status_code == 422 and "post a reward" in refused.json()["error"]["message"]
    assert no_tools.status_code == 409 and "no toolgym env" in no_tools.json()["error"]["message"]
    assert finished.status_code == 200 and finished.json()["reward"] == 0.5
    assert finished.json()["verdict"]["details"] == {"source": "client", "by": "me"}
    assert record["reward"] == 0.5 and record["verdict"]["reward"] == 0.5
    assert record["segments"][-1]["reward"] == 0.5 and record["stop_reason"] == "answer"


def test_delete_returns_the_final_record_and_the_session_is_gone(served):
    core = served.gateway.core

    async def main():
        async with served.http() as http:
            opened = await open_session(http, env_id=CALC, seed=1)
            sid = opened["session_id"]
            env_session = core.store.open[sid].env
            served.scripts[sid] = ["<answer>0</answer>"]
            agent = served.openai(sid)
            await agent.chat.completions.create(
                model="tiny", messages=opened["messages"], tools=opened["tools"]
            )
            ended = await http.delete(f"/sessions/{sid}")
            later = {
                "state": await http.get(f"/sessions/{sid}"),
                "trajectory": await http.get(f"/sessions/{sid}/trajectory"),
                "delete": await http.delete(f"/sessions/{sid}"),
                "tool": await http.post(f"/sessions/{sid}/tools/calculator", json={"arguments": {}}),
            }
            try:
                await agent.chat.completions.create(model="tiny", messages=opened["messages"])
                chat_error = None
            except openai.APIStatusError as exc:
                chat_error = exc
            await agent.close()
        return sid, env_session, ended, later, chat_error

    sid, env_session, ended, later, chat_error = served.run(main())
    assert ended.status_code == 200
    final = ended.json()
    assert final["status"] == "ended" and final["session_id"] == sid and final["env_id"] == CALC
    assert final["num_segments"] == 1 and final["response_ids"] == served.generated(sid)[0]
    assert final["prompt_ids"] == served.prompts(sid)[0]
    for name, response in later.items():
        assert response.status_code == 410, name
        assert f"the session {sid!r} was ended (DELETE)" == response.json()["error"]["message"]
    assert chat_error is not None and chat_error.status_code == 410 and "ended" in chat_error.message
    with pytest.raises(SessionClosed):  # its env went back to the pool
        _ = env_session.env


def test_unknown_sessions_and_envs(served):
    async def main():
        async with served.http() as http:
            answers = {
                "state": await http.get("/sessions/nope"),
                "trajectory": await http.get("/sessions/nope/trajectory"),
                "delete": await http.delete("/sessions/nope"),
                "finish": await http.post("/sessions/nope/finish", json={"reward": 1}),
                "tool": await http.post("/sessions/nope/tools/calculator", json={"arguments": {}}),
            }
            env = await http.post("/sessions", json={"env_id": "toolgym/NoSuch-v0"})
            calc = await open_session(http, env_id=CALC, seed=2)
            tool = await http.post(f"/sessions/{calc['session_id']}/tools/shell", json={"arguments": {}})
            taken = await http.post("/sessions", json={"session_id": calc["session_id"]})
        agent = served.openai("nope")
        try:
            await agent.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi."}])
            chat_error = None
        except openai.APIStatusError as exc:
            chat_error = exc
        await agent.close()
        return answers, env, tool, taken, chat_error

    answers, env, tool, taken, chat_error = served.run(main())
    for name, response in answers.items():
        assert response.status_code == 404, name
        message = response.json()["error"]["message"]
        assert "no session 'nope'" in message and "POST /sessions" in message
    assert isinstance(chat_error, openai.NotFoundError) and "no session 'nope'" in chat_error.message
    assert env.status_code == 404 and "unknown env 'toolgym/NoSuch-v0'" in env.json()["error"]["message"]
    assert (
        tool.status_code == 404
        and "has no tool 'shell'; it has calculator" in tool.json()["error"]["message"]
    )
    assert taken.status_code == 409 and "already used" in taken.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"env_id": CALC, "env_kwargs": {"level": 7}}, 422, "level must be 1, 2 or 3, got 7"),
        ({"env_id": CALC, "env_kwargs": {"bogus": 1}}, 422, "unexpected keyword argument 'bogus'"),
        ({"env_id": CALC, "seed": -1}, 422, "seed: Input should be greater than or equal to 0"),
        ({"env_id": CALC, "task_id": "nope"}, 404, "has no task 'nope'"),
        ({"task_id": "calculator-L1/3"}, 422, "task_id and env_kwargs need an env_id"),
        ({"session_id": "not a valid id!"}, 422, "session_id"),
        ({"env": CALC}, 422, "env: Extra inputs are not permitted"),
    ],
)
def test_a_bad_session_request_is_refused_with_a_message(served, body, status, words):
    async def main():
        async with served.http() as http:
            before = (await http.get("/health")).json()
            response = await http.post("/sessions", json=body)
            after = (await http.get("/health")).json()
        return before, response, after

    before, response, after = served.run(main())
    assert response.status_code == status, response.text
    assert words in response.json()["error"]["message"]
    assert after["sessions_open"] == before["sessions_open"]
    assert after["sessions_opened"] == before["sessions_opened"]
