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
MODULE = __name__


def trace_env(directory: str | os.PathLike) -> dict[str, str]:
    """The environment that makes a ``toolgym train`` run (and every Ray process in it) write its trace into
    ``directory``: pass it to the launcher's process."""
    from toolgym.trainers.verl_adapter import verl_modules_env

    return {TRACE_ENV: str(directory), **verl_modules_env(MODULE)}


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


def _policy_checksums(engine: Any) -> tuple[float, float]:
    """(whole model, this rank's shard): float64 sums over every parameter; gathering a sharded parameter
    is a collective, which every rank runs here in the same order."""
    whole = shard = 0.0
    for _, param in sorted(engine.module.named_parameters()):
        tensor = param.data
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        whole += float(full.double().sum())
        shard += float(local.double().sum())
    return whole, shard


def _trace_training(module: types.ModuleType) -> None:
    original = module.TrainingWorker.train_mini_batch

    @functools.wraps(original)
    def train_mini_batch(self, data, *args, **kwargs):
        if type(data).__name__ == "DataProtoFuture":  # what verl's own wrapper would materialize
            data = data.get()
        rows = _row_fingerprints(data)
        start = time.time()
        output = original(self, data, *args, **kwargs)
        whole, shard = _policy_checksums(self.engine)
        _write(
            "train",
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


if os.environ.get(TRACE_ENV):
    from toolgym.trainers.verl_adapter.compat import after_import

    after_import("verl.workers.engine_workers", _trace_training)
    after_import("toolgym.trainers.verl_adapter.agent_loop", _trace_episodes)
