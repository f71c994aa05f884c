"""The gateway in front of a real engine: vLLM's OpenAI server on the tiny model (the session's shared
server), through ``toolgym serve gateway --server URL`` as users start it, and in process.

What the trajectory holds as sampled must be exactly what the engine returned, token by token: the in-process
test wraps the engine's client to see each Generation, the CLI test reads the ids the engine's reply carried
(``return_token_ids``)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import httpx
import pytest
from openai import AsyncOpenAI

from toolgym.gateway import Gateway, GatewayConfig
from toolgym.rollout.clients.openai_http import OpenAICompletionsClient
from toolgym.rollout.models import make_renderer
from toolgym.testing.scripted import LOOKUP_TOOLS
from toolgym.testing.servers import free_port

TOOLS = LOOKUP_TOOLS


class RecordingClient:
    """The engine's client, keeping every Generation it returned."""

    def __init__(self, inner):
        self.inner, self.generations = inner, []

    async def generate(self, prompt_ids, sampling, request_id):
        generation = await self.inner.generate(prompt_ids, sampling, request_id)
        self.generations.append(generation)
        return generation

    async def close(self):
        await self.inner.close()


async def _three_turns(base_url: str, headers: dict | None = None) -> list:
    """An openai-SDK conversation of three calls: each reply goes back into the history with a tool result."""
    client = AsyncOpenAI(base_url=base_url, api_key="unused", default_headers=headers)
    messages: list = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Define gateway."},
    ]
    replies = []
    for turn in range(3):
        reply = await client.chat.completions.create(
            model="tiny",
            messages=messages,
            tools=TOOLS,
            max_tokens=12,
            seed=turn,
            extra_body={"return_token_ids": True},
        )
        replies.append(reply)
        message = reply.choices[0].message.model_dump(exclude_none=True)
        messages += [message, {"role": "tool", "tool_call_id": "call_1", "content": f"result {turn}"}]
    await client.close()
    return replies


def test_trajectory_is_what_vllm_sampled(vllm_server):
    renderer = make_renderer("tiny", template_tools=True)

    async def main():
        engine = RecordingClient(OpenAICompletionsClient(vllm_server.base_url))
        config = GatewayConfig(model="tiny", max_model_len=2048)
        async with (
            Gateway(config, client=engine, renderer=renderer) as gw,
            httpx.AsyncClient(base_url=gw.url) as http,
        ):
            sid = (await http.post("/sessions")).json()["session_id"]
            replies = await _three_turns(gw.session_url(sid))
            record = (await http.get(f"/sessions/{sid}/trajectory")).json()
        await engine.close()
        return engine.generations, replies, record

    generations, replies, record = vllm_server.run(main())
    assert record["num_segments"] == 1 and record["restarts"] == []
    sampled = [i for g in generations for i in g.token_ids]
    ids, mask = record["response_ids"], record["response_mask"]
    assert [i for i, m in zip(ids, mask, strict=True) if m] == sampled
    assert [lp for lp, m in zip(record["logprobs"], mask, strict=True) if m] == [
        lp for g in generations for lp in g.logprobs
    ]
    assert all(lp == 0.0 for lp, m in zip(record["logprobs"], mask, strict=True) if not m)
    # each call's context is the record so far: the engine saw exactly the recorded ids
    full = record["prompt_ids"] + ids
    for reply in replies:
        prompt = reply.model_extra["prompt_token_ids"]
        assert full[: len(prompt)] == prompt
        assert (
            full[len(prompt) : len(prompt) + len(reply.choices[0].model_extra["token_ids"])]
            == (reply.choices[0].model_extra["token_ids"])
        )
    assert len(record["segments"][0]["calls"]) == 3


def test_serve_gateway_command(vllm_server, tmp_path):
    """`toolgym serve gateway --model tiny --server URL`: sessions over HTTP, the header route, the record."""
    port = free_port()
    log = (tmp_path / "gateway.log").open("w")  # the server's log, closed in finally
    command = [sys.executable, "-m", "toolgym.cli", "serve", "gateway", "--model", "tiny", "--server"]
    command += [
        vllm_server.base_url,
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):  # until it answers (or has died)
            assert proc.poll() is None, (tmp_path / "gateway.log").read_text()
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        sid = httpx.post(f"{url}/sessions", json={"session_id": "cli-1"}).json()["session_id"]
        replies = asyncio.run(_three_turns(f"{url}/v1", headers={"X-Session-Id": sid}))
        record = httpx.get(f"{url}/sessions/{sid}/trajectory").json()
        sampled = [i for r in replies for i in r.choices[0].model_extra["token_ids"]]
        assert [
            i for i, m in zip(record["response_ids"], record["response_mask"], strict=True) if m
        ] == sampled
        assert record["num_segments"] == 1
        assert httpx.get(f"{url}/health").json()["completions"] == 3
        ended = httpx.delete(f"{url}/sessions/{sid}")
        assert ended.status_code == 200 and ended.json()["status"] == "ended"
        gone = httpx.get(f"{url}/sessions/{sid}/trajectory")
        assert gone.status_code == 410 and "ended" in gone.json()["error"]["message"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


@pytest.mark.parametrize("bad", ["--max-sessions=0", "--idle-timeout=-1"])
def test_serve_gateway_refuses_bad_options(bad):
    done = subprocess.run(
        [sys.executable, "-m", "toolgym.cli", "serve", "gateway", "--model", "tiny", bad],
        capture_output=True,
        text=True,
    )
    assert done.returncode != 0
    assert ("max-sessions" in done.stderr) or ("idle-timeout" in done.stderr)
