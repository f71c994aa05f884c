"""Choosing a model and a backend: ``--model PATH|tiny`` and ``--server URL`` in one place."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from toolgym.rollout.chat import ChatRenderer
from toolgym.rollout.clients.base import LLMClient
from toolgym.util.kwargs import MODEL_DTYPES


def resolve_model(model: str) -> str:
    """``tiny`` is the embedded offline test model; anything else is an HF model path or id."""
    if model == "tiny":
        from toolgym.tiny_model import tiny_model_path

        return str(tiny_model_path())
    if model.startswith(("/", "./", "../", "~")) and not Path(model).expanduser().exists():
        raise FileNotFoundError(
            f"no model at {model}: give a local model directory (config.json and tokenizer files), "
            "an HF model id, or 'tiny' (the embedded offline model)"
        )
    return str(Path(model).expanduser()) if model.startswith("~") else model


def load_tokenizer(model: str) -> Any:
    from transformers import AutoTokenizer

    path = resolve_model(model)
    try:
        return AutoTokenizer.from_pretrained(path)
    except OSError as exc:  # not a model directory, or an HF id neither cached nor reachable
        raise ValueError(
            f"cannot load a tokenizer for {model!r}: {exc}\n  give a local model directory, an HF model id "
            "that is in your HF cache (or reachable), or 'tiny'"
        ) from exc


def make_renderer(model: str, **kwargs: Any) -> ChatRenderer:
    """A renderer whose end-of-turn ids include every EOS id of the model's generation config.

    ``tiny`` renders with the tiny model's own tokenizer reader (``tokenizers`` and jinja2, no transformers
    or torch: ``toolgym.tiny_model.tokenizer``), so the first command, the docs and the tests that only
    render start at once; any other model loads its Hugging Face tokenizer."""
    path = resolve_model(model)
    if model == "tiny":
        from toolgym.tiny_model.tokenizer import TinyTokenizer

        tokenizer: Any = TinyTokenizer(path)
    else:
        tokenizer = load_tokenizer(path)
    renderer = ChatRenderer(tokenizer, **kwargs)
    renderer.eos_ids |= generation_eos_ids(path)
    return renderer


def generation_eos_ids(model: str) -> set[int]:
    """The EOS ids in the model's ``generation_config.json`` (models often end turns with more than one):
    read as JSON from a local model directory, through transformers for a hub id."""
    path = resolve_model(model)
    local = Path(path) / "generation_config.json"
    if local.is_file():
        import json

        eos = json.loads(local.read_text()).get("eos_token_id")
    elif Path(path).is_dir():  # a local model without a generation config
        return set()
    else:
        try:
            from transformers import GenerationConfig

            eos = GenerationConfig.from_pretrained(path).eos_token_id
        except OSError:  # no generation config
            return set()
    return set(eos if isinstance(eos, list) else [eos] if eos is not None else [])


#: what ``--dtype`` takes (kept in ``toolgym.util.kwargs``, so that building the command's parser imports
#: no rollout module)
DTYPES = MODEL_DTYPES


def make_client(
    model: str | None = None,
    server: str | Sequence[str] | None = None,
    backend: str = "vllm",
    *,
    device: str = "auto",
    dtype: str = "auto",
    ray_actors: int | None = None,
    **engine: Any,
) -> LLMClient:
    """An LLM client: ``server`` (an OpenAI-compatible URL) or an in-process ``backend`` (``vllm``/``hf``).

    Several engines: a list of server URLs, or ``ray_actors=N`` vLLM engines in Ray actors (see
    ``rollout/clients/ray_actor.py``), both behind a ``MultiClient`` that keeps each episode on one engine.

    ``dtype`` (one of ``DTYPES``) goes to either backend: ``auto`` is vLLM's own choice, and for ``hf``
    bfloat16 on a GPU and float32 on the CPU. ``device`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``) places the
    ``hf`` model (``auto``: a GPU when there is one); vLLM places its model itself.
    """
    servers = [server] if isinstance(server, str) else list(server or [])
    if servers:
        if (device, dtype) != ("auto", "auto"):
            raise ValueError("--device and --dtype apply to an in-process backend; the server chose its own")
        if ray_actors:
            raise ValueError("--ray starts its own engines from --model; give --ray or --server, not both")
        from toolgym.rollout.clients.openai_http import OpenAICompletionsClient

        name = None if model in (None, "tiny") else model
        clients = [OpenAICompletionsClient(url, model=name) for url in servers]
        if len(clients) == 1:
            return clients[0]
        from toolgym.rollout.clients.multi import MultiClient

        return MultiClient(clients)
    if model is None:
        raise ValueError("give a model (a path, an HF id or 'tiny') or a server URL")
    path = resolve_model(model)
    if backend == "vllm":
        from toolgym.rollout.clients.vllm_inproc import VLLMClient

        if device != "auto":
            raise ValueError(
                f"--device {device} applies to --backend hf; vLLM places the model itself "
                "(choose its GPUs with CUDA_VISIBLE_DEVICES)"
            )
        if dtype != "auto":
            if dtype not in DTYPES:
                raise ValueError(f"unknown dtype {dtype!r}: use {', '.join(DTYPES)}")
            engine["dtype"] = dtype
        if model == "tiny" or Path(path).parent.name == "toolgym":
            engine.setdefault("dtype", "float32")
            engine.setdefault("gpu_memory_utilization", 0.05)
        if ray_actors:
            from toolgym.rollout.clients.ray_actor import start_vllm_actors
            from toolgym.rollout.clients.vllm_inproc import VLLMConfig

            return start_vllm_actors(ray_actors, VLLMConfig(model=path, **engine))
        return VLLMClient(path, **engine)
    if ray_actors:
        raise ValueError("--ray hosts vLLM engines; it needs --backend vllm")
    if backend == "hf":
        from toolgym.rollout.clients.hf import HFClient

        return HFClient(path, device=device, dtype=dtype, **engine)
    raise ValueError(f"unknown backend {backend!r}; use 'vllm' or 'hf', or pass a server URL")
