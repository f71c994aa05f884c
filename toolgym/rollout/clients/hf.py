"""An :class:`~toolgym.rollout.clients.base.LLMClient` on plain Hugging Face transformers (no vLLM needed).

The fallback for machines without vLLM and the reference the engines are compared against. It runs its own
small decoding loop over the model's forward pass instead of ``model.generate`` because every request in a
batch has its own sampling settings, seed, stop strings and token budget, which ``generate`` cannot mix.

How it behaves, and why:

- **Micro-batching.** Concurrent ``generate`` calls are queued; a worker task takes up to ``max_batch`` of
  them at a time, left-pads the prompts and decodes them together with a KV cache in a worker thread
  (``asyncio.to_thread``), so the event loop stays free for the environments. A batch runs until its last
  request finishes; requests arriving meanwhile form the next batch. Padding is masked and positions are
  counted per row, so a batched request computes the same logits as alone up to float rounding.
- **Logprobs** are ``log_softmax`` of the model's *raw* logits (float32) for the sampled token, i.e. before
  temperature, top-k or top-p. That is vLLM's default ``logprobs_mode="raw_logprobs"``, so this client, the
  HTTP client and the in-process vLLM client report the same quantity.
- **Sampling**: the repetition penalty (transformers' ``RepetitionPenaltyLogitsProcessor`` over prompt and
  output, as vLLM applies it) first; then temperature 0 is greedy (argmax); otherwise logits / temperature,
  then top-k, then top-p (vLLM's order), then one draw from the request's own ``torch.Generator``.
  ``Sampling.extra`` (engine-specific fields) is refused: this loop implements none of them.
- **Seeds** never touch the global RNG: each request gets a private generator, seeded with ``seed`` (or from
  OS entropy when ``None``), so seeding one request neither reseeds the process nor changes what
  concurrent requests sample. The same seed gives the same tokens whenever the logits are the same (a
  different batch composition can, rarely, change the last float bits and so a near-tie).
- **Device and dtype**: ``device="auto"`` is the first CUDA GPU when there is one, else the CPU; ``cpu``,
  ``cuda`` and ``cuda:N`` pick one (an absent GPU is an error that says so). ``dtype="auto"`` is bfloat16 on
  a GPU (float16 on one without bfloat16) and float32 on the CPU; ``float32``, ``bfloat16`` and ``float16``
  pick one. Logprobs are computed in float32 whatever the dtype.
- **Stops**: after each token the continuation is decoded (special tokens kept, as the HTTP client asks of
  vLLM) and generation stops at the first stop string it contains; the token that completed the string is
  the last one returned, so the stop string is part of the output. A stop string wins over EOS and over
  ``max_tokens`` on the same token, as in vLLM. EOS ids come from ``generation_config.eos_token_id`` (plus the
  tokenizer's); the EOS token is returned with its logprob, again as vLLM does.
"""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from toolgym.rollout.clients.base import FinishReason, Generation, Sampling
from toolgym.rollout.clients.errors import ClientError

__all__ = ["DEVICES", "DTYPES", "HFClient", "resolve_device", "resolve_dtype"]

#: what ``--device`` takes, and ``--dtype`` (with ``auto``)
DEVICES = "auto, cpu, cuda or cuda:N"
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(eq=False)
class _Request:
    prompt_ids: list[int]
    sampling: Sampling
    request_id: str
    future: asyncio.Future[Generation]


@dataclass(eq=False)
class _Row:
    """One request's decoding state inside a batch."""

    request: _Request
    generator: torch.Generator
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    stop_text: str | None = None


