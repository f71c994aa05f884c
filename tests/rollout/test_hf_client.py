"""HFClient on the tiny model: raw logprobs, stops, EOS, seeds, max_tokens, micro-batching, errors."""

import asyncio

import pytest
import torch

from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.hf import HFClient
from toolgym.tiny_model.builder import TINY_MODEL_SPEC, tiny_model_path

PROMPTS = [[10, 20, 30, 40], [100, 7, 250, 9, 31], [1200, 3], [5], [42, 43, 44, 45, 46, 47, 48, 49, 50]]


@pytest.fixture(scope="module")
def hf_client():
    client = HFClient(tiny_model_path(), max_batch=8)
    yield client
    asyncio.run(client.close())


def generate(client, prompt, sampling, request_id="r"):
    return asyncio.run(client.generate(prompt, sampling, request_id))


def generate_many(client, prompts, samplings):
    async def main():
        return await asyncio.gather(
            *(client.generate(p, s, f"r{i}") for i, (p, s) in enumerate(zip(prompts, samplings)))
        )

    return asyncio.run(main())


def manual_logprobs(client, prompt, token_ids):
    """log_softmax of the raw logits at each generated position, from one plain forward pass."""
    with torch.inference_mode():
        logits = client.model(torch.tensor([prompt + token_ids])).logits[0].float()
    steps = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
    return [steps[i, t].item() for i, t in enumerate(token_ids)]


def eos_prompt(client):
    """A two-token prompt after which greedy decoding emits an EOS token (searched, as weights are random)."""
    with torch.inference_mode():
        candidates = torch.stack([torch.full((client.vocab_size,), 10), torch.arange(client.vocab_size)], 1)
        top = client.model(candidates).logits[:, -1].float().topk(2, dim=-1)
    margin = torch.where(
        torch.isin(top.indices[:, 0], torch.tensor(sorted(client.eos_ids))),
        top.values[:, 0] - top.values[:, 1],
        torch.tensor(-1.0),
    )
    best = int(margin.argmax())
    assert margin[best] > 0.01, "no two-token prompt makes the tiny model emit EOS greedily"
    return [10, best]


@pytest.mark.parametrize(
    "sampling",
    [
        Sampling(max_tokens=12, temperature=1.0, seed=0),
        Sampling(max_tokens=12, temperature=0.6, top_k=50, top_p=0.9, seed=1),
        Sampling(max_tokens=12, temperature=0.0),
    ],
    ids=["t1", "t0.6-topk-topp", "greedy"],
)
def test_logprobs_are_raw_model_logprobs(hf_client, sampling):
    """Like vLLM's default ``raw_logprobs``: log_softmax of the unscaled logits, whatever the sampling."""
    gen = generate(hf_client, PROMPTS[0], sampling)
    assert len(gen.logprobs) == len(gen.token_ids) >= 1
    assert all(0 <= t < TINY_MODEL_SPEC.vocab_size for t in gen.token_ids)
    assert gen.logprobs == pytest.approx(manual_logprobs(hf_client, PROMPTS[0], gen.token_ids), abs=1e-4)


def test_max_tokens(hf_client):
    gen = generate(hf_client, PROMPTS[1], Sampling(max_tokens=5, temperature=0.0))
    assert gen.finish_reason == "length" and gen.stop_text is None
    assert len(gen.token_ids) == len(gen.logprobs) == 5


def test_greedy_equals_transformers_generate(hf_client):
    with torch.inference_mode():
        out = hf_client.model.generate(torch.tensor([PROMPTS[2]]), max_new_tokens=10, do_sample=False)
    gen = generate(hf_client, PROMPTS[2], Sampling(max_tokens=10, temperature=0.0))
    assert gen.token_ids == out[0, len(PROMPTS[2]) :].tolist()


def test_stop_string_is_kept_and_ends_generation(hf_client):
    tokenizer = hf_client.tokenizer
    samplings = [Sampling(max_tokens=64, stop=("e", "zzz"), seed=seed) for seed in range(8)]
    gens = generate_many(hf_client, [PROMPTS[0]] * 8, samplings)
    stopped = [g for g in gens if g.stop_text is not None]
    assert stopped, "no sample hit the stop string 'e' within 64 tokens"
    for gen in stopped:
        assert gen.finish_reason == "stop" and gen.stop_text == "e"
        assert "e" in tokenizer.decode(gen.token_ids, skip_special_tokens=False)
        assert "e" not in tokenizer.decode(gen.token_ids[:-1], skip_special_tokens=False)
    for gen in gens:
        assert gen.stop_text is not None or gen.finish_reason in ("stop", "length")


