"""``toolgym serve agent``: an env played by a model behind ``POST /v1/chat/completions``, called with the
``openai`` client; the tools run server-side through the episode runner."""

import gymnasium as gym
import httpx
import openai
import pytest

from toolgym.rollout.keys import draw_task
from toolgym.server.agent import AgentConfig, create_app
from toolgym.testing.scripted import ScriptedClient, oracle_policy
from toolgym.testing.servers import serve_in_thread

ENV = "toolgym/Calculator-v0"


@pytest.fixture(scope="module")
def task():
    env = gym.make(ENV)
    task = draw_task(env, 0)
    env.close()
    return task


def _agent(renderer, policy):
    client = ScriptedClient(renderer, policy)
    app = create_app(AgentConfig(env_id=ENV, model="tiny"), client=client, renderer=renderer)
    return client, app


def test_a_pinned_task_is_played_with_server_side_tools_and_verified(renderer, task):
    client, app = _agent(renderer, oracle_policy(ENV, [task]))
    with serve_in_thread(app) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        assert [m.id for m in api.models.list()] == [ENV]
        reply = api.chat.completions.create(
            model=ENV, messages=[{"role": "user", "content": "go"}], extra_body={"task_id": task.id}, seed=3
        )
        by_metadata = api.chat.completions.create(
            model=ENV, messages=[{"role": "user", "content": "go"}], metadata={"task_id": task.id}
        )

    assert reply.choices[0].message.role == "assistant"
    assert reply.choices[0].message.content == str(task.answer)
    assert reply.choices[0].finish_reason == "stop"
    extra = reply.model_extra["toolgym"]
    assert extra["task_id"] == task.id and extra["env_id"] == ENV
    assert extra["verdict"]["passed"] is True and extra["reward"] == 1.0
    assert extra["tool_calls"] == 2 and extra["tool_errors"] == 0 and extra["turns"] == 3
    assert extra["stop_reason"] == "answer"
    # the calculator ran on the server: its results are in the transcript and were in the model's prompts
    assert "59697" in str(extra["messages"]) and "59697" in renderer.decode(client.prompts[1])
    usage = reply.usage
    assert usage.prompt_tokens == len(client.prompts[0])
    assert usage.completion_tokens == sum(len(ids) for ids in client.generated[:3])
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.model_extra == {"turns": 3, "tool_calls": 2}
    assert by_metadata.model_extra["toolgym"]["verdict"]["passed"] is True


def test_the_last_user_message_is_the_task_when_none_is_pinned(renderer):
    client, app = _agent(renderer, ["<calculator>6*7</calculator>", "<answer>42</answer>"])
    with serve_in_thread(app) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
        reply = api.chat.completions.create(
            model=ENV,
            messages=[
                {"role": "user", "content": "an earlier question"},
                {"role": "assistant", "content": "an earlier answer"},
                {"role": "user", "content": [{"type": "text", "text": "What is six times seven?"}]},
            ],
        )
    assert reply.choices[0].message.content == "42"
    extra = reply.model_extra["toolgym"]
    assert extra["verdict"] is None and extra["reward"] is None  # nothing to verify against
    assert extra["tool_calls"] == 1 and extra["turns"] == 2
    prompt = renderer.decode(client.prompts[0])
    assert "What is six times seven?" in prompt and "an earlier question" not in prompt
    assert "42" in renderer.decode(client.prompts[1])  # the calculator's output


def test_bad_requests_get_openai_errors_that_name_the_problem(renderer):
    client, app = _agent(renderer, ["<answer>1</answer>"])
    with serve_in_thread(app) as url:
        api = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        user = [{"role": "user", "content": "hi"}]
        with pytest.raises(openai.NotFoundError, match="serves 'toolgym/Calculator-v0'"):
            api.chat.completions.create(model="gpt-4o", messages=user)
        with pytest.raises(openai.NotFoundError, match="no task 'nope'") as missing:
            api.chat.completions.create(model=ENV, messages=user, extra_body={"task_id": "nope"})
        assert missing.value.body["type"] == "invalid_request_error"  # OpenAI's error body
        with pytest.raises(openai.BadRequestError, match="stream"):
            api.chat.completions.create(model=ENV, messages=user, stream=True)
        with pytest.raises(openai.UnprocessableEntityError, match="no user message"):
            api.chat.completions.create(model=ENV, messages=[{"role": "system", "content": "x"}])
    assert client.request_ids == []  # nothing reached the model


def test_the_tiny_engine_plays_an_episode_behind_the_endpoint(engine):
    """The real engine (the session fixture): vLLM is bound to the fixture's event loop, so the app is called
    on that loop through httpx's ASGI transport instead of a server thread."""
    app = create_app(
        AgentConfig(env_id=ENV, model="tiny", max_tokens_per_turn=16),
        client=engine.client,
        renderer=engine.renderer,
    )

    async def call():
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://agent")
        async with openai.AsyncOpenAI(base_url="http://agent/v1", api_key="unused", http_client=http) as api:
            return await api.chat.completions.create(
                model=ENV, messages=[{"role": "user", "content": "go"}], max_completion_tokens=48, seed=0
            )

    reply = engine.run(call())
    extra = reply.model_extra["toolgym"]
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert extra["turns"] >= 1 and extra["task_id"].startswith("request-")
    assert 0 < reply.usage.completion_tokens <= 48
    assert reply.usage.prompt_tokens > 0