class HFClient:
    """Generate with the transformers causal LM in ``model_path``, loaded here (synchronously), on ``device``
    in ``dtype`` (both ``auto`` by default: a GPU in bfloat16 when there is one, else the CPU in float32).

    ``max_batch`` bounds how many requests decode together. One client serves one event loop at a time (it
    follows the loop if you switch, e.g. between ``asyncio.run`` calls).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str | torch.device = "auto",
        dtype: str | torch.dtype = "auto",
        max_batch: int = 8,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        place = resolve_device(device)  # before loading: a missing GPU fails fast, saying so
        dtype = resolve_dtype(dtype, place)
        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=dtype).to(place).eval()
        self._setup(model, tokenizer, place, max_batch)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, *, max_batch: int = 8) -> HFClient:
        """A client over a model already in memory (a trainer's policy): it generates on the model's device
        in its dtype, and leaves its train/eval mode alone."""
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        client = cls.__new__(cls)
        client._setup(model, tokenizer, next(model.parameters()).device, max_batch)
        return client

    def _setup(self, model: Any, tokenizer: Any, device: torch.device, max_batch: int) -> None:
        self.device = device
        self.max_batch = max_batch
        self.tokenizer = tokenizer
        self.model = model
        self.eos_ids = _eos_ids(self.model, self.tokenizer)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (min(self.eos_ids) if self.eos_ids else 0)
        self.vocab_size = int(self.model.get_output_embeddings().weight.shape[0])
        self.max_length = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        self._model_lock = threading.Lock()  # one batch at a time, even across event loops
        self._queue: asyncio.Queue[_Request] | None = None
        self._worker: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        if self._closed:
            raise ClientError("the HF client is closed")
        self._check_prompt(prompt_ids, sampling)
        loop = asyncio.get_running_loop()
        queue = self._ensure_worker(loop)
        request = _Request(list(prompt_ids), sampling, request_id, loop.create_future())
        queue.put_nowait(request)
        return await request.future

    async def close(self) -> None:
        """Stop the worker and fail queued requests; a running batch ends (``abort``) at its next token."""
        self._closed = True
        if self._worker is not None and not self._worker.done():
            if self._loop is asyncio.get_running_loop():
                self._worker.cancel()
                await asyncio.gather(self._worker, return_exceptions=True)
            elif self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._worker.cancel)
        if self._queue is not None:
            while not self._queue.empty():
                _fail(self._queue.get_nowait(), ClientError("the HF client was closed"))

    # --- batching -----------------------------------------------------------------------------------------

    def _ensure_worker(self, loop: asyncio.AbstractEventLoop) -> asyncio.Queue[_Request]:
        if self._loop is not loop or self._worker is None or self._worker.done():
            self._loop = loop
            self._queue = asyncio.Queue()
            self._worker = loop.create_task(self._work(self._queue), name="toolgym-hf-client")
        assert self._queue is not None
        return self._queue

    async def _work(self, queue: asyncio.Queue[_Request]) -> None:
        """Take whatever is queued (up to ``max_batch``), decode it in a thread, deliver, repeat."""
        while True:
            batch = [await queue.get()]
            await asyncio.sleep(0)  # let callers started in the same tick join this batch
            while len(batch) < self.max_batch and not queue.empty():
                batch.append(queue.get_nowait())
            batch = [r for r in batch if not r.future.done()]  # cancelled while queued
            if not batch:
                continue
            try:
                results = await asyncio.to_thread(self._run_batch, batch)
            except asyncio.CancelledError:
                for request in batch:
                    _fail(request, ClientError("the HF client was closed"))
                raise
            except Exception as exc:
                for request in batch:
                    _fail(request, ClientError(f"HF generation failed: {type(exc).__name__}: {exc}"), exc)
                continue
            for request, generation in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(generation)

    # --- decoding (worker thread) -----------------------------------------------------------------------

    def _run_batch(self, batch: list[_Request]) -> list[Generation]:
        with self._model_lock, torch.inference_mode():
            return self._decode(batch)

    def _decode(self, batch: list[_Request]) -> list[Generation]:
        rows = [_Row(r, _generator(r.sampling.seed, self.device)) for r in batch]
        width = max(len(r.prompt_ids) for r in batch)
        input_ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        # left padding: every row's last prompt token is in the last column
        for i, request in enumerate(batch):
            input_ids[i, width - len(request.prompt_ids) :] = torch.tensor(request.prompt_ids)
            mask[i, width - len(request.prompt_ids) :] = 1
        input_ids, mask = input_ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1
        )
        while True:
            logits = out.logits[:, -1, :].float()
            logprobs = torch.log_softmax(logits, dim=-1)
            next_ids = torch.full((len(rows),), self.pad_id, dtype=torch.long)
            live = [i for i, row in enumerate(rows) if row.finish_reason is None]
            tokens = _draw(logits, rows, live)
            # one copy to the host for the whole batch (a copy per row waited on the device each time)
            chosen = logprobs[torch.tensor(live, device=logits.device), tokens].tolist()
            for i, token, logprob in zip(live, tokens.tolist(), chosen, strict=True):
                row = rows[i]
                row.token_ids.append(token)
                row.logprobs.append(float(logprob))
                next_ids[i] = token
                self._check_finished(row, token)
            if all(row.finish_reason is not None for row in rows):
                break
            mask = torch.cat([mask, mask.new_ones((len(rows), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            out = self.model(
                input_ids=next_ids[:, None].to(self.device),
                attention_mask=mask,
                position_ids=positions,
                past_key_values=out.past_key_values,
                use_cache=True,
            )
        return [
            Generation(
                token_ids=row.token_ids,
                logprobs=row.logprobs,
                finish_reason=row.finish_reason or "abort",
                stop_text=row.stop_text,
            )
            for row in rows
        ]

    def _check_finished(self, row: _Row, token: int) -> None:
        """Set ``row.finish_reason`` if ``token`` ended it: stop string, then EOS, then the token budget."""
        sampling = row.request.sampling
        if sampling.stop:
            text = self.tokenizer.decode(
                row.token_ids, skip_special_tokens=False, clean_up_tokenization_spaces=False
            )
            stop = _first_stop(text, sampling.stop)
            if stop is not None:
                row.finish_reason, row.stop_text = "stop", stop
                return
        if token in self.eos_ids:
            row.finish_reason = "stop"
        elif len(row.token_ids) >= sampling.max_tokens:
            row.finish_reason = "length"
        elif self._closed or row.request.future.cancelled():
            row.finish_reason = "abort"

    def _check_prompt(self, prompt_ids: list[int], sampling: Sampling) -> None:
        """Reject what the engines reject too, before it can fail a whole batch."""
        if sampling.extra:
            raise ClientError(
                f"the HF backend supports no engine-specific sampling fields (Sampling.extra: "
                f"{sorted(sampling.extra)}); use the vLLM backend or a server for them"
            )
        if not prompt_ids:
            raise ClientError("the prompt is empty")
        bad = [t for t in prompt_ids if not 0 <= t < self.vocab_size]
        if bad:
            raise ClientError(f"prompt token ids out of the vocabulary (size {self.vocab_size}): {bad[:5]}")
        if self.max_length is not None and len(prompt_ids) + sampling.max_tokens > self.max_length:
            raise ClientError(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({sampling.max_tokens}) exceeds the "
                f"model's maximum length {self.max_length}"
            )


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``auto`` (CUDA when available, else CPU), ``cpu``, ``cuda`` or ``cuda:N``; a GPU that is not there is a
    ``ValueError`` saying what is."""
    text = str(device).strip().lower()
    if text == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else _CPU
    if text == "cpu":
        return _CPU
    match = re.fullmatch(r"cuda(?::(\d+))?", text)
    if match is None:
        raise ValueError(f"unknown device {device!r}: use {DEVICES}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"device {text!r}: CUDA is not available here (torch {torch.__version__}, "
            "torch.cuda.is_available() is False); use --device cpu, or auto (a GPU only when there is one)"
        )
    count = torch.cuda.device_count()
    index = int(match.group(1)) if match.group(1) is not None else torch.cuda.current_device()
    if index >= count:
        raise ValueError(
            f"device {text!r}: only {count} CUDA device(s) are visible (cuda:0 to cuda:{count - 1}); "
            "check CUDA_VISIBLE_DEVICES"
        )
    return torch.device("cuda", index)


def resolve_dtype(dtype: str | torch.dtype = "auto", device: torch.device | None = None) -> torch.dtype:
    """``auto`` (bfloat16 on a GPU, float16 on a GPU without bfloat16, float32 on the CPU) or a name in
    ``DTYPES``."""
    if isinstance(dtype, torch.dtype):
        if dtype not in DTYPES.values():
            raise ValueError(f"unsupported dtype {dtype}: use auto, {', '.join(DTYPES)}")
        return dtype
    text = str(dtype).strip().lower()
    if text == "auto":
        if device is None or device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if text not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}: use auto, {', '.join(DTYPES)}")
    return DTYPES[text]


_CPU = torch.device("cpu")


def _penalized(logits: torch.Tensor, row: _Row) -> torch.Tensor:
    """The row's logits with its repetition penalty applied to every token of its prompt and output."""
    penalty = row.request.sampling.repetition_penalty
    if penalty == 1.0:
        return logits
    from transformers import RepetitionPenaltyLogitsProcessor

    seen = torch.tensor([row.request.prompt_ids + row.token_ids], device=logits.device)
    return RepetitionPenaltyLogitsProcessor(penalty)(seen, logits[None].clone())[0]


def _draw(logits: torch.Tensor, rows: list[_Row], live: list[int]) -> torch.Tensor:
    """One token for each of the rows ``live`` (indices into ``rows`` and ``logits``), left on the device:
    rows with the same settings and no repetition penalty are transformed together, each drawing from its
    own generator."""
    groups: dict[tuple[float, int, float], list[int]] = {}
    alone: list[int] = []
    for i in live:
        sampling = rows[i].request.sampling
        if sampling.repetition_penalty != 1.0:
            alone.append(i)
        else:
            groups.setdefault((sampling.temperature, sampling.top_k, sampling.top_p), []).append(i)
    tokens = torch.empty(len(rows), dtype=torch.long, device=logits.device)
    for members in groups.values():
        sampling = rows[members[0]].request.sampling
        index = torch.tensor(members, device=logits.device)
        tokens[index] = _sample(logits[index], sampling, [rows[i].generator for i in members])
    for i in alone:
        row = rows[i]
        tokens[i] = _sample(_penalized(logits[i], row)[None], row.request.sampling, [row.generator])[0]
    return tokens[torch.tensor(live, device=logits.device)]


def _sample(logits: torch.Tensor, sampling: Sampling, generators: list[torch.Generator]) -> torch.Tensor:
    """One token per row of raw logits (rows sharing ``sampling``), on the device: greedy at temperature 0,
    else temperature, top-k, top-p, then a draw from each row's own generator. The draw is
    ``torch.multinomial``'s own for one sample (argmax of the probabilities over exponential noise from the
    generator: each token wins with its probability), done per row without waiting on the device."""
    if sampling.temperature == 0:
        return torch.argmax(logits, dim=-1)
    scores = logits / sampling.temperature
    if 0 < sampling.top_k < scores.shape[-1]:
        kth = torch.topk(scores, sampling.top_k, dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if sampling.top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
        sorted_probs = torch.softmax(sorted_scores, dim=-1)
        drop = sorted_probs.cumsum(-1) - sorted_probs >= sampling.top_p  # mass before it; keeps the top one
        scores = scores.scatter(-1, order, sorted_scores.masked_fill(drop, float("-inf")))
    probs = torch.softmax(scores, dim=-1)
    noise = torch.stack([torch.empty_like(probs[0]).exponential_(1, generator=g) for g in generators])
    return torch.argmax(probs / noise, dim=-1)


def _first_stop(text: str, stops: tuple[str, ...]) -> str | None:
    """The stop string that occurs earliest in ``text`` (ties: the first listed), or ``None``."""
    found = [
        (index, order, stop) for order, stop in enumerate(stops) if stop and (index := text.find(stop)) >= 0
    ]
    return min(found)[2] if found else None


def _generator(seed: int | None, device: torch.device) -> torch.Generator:
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()  # OS entropy; the global torch RNG is left alone
    else:
        generator.manual_seed(seed)
    return generator


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config):
        eos = getattr(source, "eos_token_id", None)
        if eos is not None:
            ids.update([eos] if isinstance(eos, int) else eos)
            break
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)


def _fail(request: _Request, error: ClientError, cause: BaseException | None = None) -> None:
    if not request.future.done():
        error.__cause__ = cause
        request.future.set_exception(error)
