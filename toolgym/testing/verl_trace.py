"""Where a verl run's work happened, for tests of several ranks and nodes: loaded into every process of the
run through ``VERL_USE_EXTERNAL_MODULES`` (``trace_env(dir)``), it writes one JSON line per event into
``dir``, one file per process.

Each event has its ``start`` and end (``time``) in seconds since the epoch: a run's timeline (when episodes
ran, when the actor trained; ``benchmarks/bench_verl_async.py`` draws it).

- ``train``: each actor update on each rank (``TrainingWorker.train_mini_batch``, called once per rank with
  that rank's share of the batch): the rank, the data-parallel size, a fingerprint of every row it trained on,
  and, after the update, two checksums of the policy: of the whole model (gathered from every shard: what the
  rank computes its next forward with) and of the rank's own shard.
- ``episode``: each episode of toolgym's agent loop: the process, the Ray node and the agent-loop worker it
  ran in (its tools run there too), the fingerprint of its tokens (prompt then response, as the ranks
  fingerprint the rows they train on), whether it passed, and the oldest and newest versions of the weights
  that sampled it.

With ``tokens=True`` (``TOOLGYM_VERL_TRACE_TOKENS=1``) the trace also keeps what a token check needs
(``toolgym.testing.verl_tokens`` reads it):

- ``attempt``: each generation verl's vLLM server returned to toolgym's client, as it returned it: the
  request id (one per episode), the prompt sent, the tokens and logprobs sampled, the weights version label
  (``global_steps``) and the stop reason (``aborted`` when a weight sync cut it short);
- ``train`` events gain ``samples``: each row verl trains on, its tokens (prompt then response), response
  mask and ``old_log_probs`` (``rollout_log_probs`` too where verl keeps them); and ``parameters``, each
  parameter's sum after the update;
- ``sync_sent``/``sync_received``: each weight sync through toolgym's gloo checkpoint engine, its version
  label and each weight's sum, on the trainer's side and on the rollout's; the trainer's side also
  saves the weights it sent (``weights-<label>.pt``), so a fresh forward pass can recompute what each
  version's sampled tokens' logprobs must be.

Nothing changes unless ``TOOLGYM_VERL_TRACE`` names a directory; the wrappers add a gather of the weights per
update (test sizes only) and never alter what they wrap.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import socket
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

TRACE_ENV = "TOOLGYM_VERL_TRACE"
TOKENS_ENV = "TOOLGYM_VERL_TRACE_TOKENS"
MODULE = __name__


def trace_env(directory: str | os.PathLike, *, tokens: bool = False) -> dict[str, str]:
    """The environment that makes a ``toolgym train`` run (and every Ray process in it) write its trace into
    ``directory``: pass it to the launcher's process. ``tokens``: keep the tokens, logprobs and synced weights
    too (the module docstring)."""
    from toolgym.trainers.verl_adapter import verl_modules_env

    env = {TRACE_ENV: str(directory), **verl_modules_env(MODULE)}
    return {**env, TOKENS_ENV: "1"} if tokens else env


def _tokens_on() -> bool:
    return os.environ.get(TOKENS_ENV) == "1"


def read_trace(directory: str | os.PathLike) -> list[dict[str, Any]]:
    """Every event of a run, in time order."""
    events = [
        json.loads(line)
        for path in sorted(Path(directory).glob("*.jsonl"))
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    return sorted(events, key=lambda event: event["time"])


_calls = itertools.count()


def _write(kind: str, **fields: Any) -> None:
    directory = Path(os.environ[TRACE_ENV])
    directory.mkdir(parents=True, exist_ok=True)
    event = {"kind": kind, "time": time.time(), "pid": os.getpid(), "host": socket.gethostname(), **fields}
    with open(directory / f"{kind}-{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(event) + "\n")


def _ray_node() -> str | None:
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None
    except Exception:  # outside Ray
        return None


def fingerprint(token_ids: Any) -> str:
    """A short hash of a sequence's token ids (prompt then response), the same for a list of ints and for a
    row of a tensor: samples that generated the same tokens for the same prompt share it."""
    return hashlib.sha1(np.asarray(token_ids, dtype=np.int64).tobytes()).hexdigest()[:16]


def _row_fingerprints(data: Any) -> list[str]:
    """Each row's fingerprint (a jagged ``input_ids`` in verl's TensorDict: the row's tokens, no padding)."""
    ids = data["input_ids"]
    rows = ids.unbind() if getattr(ids, "is_nested", False) else list(ids)
    return [fingerprint(row.cpu().numpy()) for row in rows]


def _policy_checksums(engine: Any) -> tuple[float, float, dict[str, float]]:
    """(whole model, this rank's shard, each parameter's): float64 sums over the parameters; gathering a
    sharded parameter is a collective, which every rank runs here in the same order."""
    whole = shard = 0.0
    each: dict[str, float] = {}
    for name, param in sorted(engine.module.named_parameters()):
        tensor = param.data
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        each[name] = float(full.double().sum())
        whole += each[name]
        shard += float(local.double().sum())
    return whole, shard, each


#: the per-row fields a token check reads from the batch verl trains on, where present
SAMPLE_FIELDS = ("input_ids", "response_mask", "old_log_probs", "rollout_log_probs")


