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

With ``force_partial_after_prompts=N`` (on top of ``tokens``) the run is made to cut a generation short with a
weight sync and resume it under the new weights, as verl's partial rollouts do when a sync lands while the
rollout runs ahead, and so that the cut episode is trained on. ``N`` is the number of prompts of the first
training step (``train_batch_size``): the episodes of the prompts after them (the rollout runs ahead) wait
before they start until the first sync after an update begins (``CheckpointEngineManager.update_weights``, in
the trainer); that sync waits until one of them is in flight in vLLM and the engine has taken ``FORCE_STEPS``
decode steps since, then goes on; its abort cuts the generation short, and toolgym's client resumes it under
the new weights. Which prompt an episode is of comes from its ``uid``, which verl's fully-async rollouter
numbers in the order it feeds the prompts (``uid_sample_<epoch>_<n>``, ``n`` from 1), the same in every
agent-loop worker: whatever order the episodes start in and however they are spread over workers, the first
step's episodes are never held (holding one of them would hold the update the others wait for). The engine
must decode slowly enough for the abort to land before the generation ends (``toolgym.testing.slow_decode``,
which counts its steps into the trace directory). ``held`` and ``released`` events say which episodes waited
and for how long, a ``sync_held`` event what the sync waited for, and a ``force_failed`` event why a run could
not be forced (an episode without such a ``uid``, a hold or a sync that gave up after ``HOLD_S``): a test's
watch (``toolgym.testing.verl.run_in_session``) ends the run when it sees one.

Nothing changes unless ``TOOLGYM_VERL_TRACE`` names a directory; the wrappers add a gather of the weights per
update (test sizes only) and never alter what they wrap (a forced partial rollout only delays a sync).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import re
import socket
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

TRACE_ENV = "TOOLGYM_VERL_TRACE"
TOKENS_ENV = "TOOLGYM_VERL_TRACE_TOKENS"
FORCE_PARTIAL_ENV = "TOOLGYM_VERL_TRACE_FORCE_PARTIAL_AFTER"
#: the file ``toolgym.testing.slow_decode`` writes its decode steps into (``decode_steps`` reads it)
COUNTER_ENV = "TOOLGYM_SLOW_DECODE_COUNTER"
MODULE = __name__
#: how long a forced sync waits for a generation in flight, and a held episode for that sync, before giving
#: up with a ``force_failed`` event (a backstop: a run whose update never comes stops making progress, and a
#: test's watch ends it sooner)
HOLD_S = 180.0
#: decode steps the engine takes after a generation is in flight before the forced sync goes on: the first
#: samples its first token (prefill), the second one more, so the cut generation has tokens of the old weights
FORCE_STEPS = 2


def trace_env(
    directory: str | os.PathLike, *, tokens: bool = False, force_partial_after_prompts: int | None = None
) -> dict[str, str]:
    """The environment that makes a ``toolgym train`` run (and every Ray process in it) write its trace into
    ``directory``: pass it to the launcher's process. ``tokens``: keep the tokens, logprobs and synced weights
    too; ``force_partial_after_prompts``: make the first sync after an update cut short a generation of the
    prompts after that many, the first training step's (with ``tokens``, in a fully-async run; the run's
    engine must decode slowly, ``toolgym.testing.slow_decode``).
    The module docstring says more."""
    from toolgym.trainers.verl_adapter import verl_modules_env

    env = {TRACE_ENV: str(directory), **verl_modules_env(MODULE)}
    if tokens:
        env[TOKENS_ENV] = "1"
    if force_partial_after_prompts is not None:
        env[FORCE_PARTIAL_ENV] = str(force_partial_after_prompts)
        env[COUNTER_ENV] = str(Path(directory) / "decode-steps")
    return env


def _tokens_on() -> bool:
    return os.environ.get(TOKENS_ENV) == "1"


def _forcing_partial() -> bool:
    return _tokens_on() and os.environ.get(FORCE_PARTIAL_ENV, "").isdigit()


def _in_flight_dir() -> Path:
    return Path(os.environ[TRACE_ENV]) / "in-flight"


def _sync_begun() -> Path:
    """Written by the first sync after an update when it begins (a forced partial rollout)."""
    return Path(os.environ[TRACE_ENV]) / "sync-begun"


#: the uid verl's fully-async rollouter gives a prompt's episodes: its epoch, then ``n``, counting the prompts
#: it feeds from 1 (``FullyAsyncRollouter._feed_samples``)
_SAMPLE_UID = re.compile(r"sample_(\d+)_(\d+)$")


class ForceFailed(RuntimeError):
    """A forced partial rollout cannot happen in this run (the reason is also a ``force_failed`` event)."""


def _fail_force(reason: str) -> None:
    _write("force_failed", reason=reason)


