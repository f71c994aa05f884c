"""Importing toolgym, its verl adapter package, export and client, and building the CLI never imports verl
(or Ray, Hydra, vLLM, torch): a user without them installed can still use everything else."""

import subprocess
import sys


def test_toolgym_and_the_adapter_package_do_not_import_verl():
    code = (
        "import sys, toolgym, toolgym.cli, toolgym.trainers.verl_adapter as v\n"
        "import toolgym.trainers.verl_adapter.export, toolgym.trainers.verl_adapter.client\n"
        "toolgym.cli._build_parser(); v.agent_loop_config_path()\n"
        "print(sorted(m for m in ('verl', 'ray', 'hydra', 'omegaconf', 'vllm', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
