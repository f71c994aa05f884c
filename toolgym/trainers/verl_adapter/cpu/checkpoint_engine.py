"""``gloo``: a verl checkpoint engine that runs on a CPU, for the asynchronous modes (``mode: one_step_off``,
``mode: fully_async``), whose rollout has GPUs (here: declared ones) of its own.

There, verl 0.9.1 moves the trainer's weights to the rollout with a *checkpoint engine*
(``verl/checkpoint_engine/base.py``, ``CheckpointEngineManager.update_weights``): at each sync every actor
worker and every rollout worker ``prepare()``; the engine class builds their topology (``build_topology``);
all ``init_process_group(...)``; the actor workers ``send_weights`` the model (FSDP gathers each full tensor
over the actor's ranks) while each rollout worker ``receive_weights`` and hands them to its vLLM server (on
a CPU through shared memory, as the sync mode's weight sync does); then all ``finalize()``. verl's engines
are CUDA's (``nccl``, over cupy), Ascend's (``hccl``) and RDMA's (``nixl``, ``mooncake``, ``kimi``): none
runs without an accelerator, and ``naive`` only serves a rollout in the trainer's own processes. verl's
plug-in point for another, ``rollout.checkpoint_engine.custom_backend_module`` (imported in every process
before an engine is built), names this module, which registers ``gloo``.

The group is actor rank 0 (it holds each full weight in turn) and every rollout worker: a gloo process group
of their own over a TCP store that actor rank 0 serves, built at each sync and dropped after it (each of
these processes already has a default process group: the actor's FSDP ranks, a rollout worker's replica).
The weights travel in buckets of at most ``update_weights_bucket_megabytes``: a header (two sizes), the
bucket's ``TensorMeta`` list (pickled) and its bytes, each one gloo broadcast from rank 0; verl's
``split_weight_chunks``/``merge_weight_chunks`` cut a weight larger than a bucket and join it again. The
other actor ranks only walk the weights generator, since gathering each weight takes all of them.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from datetime import timedelta
from typing import Any

import ray
import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    TensorMeta,
    merge_weight_chunks,
    split_weight_chunks,
)
from verl.utils.distributed import create_tcp_store

#: the backend name (``actor_rollout_ref.rollout.checkpoint_engine.backend``)
BACKEND = "gloo"
#: how long joining the group or one broadcast may take (a sync of a large model over TCP takes a while)
TIMEOUT = timedelta(minutes=30)
#: bucket offsets are multiples of this, so every weight's bytes view as its dtype where they lie
ALIGN = 64


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


class GlooCheckpointEngine(CheckpointEngine):
    """Actor rank 0 broadcasts the weights to every rollout worker over gloo (see the module docstring).

    Args:
        bucket_size: bytes per bucket (verl passes ``update_weights_bucket_megabytes``).
        is_master: actor rank 0, which serves the group's TCP store and sends (verl sets it there only).
    """

    def __init__(self, bucket_size: int, is_master: bool = False, **_: Any) -> None:
        self.bucket_size = int(bucket_size)
        self.is_master = is_master
        #: this process's rank in the sync's group; -1: an actor rank that sends nothing
        self.rank = -1
        self._listener: socket.socket | None = None
        self._store: Any = None
        self._group: Any = None

    def prepare(self) -> dict[str, Any] | None:
        """Actor rank 0: reserve the TCP store's port (a listening socket the store takes over)."""
        if not self.is_master:
            return None
        host = ray.util.get_node_ip_address().strip("[]")
        listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, 0))
        listener.listen()
        self._listener = listener
        return {"host": host, "port": listener.getsockname()[1]}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict[str, Any] | None]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """Rank 0 is actor rank 0 (``metadata[0]``, its store's address); the rollout workers follow."""
        master = metadata[0]
        if master is None:
            raise RuntimeError("actor rank 0 must be the gloo checkpoint engine's master (is_master=True)")
        world_size = 1 + rollout_world_size
        actor: dict[str, list[Any]] = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world_size] * actor_wg_world_size,
            "master": [master] * actor_wg_world_size,
        }
        rollout: dict[str, list[Any]] = {
            "rank": list(range(1, world_size)),
            "world_size": [world_size] * rollout_world_size,
            "master": [master] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(self, rank: int, world_size: int, master: dict[str, Any]) -> None:
        self.rank = rank
        if rank < 0:
            return
        if rank == 0:
            listener, self._listener = self._listener, None
            store = create_tcp_store(
                master["host"],
                master["port"],
                listen_socket=listener,
                world_size=world_size,
                is_master=True,
                timeout=TIMEOUT,
                use_libuv=False,  # a store on a socket of ours (master_listen_fd) needs the classic server
            )
        else:
            store = dist.TCPStore(
                master["host"], master["port"], world_size=world_size, is_master=False, timeout=TIMEOUT
            )
        self._store = store
        self._group = dist.ProcessGroupGloo(store, rank, world_size, TIMEOUT)

    def finalize(self) -> None:
        self._group = None
        self._store = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    async def _broadcast(self, tensor: torch.Tensor) -> None:
        work = self._group.broadcast(tensor, 0)
        await asyncio.to_thread(work.wait)  # the worker's event loop keeps serving meanwhile

    @torch.no_grad()
    async def send_weights(
        self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None
    ):
        if self.rank < 0:  # an actor rank outside the group: its share of each weight's gather is all it does
            for _ in weights:
                pass
            return
        buffer = torch.empty(self.bucket_size, dtype=torch.uint8)  # untouched pages cost no memory
        metas: list[TensorMeta] = []
        size = 0
        async for meta, chunk in split_weight_chunks(weights, self.bucket_size):
            if metas and _aligned(size) + meta.chunk_size > self.bucket_size:
                await self._send_bucket(buffer, metas, size, last=False)
                metas, size = [], 0
            meta.offset = _aligned(size)
            buffer[meta.offset : meta.offset + meta.chunk_size].copy_(chunk)
            metas.append(meta)
            size = meta.offset + meta.chunk_size
        await self._send_bucket(buffer, metas, size, last=True)

    async def _send_bucket(
        self, buffer: torch.Tensor, metas: list[TensorMeta], size: int, last: bool
    ) -> None:
        listing = pickle.dumps({"metas": metas, "last": last})
        await self._broadcast(torch.tensor([len(listing), size], dtype=torch.int64))
        await self._broadcast(torch.frombuffer(bytearray(listing), dtype=torch.uint8))
        if size:
            await self._broadcast(buffer[:size])

    @torch.no_grad()
    async def receive_weights(
        self, global_steps: int | None = None
    ) -> AsyncGenerator[tuple[str, torch.Tensor]]:
        async for name, weight in merge_weight_chunks(self._receive_chunks(), self.bucket_size):
            yield name, weight

    async def _receive_chunks(self) -> AsyncIterator[tuple[TensorMeta, torch.Tensor]]:
        while True:
            header = torch.zeros(2, dtype=torch.int64)
            await self._broadcast(header)
            listing = torch.empty(int(header[0]), dtype=torch.uint8)
            await self._broadcast(listing)
            bucket = pickle.loads(listing.numpy().tobytes())  # from actor rank 0 of this run
            payload = torch.empty(
                int(header[1]), dtype=torch.uint8
            )  # a bucket's own: its views are handed on
            if payload.numel():
                await self._broadcast(payload)
            for meta in bucket["metas"]:
                yield meta, payload[meta.offset : meta.offset + meta.chunk_size]
            if bucket["last"]:
                return


CheckpointEngineRegistry.register(BACKEND)(GlooCheckpointEngine)

__all__ = ["BACKEND", "GlooCheckpointEngine"]
