"""``--device`` / ``--dtype`` for the HF backend. CPU paths run here; the GPU choices are checked against a
torch that reports CUDA (no GPU in CI: ``benchmarks/bench_hf_gpu.py`` measures the GPU path on one)."""

import asyncio
import json

import pytest
import torch

from toolgym.cli import main
from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.clients.hf import HFClient, resolve_device, resolve_dtype
from toolgym.rollout.models import make_client
from toolgym.testing import tiny_model_path


@pytest.fixture
def two_gpus(monkeypatch):
    """torch as it reports itself on a machine with two CUDA GPUs (only the queries, nothing is placed)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    return monkeypatch


def test_auto_is_the_cpu_in_float32_without_a_gpu():
    assert not torch.cuda.is_available()
    assert resolve_device("auto") == torch.device("cpu") and resolve_device("CPU") == torch.device("cpu")
    assert resolve_dtype("auto", torch.device("cpu")) is torch.float32
    assert resolve_dtype("bfloat16", torch.device("cpu")) is torch.bfloat16


def test_auto_is_the_gpu_in_bfloat16_when_cuda_is_there(two_gpus):
    device = resolve_device("auto")
    assert device == torch.device("cuda", 0) and resolve_dtype("auto", device) is torch.bfloat16
    assert resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    assert resolve_dtype("float32", device) is torch.float32
    two_gpus.setattr(torch.cuda, "is_bf16_supported", lambda: False)  # e.g. a T4 or V100
    assert resolve_dtype("auto", device) is torch.float16


def test_a_gpu_that_is_not_there_is_an_error_saying_so(two_gpus):
    with pytest.raises(ValueError, match=r"only 2 CUDA device\(s\) are visible \(cuda:0 to cuda:1\)"):
        resolve_device("cuda:2")
    two_gpus.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"CUDA is not available here .* use --device cpu, or auto"):
        resolve_device("cuda")


@pytest.mark.parametrize(
    ("resolve", "value", "message"),
    [
        (resolve_device, "gpu", "unknown device 'gpu': use auto, cpu, cuda or cuda:N"),
        (resolve_device, "cuda:x", "unknown device"),
        (resolve_dtype, "fp8", "unknown dtype 'fp8': use auto, float32, bfloat16, float16"),
        (resolve_dtype, torch.int8, "unsupported dtype torch.int8"),
    ],
)
def test_unknown_choices_list_the_valid_ones(resolve, value, message):
    with pytest.raises(ValueError, match=message):
        resolve(value)


def test_make_client_hf_places_the_model_as_asked():
    client = make_client("tiny", backend="hf", device="cpu", dtype="bfloat16", max_batch=2)
    try:
        assert isinstance(client, HFClient) and client.max_batch == 2
        assert client.device == torch.device("cpu") and client.model.dtype == torch.bfloat16
        gen = asyncio.run(client.generate([10, 20, 30], Sampling(max_tokens=6, temperature=0.0), "r"))
        assert len(gen.token_ids) == len(gen.logprobs) >= 1 and all(lp <= 0.0 for lp in gen.logprobs)
    finally:
        asyncio.run(client.close())
    default = HFClient(tiny_model_path())
    assert default.device == torch.device("cpu") and default.model.dtype == torch.float32  # auto, no GPU


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"backend": "vllm", "device": "cuda:1"}, "applies to --backend hf; vLLM places the model itself"),
        ({"backend": "vllm", "dtype": "fp8"}, "unknown dtype 'fp8'"),
        ({"server": "http://127.0.0.1:9", "dtype": "float16"}, "the server chose its own"),
    ],
)
def test_make_client_refuses_choices_that_do_not_apply_before_starting_anything(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_client("tiny", **kwargs)


def test_rollout_with_the_hf_backend_in_bfloat16_on_the_cpu(tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    argv = ["rollout", "--env", "toolgym/Calculator-v0", "--model", "tiny", "--backend", "hf"]
    argv += ["--device", "cpu", "--dtype", "bfloat16", "--episodes", "2", "--max-response-tokens", "48"]
    argv += ["--max-tokens-per-turn", "16", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 and all(row["error"] is None and row["response_ids"] for row in rows)


def test_rollout_explains_a_missing_gpu(capsys):
    argv = [
        "rollout",
        "--env",
        "toolgym/Calculator-v0",
        "--model",
        "tiny",
        "--backend",
        "hf",
        "--device",
        "cuda",
    ]
    assert main(argv) == 2
    assert "CUDA is not available here" in capsys.readouterr().err