def test_earliest_stop_string_wins(hf_client):
    """Of several stop strings, the one appearing first in the text ends the turn (not the first listed)."""
    decode = lambda ids: hf_client.tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    sampling = Sampling(max_tokens=20, seed=11)
    free = generate(hf_client, PROMPTS[4], sampling)
    text = decode(free.token_ids)
    pieces = {decode([t]) for t in free.token_ids[2:]}
    pieces = sorted((p for p in pieces if p.strip() and "\ufffd" not in p), key=text.find)
    early, late = pieces[0], pieces[-1]
    assert text.find(early) < text.find(late)
    gen = generate(hf_client, PROMPTS[4], sampling.model_copy(update={"stop": (late, early)}))
    cut = next(k for k in range(1, len(free.token_ids) + 1) if early in decode(free.token_ids[:k]))
    assert gen.finish_reason == "stop" and gen.stop_text == early
    assert gen.token_ids == free.token_ids[:cut]


def test_eos_ends_generation_and_is_returned(hf_client):
    prompt = eos_prompt(hf_client)
    gen = generate(hf_client, prompt, Sampling(max_tokens=10, temperature=0.0))
    assert len(gen.token_ids) == 1 and gen.token_ids[0] in hf_client.eos_ids
    assert gen.finish_reason == "stop" and gen.stop_text is None
    assert gen.logprobs == pytest.approx(manual_logprobs(hf_client, prompt, gen.token_ids), abs=1e-4)


def test_seeds_are_reproducible_and_leave_the_global_rng_alone(hf_client):
    state = torch.get_rng_state()
    a = generate(hf_client, PROMPTS[1], Sampling(max_tokens=16, seed=7))
    b = generate(hf_client, PROMPTS[1], Sampling(max_tokens=16, seed=7))
    c = generate(hf_client, PROMPTS[1], Sampling(max_tokens=16, seed=8))
    assert a.token_ids == b.token_ids and a.token_ids != c.token_ids
    assert torch.equal(state, torch.get_rng_state())
    # the same seeded request in a batch with others samples the same tokens
    free, seeded = Sampling(max_tokens=16), Sampling(max_tokens=16, seed=7)
    batched = generate_many(hf_client, PROMPTS[:3], [free, seeded, free])
    assert batched[1].token_ids == a.token_ids


def test_batched_greedy_equals_unbatched(hf_client):
    sampling = Sampling(max_tokens=12, temperature=0.0)
    prompts = [*PROMPTS, [7, 8, 9], [300] * 12, [1500, 1]]  # different lengths: left padding in play
    alone = [generate(hf_client, p, sampling) for p in prompts]
    together = generate_many(hf_client, prompts, [sampling] * len(prompts))
    for a, b in zip(alone, together):
        assert a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_per_request_budgets_in_one_batch(hf_client):
    budgets = [1, 3, 9, 5]
    gens = generate_many(hf_client, PROMPTS[:4], [Sampling(max_tokens=n, temperature=0.0) for n in budgets])
    for n, gen in zip(budgets, gens):
        assert gen.finish_reason == "stop" or len(gen.token_ids) == n


def test_top_k_1_and_tiny_top_p_are_greedy(hf_client):
    greedy = generate(hf_client, PROMPTS[3], Sampling(max_tokens=8, temperature=0.0))
    top_k = generate(hf_client, PROMPTS[3], Sampling(max_tokens=8, top_k=1, seed=3))
    top_p = generate(hf_client, PROMPTS[3], Sampling(max_tokens=8, top_p=1e-6, seed=4))
    assert top_k.token_ids == greedy.token_ids == top_p.token_ids


def test_event_loop_stays_free(hf_client):
    async def main():
        ticks = 0
        task = asyncio.ensure_future(hf_client.generate(PROMPTS[0], Sampling(max_tokens=64, seed=0), "slow"))
        while not task.done():
            await asyncio.sleep(0.001)
            ticks += 1
        return ticks, task.result()

    ticks, gen = asyncio.run(main())
    assert gen.token_ids
    assert ticks >= 3


@pytest.mark.parametrize(
    ("prompt", "sampling", "message"),
    [
        ([], Sampling(), "empty"),
        ([1, 10**6], Sampling(), "out of the vocabulary"),
        ([1, 2], Sampling(max_tokens=10**6), "maximum length"),
    ],
)
def test_invalid_requests_raise(hf_client, prompt, sampling, message):
    with pytest.raises(ClientError, match=message):
        generate(hf_client, prompt, sampling)


def test_closed_client_raises():
    client = HFClient(tiny_model_path())
    asyncio.run(client.close())
    with pytest.raises(ClientError, match="closed"):
        generate(client, PROMPTS[0], Sampling(max_tokens=2))