def runs_ahead(uid: str, first_step_prompts: int) -> bool:
    """Whether an episode with verl's ``uid`` is of a prompt after the first training step's
    ``first_step_prompts``; ``ForceFailed`` for a uid that is not the fully-async rollouter's."""
    match = _SAMPLE_UID.search(uid)
    if match is None:
        raise ForceFailed(
            f"episode uid {uid!r} is not verl's fully-async rollouter's (uid_sample_<epoch>_<n>): a partial "
            "rollout can only be forced in a fully_async run"
        )
    return int(match[2]) > first_step_prompts


async def _hold_run_ahead(uid: str) -> None:
    """An episode of a prompt after the first step's waits until the first sync after an update begins."""
    import asyncio

    try:
        held = runs_ahead(uid, int(os.environ[FORCE_PARTIAL_ENV]))
    except ForceFailed as error:
        _fail_force(str(error))
        return
    if not held or _sync_begun().exists():  # a prompt fed after the sync began (step 2's) goes at once
        return
    start = time.time()
    _write("held", uid=uid)
    while not _sync_begun().exists():
        if time.time() - start > HOLD_S:
            _fail_force(f"episode {uid} was held {HOLD_S:.0f} s and no sync after an update began")
            return
        await asyncio.sleep(0.02)
    _write("released", uid=uid, waited=time.time() - start)


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
_markers = itertools.count()


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
        if _forcing_partial():
            await _hold_run_ahead(str(kwargs.get("uid") or ""))
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
            marker = None
            if _forcing_partial():
                marker = _in_flight_dir() / f"{os.getpid()}-{next(_markers)}"
                marker.parent.mkdir(parents=True, exist_ok=True)
                marker.touch()
            start = time.time()
            try:
                out = await attempt(request_id, **kwargs)
            finally:
                if marker is not None:
                    marker.unlink(missing_ok=True)
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


def decode_steps(path: str | os.PathLike | None = None) -> int:
    """The engine's decode steps so far, as ``toolgym.testing.slow_decode`` counted them (0 before the
    first, or where no counter is set)."""
    path = path or os.environ.get(COUNTER_ENV)
    try:
        return int(Path(path).read_text() or 0) if path else 0
    except (OSError, ValueError):
        return 0


def _hold_syncs(module: types.ModuleType) -> None:
    """The first weight sync after an update lets the held episodes go, and waits until one of them is in
    flight and has sampled under the old weights (``FORCE_STEPS`` decode steps), so that its abort cuts it
    short."""
    import asyncio

    from verl.utils.ray_utils import auto_await

    manager = module.CheckpointEngineManager
    inner = getattr(manager.update_weights, "__wrapped__", manager.update_weights)
    held: list[int] = []

    @auto_await
    @functools.wraps(inner)
    async def update_weights(self, global_steps=None):
        if not held and global_steps is not None and int(global_steps) >= 1:
            held.append(int(global_steps))
            start, flight = time.time(), _in_flight_dir()
            _sync_begun().parent.mkdir(parents=True, exist_ok=True)
            _sync_begun().touch()
            while time.time() - start < HOLD_S and not any(flight.glob("*")):
                await asyncio.sleep(0.02)
            seen = any(flight.glob("*"))
            steps = decode_steps()
            while seen and time.time() - start < HOLD_S and decode_steps() < steps + FORCE_STEPS:
                await asyncio.sleep(0.02)
            in_flight = sorted(path.name for path in flight.glob("*"))
            if not seen:
                _fail_force(
                    f"the sync for version {global_steps} waited {HOLD_S:.0f} s and no episode of a prompt "
                    "that ran ahead was in flight (did the rollout run ahead? staleness_threshold)"
                )
            elif decode_steps() < steps + FORCE_STEPS:
                _fail_force(
                    f"the sync for version {global_steps} waited {HOLD_S:.0f} s for {FORCE_STEPS} decode "
                    "steps of the generation in flight (is toolgym.testing.slow_decode the engine's logits "
                    "processor?)"
                )
            _write("sync_held", version=global_steps, in_flight=in_flight, waited=time.time() - start)
        return await inner(self, global_steps=global_steps)

    manager.update_weights = update_weights


if os.environ.get(TRACE_ENV):
    from toolgym.trainers.verl_adapter.compat import after_import

    after_import("verl.workers.engine_workers", _trace_training)
    after_import("toolgym.trainers.verl_adapter.agent_loop", _trace_episodes)
    if _tokens_on():
        after_import("toolgym.trainers.verl_adapter.client", _trace_attempts)
        after_import("toolgym.trainers.verl_adapter.cpu.checkpoint_engine", _trace_syncs)
    if _forcing_partial():
        after_import("verl.checkpoint_engine.base", _hold_syncs)