def _rows_of(tensor: Any) -> list[list[Any]]:
    rows = tensor.unbind() if getattr(tensor, "is_nested", False) else list(tensor)
    return [row.detach().cpu().tolist() for row in rows]


def _row_samples(data: Any) -> list[dict[str, Any]]:
    """Each row of the batch as verl trains on it: its tokens (no padding), and its response mask and
    ``old_log_probs`` padded to the batch's longest response (a row's response is its last tokens)."""
    present = {key: _rows_of(data[key]) for key in SAMPLE_FIELDS if key in data.keys()}  # noqa: SIM118 (TensorDict refuses `in`)
    count = len(next(iter(present.values()))) if present else 0
    return [{key: rows[i] for key, rows in present.items()} for i in range(count)]


def _trace_training(module: types.ModuleType) -> None:
    original = module.TrainingWorker.train_mini_batch

    @functools.wraps(original)
    def train_mini_batch(self, data, *args, **kwargs):
        if type(data).__name__ == "DataProtoFuture":  # what verl's own wrapper would materialize
            data = data.get()
        rows = _row_fingerprints(data)
        start = time.time()
        output = original(self, data, *args, **kwargs)
        whole, shard, each = _policy_checksums(self.engine)
        samples = {"samples": _row_samples(data), "parameters": each} if _tokens_on() else {}
        _write(
            "train",
            **samples,
            call=next(_calls),
            model=type(self.engine.module).__name__,  # the actor's, or PPO's critic's
            rank=self.engine.get_data_parallel_rank(),
            dp_size=self.engine.get_data_parallel_size(),
            rows=rows,
            policy=whole,
            shard=shard,
            node=_ray_node(),
            start=start,
        )
        return output

    module.TrainingWorker.train_mini_batch = train_mini_batch


def _trace_episodes(module: types.ModuleType) -> None:
    original = module.ToolgymAgentLoop.run

    @functools.wraps(original)
    async def run(self, *args, **kwargs):
        start = time.time()
        output = await original(self, *args, **kwargs)
        extra = output.extra_fields or {}
        info = extra.get("reward_extra_info", {})
        tokens = fingerprint([*output.prompt_ids, *output.response_ids])
        _write(
            "episode",
            node=_ray_node(),
            tokens=tokens,
            passed=info.get("passed"),
            turns=info.get("turns"),
            start=start,
            versions=[extra.get("min_global_steps"), extra.get("max_global_steps")],
        )
        return output

    module.ToolgymAgentLoop.run = run


def _trace_attempts(module: types.ModuleType) -> None:
    """Every generation verl's server hands toolgym's client, before the client assembles anything."""
    original = module.one_attempt

    @functools.wraps(original)
    def one_attempt(server):
        attempt = original(server)

        async def traced(request_id, **kwargs):
            start = time.time()
            out = await attempt(request_id, **kwargs)
            fields = getattr(out, "extra_fields", None) or {}
            _write(
                "attempt",
                request=str(request_id),
                prompt_ids=[int(t) for t in kwargs.get("prompt_ids", [])],
                token_ids=[int(t) for t in out.token_ids],
                log_probs=None if out.log_probs is None else [float(x) for x in out.log_probs],
                version=fields.get("global_steps"),
                stop_reason=out.stop_reason,
                start=start,
            )
            return out

        return traced

    setattr(module, "one_attempt", one_attempt)  # noqa: B010 (mypy: a module of unknown attributes)


def _checksums(weights: dict[str, Any]) -> dict[str, float]:
    return {name: float(tensor.double().sum()) for name, tensor in weights.items()}


def _trace_syncs(module: types.ModuleType) -> None:
    """Each weight sync through the gloo checkpoint engine: what the trainer sent (saved, and summed) and
    what the rollout received (summed), under the sync's version label."""
    import torch

    engine = module.GlooCheckpointEngine
    send, receive = engine.send_weights, engine.receive_weights

    @functools.wraps(send)
    async def send_weights(self, weights, global_steps=None):
        if self.rank != 0:
            return await send(self, weights, global_steps=global_steps)
        sent: dict[str, Any] = {}

        def keeping():
            for name, tensor in weights:
                sent[name] = tensor.detach().to("cpu", copy=True)
                yield name, tensor

        await send(self, keeping(), global_steps=global_steps)
        directory = Path(os.environ[TRACE_ENV])
        directory.mkdir(parents=True, exist_ok=True)
        torch.save(sent, directory / f"weights-{global_steps}.pt")
        _write("sync_sent", version=global_steps, parameters=_checksums(sent))
        return None

    @functools.wraps(receive)
    async def receive_weights(self, global_steps=None):
        received: dict[str, Any] = {}
        async for name, tensor in receive(self, global_steps=global_steps):
            received[name] = tensor.detach().to("cpu", copy=True)
            yield name, tensor
        _write("sync_received", version=global_steps, parameters=_checksums(received))

    engine.send_weights, engine.receive_weights = send_weights, receive_weights


if os.environ.get(TRACE_ENV):
    from toolgym.trainers.verl_adapter.compat import after_import

    after_import("verl.workers.engine_workers", _trace_training)
    after_import("toolgym.trainers.verl_adapter.agent_loop", _trace_episodes)
    if _tokens_on():
        after_import("toolgym.trainers.verl_adapter.client", _trace_attempts)
        after_import("toolgym.trainers.verl_adapter.cpu.checkpoint_engine", _trace_syncs)
