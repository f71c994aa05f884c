"""The HF backend on a GPU: ``HFClient`` against raw batched ``model.generate``, tokens/s at batch 16/64/128.

Both run the same model on ``cuda:0`` in bfloat16 (``HFClient(device="cuda", dtype="bfloat16")``, what
``--backend hf`` picks by itself on a GPU host): a 360M-parameter Qwen2-shaped model (SmolLM2-360M's shape:
32 layers, hidden 960, 15 heads with 5 KV heads, vocabulary 49,152, tied embeddings) with random weights,
built here so nothing is downloaded. Each row gets a random prompt of ``PROMPT_TOKENS`` tokens and samples
exactly ``NEW_TOKENS`` tokens at temperature 1 with no top-k/top-p: EOS is disabled on both sides (the client
is given no EOS ids, ``generate`` gets ``min_new_tokens``), so both do the same number of forward passes.
The client serves ``batch`` concurrent ``generate`` calls (one micro-batch, its own sampling loop with a
private generator per request); ``generate`` gets the batch as one tensor. One warm-up round, then
``ROUNDS`` timed rounds; the table gives median tokens/s and the client's ratio to ``generate`` (issue 14
measured 0.89-1.10x on an H100 before the device/dtype options existed).

Skipped without CUDA (CI and the CPU dev machines have none). Run on a GPU host::

    .venv/bin/pytest benchmarks/bench_hf_gpu.py -q -s -p no:logging
"""

from __future__ import annotations

import asyncio
import statistics
import time

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="the HF GPU benchmark needs a CUDA GPU")

BATCHES = (16, 64, 128)
PROMPT_TOKENS, NEW_TOKENS, ROUNDS = 128, 128, 3
RESULTS: dict[tuple[str, int], list[float]] = {}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, request):
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from toolgym.tiny_model import tiny_model_path

    path = tmp_path_factory.mktemp("qwen2-360m")
    config = Qwen2Config(
        vocab_size=49_152,
        hidden_size=960,
        intermediate_size=2_560,
        num_hidden_layers=32,
        num_attention_heads=15,
        num_key_value_heads=5,
        max_position_embeddings=4_096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    assert 340e6 < params < 380e6, params
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(tiny_model_path()).save_pretrained(path)
    del model
    torch.cuda.empty_cache()
    yield path
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    for line in table().splitlines():
        reporter.write_line(line)


@pytest.fixture(scope="module")
def client(model_dir):
    from toolgym.rollout.clients.hf import HFClient

    hf = HFClient(model_dir, device="cuda", dtype="bfloat16", max_batch=max(BATCHES))
    assert hf.device.type == "cuda" and hf.model.dtype == torch.bfloat16
    hf.eos_ids = frozenset()  # every row samples exactly NEW_TOKENS tokens, as generate does below
    yield hf
    asyncio.run(hf.close())


def prompts(batch: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(batch)
    return torch.randint(10, 1_500, (batch, PROMPT_TOKENS), generator=generator)


def run_client(client, batch: int) -> int:
    from toolgym.rollout.clients.base import Sampling

    rows = prompts(batch).tolist()

    async def go():
        return await asyncio.gather(
            *(
                client.generate(row, Sampling(max_tokens=NEW_TOKENS, temperature=1.0, seed=i), f"r{i}")
                for i, row in enumerate(rows)
            )
        )

    generations = asyncio.run(go())
    assert all(len(g.token_ids) == NEW_TOKENS for g in generations)
    return batch * NEW_TOKENS


def run_generate(client, batch: int) -> int:
    input_ids = prompts(batch).to("cuda")
    with torch.inference_mode():
        out = client.model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            pad_token_id=client.pad_id,
        )
    torch.cuda.synchronize()
    assert out.shape == (batch, PROMPT_TOKENS + NEW_TOKENS)
    return batch * NEW_TOKENS


@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("impl", ["generate", "client"])
def test_tokens_per_second(benchmark, client, impl, batch):
    run = {"client": run_client, "generate": run_generate}[impl]
    run(client, batch)  # warm-up: kernels, allocator, the client's worker task
    times = RESULTS.setdefault((impl, batch), [])

    def timed():
        torch.cuda.synchronize()
        started = time.perf_counter()
        tokens = run(client, batch)
        times.append(tokens / (time.perf_counter() - started))

    benchmark.pedantic(timed, rounds=ROUNDS, iterations=1)


def table() -> str:
    lines = [
        f"HF client vs raw model.generate: {torch.cuda.get_device_name(0)}, Qwen2 360M bf16, "
        f"{PROMPT_TOKENS} prompt + {NEW_TOKENS} new tokens per row, median of {ROUNDS} rounds",
        f"{'batch':>5}  {'client tok/s':>12}  {'generate tok/s':>14}  {'client/generate':>15}",
    ]
    for batch in BATCHES:
        client_tps = RESULTS.get(("client", batch))
        generate_tps = RESULTS.get(("generate", batch))
        if not client_tps or not generate_tps:
            continue
        c, g = statistics.median(client_tps), statistics.median(generate_tps)
        lines.append(f"{batch:>5}  {c:>12,.0f}  {g:>14,.0f}  {c / g:>14.2f}x")
    return "\n".join(lines)
