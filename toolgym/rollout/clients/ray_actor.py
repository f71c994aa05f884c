"""In-process vLLM engines hosted by Ray actors, spread over a Ray cluster (``toolgym rollout --ray N``).

Each actor owns one :class:`~toolgym.rollout.clients.vllm_inproc.VLLMClient` (one engine, one GPU — or
``tensor_parallel_size`` GPUs — when the cluster has GPUs); :class:`RayActorClient` is the LLM client for one
actor, and :func:`start_vllm_actors` starts ``n`` of them behind a
:class:`~toolgym.rollout.clients.multi.MultiClient`, which keeps each episode on one engine. The episode
runner, the env instances and the tools stay in the driver process: only token ids cross to the actors.

Where the actors run: the Ray cluster at ``RAY_ADDRESS`` when it is set (toolgym and the model must be
available on its nodes), else a local Ray instance started here and stopped when the client is closed. When
this process is already connected to Ray (``ray.init`` was called), that connection is used and left open.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

from toolgym.rollout.clients.base import Generation, Sampling
from toolgym.rollout.clients.errors import ClientError
from toolgym.rollout.clients.multi import MultiClient
from toolgym.rollout.clients.vllm_inproc import VLLMConfig

__all__ = ["RayActorClient", "VLLMEngineActor", "start_vllm_actors"]


class VLLMEngineActor:
    """The body of one Ray actor: a vLLM engine built inside the actor's event loop on :meth:`start` (vLLM
    binds its output handler to the loop that first uses it, and an async actor's methods run on its loop)."""

    def __init__(self, config: VLLMConfig):
        self.config = config
        self.client: Any = None

    async def start(self) -> dict[str, Any]:
        from toolgym.rollout.clients.vllm_inproc import VLLMClient

        if self.client is None:
            self.client = VLLMClient(self.config)
        return {"pid": os.getpid(), "model": self.config.model}

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        if self.client is None:
            raise ClientError("the engine actor was not started (call start() first)")
        return await self.client.generate(prompt_ids, sampling, request_id)

    async def shutdown(self) -> None:
        if self.client is not None:
            self.client.shutdown()
            self.client = None


class RayActorClient:
    """The LLM client for one :class:`VLLMEngineActor` (a Ray actor handle). Ray failures — the actor died,
    its node was lost — become :class:`ClientError`, which fails the episode, not the batch."""

    def __init__(self, actor: Any, name: str = "ray engine"):
        self.actor = actor
        self.name = name

    async def generate(self, prompt_ids: list[int], sampling: Sampling, request_id: str) -> Generation:
        import ray

        try:
            return await self.actor.generate.remote(prompt_ids, sampling, request_id)
        except ray.exceptions.RayTaskError as exc:
            cause = exc.as_instanceof_cause()
            if isinstance(cause, ClientError):
                raise ClientError(f"{self.name}: {cause}") from exc
            raise ClientError(f"{self.name} failed: {exc}") from exc
        except ray.exceptions.RayError as exc:  # actor died, node lost, object lost
            raise ClientError(f"{self.name} is unavailable: {exc}", retryable=True) from exc

    async def close(self) -> None:
        import ray

        with contextlib.suppress(ray.exceptions.RayError):  # already gone
            await self.actor.shutdown.remote()
        ray.kill(self.actor)


def start_vllm_actors(
    n: int,
    config: VLLMConfig,
    *,
    num_cpus: float = 1,
    num_gpus: float | None = None,
    startup_timeout: float = 900.0,
) -> MultiClient:
    """Start ``n`` engine actors and wait until every engine is up; a :class:`MultiClient` over them.

    ``num_gpus`` per actor defaults to ``config.tensor_parallel_size`` on a cluster with GPUs and 0 without;
    ``num_cpus`` is what Ray reserves for each actor (the engine's own threads are vLLM's business). Actors
    that cannot be placed (the cluster lacks the resources) fail after ``startup_timeout`` seconds.
    """
    if n < 1:
        raise ValueError(f"--ray needs at least 1 engine actor, got {n}")
    try:
        import ray
    except ImportError:
        raise ValueError("--ray needs Ray: pip install 'ray[serve]'") from None

    started_here = not ray.is_initialized()
    if started_here:
        if os.environ.get("RAY_ADDRESS"):
            ray.init()  # joins the cluster at RAY_ADDRESS
        else:
            ray.init(include_dashboard=False)
    try:
        if num_gpus is None:
            has_gpus = ray.cluster_resources().get("GPU", 0) > 0
            num_gpus = float(config.tensor_parallel_size) if has_gpus else 0.0
        actor_class = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus)(VLLMEngineActor)
        actors = [actor_class.remote(config) for _ in range(n)]
        try:
            ray.get([a.start.remote() for a in actors], timeout=startup_timeout)
        except ray.exceptions.GetTimeoutError:
            for a in actors:
                ray.kill(a)
            raise ClientError(
                f"{n} vLLM engine actors did not start within {startup_timeout:.0f}s; each needs "
                f"{num_cpus} CPU and {num_gpus} GPU: `ray status` shows what the cluster has free"
            ) from None
        except ray.exceptions.RayError as exc:
            for a in actors:
                ray.kill(a)
            raise ClientError(f"a vLLM engine actor failed to start: {exc}") from exc
    except BaseException:
        if started_here:
            ray.shutdown()
        raise
    clients = [RayActorClient(a, f"ray engine {i}") for i, a in enumerate(actors)]
    return MultiClient(clients, on_close=ray.shutdown if started_here else None)
