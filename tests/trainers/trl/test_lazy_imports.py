"""Importing the TRL and OpenRLHF adapter packages (and their data, config and launch modules) imports
neither trainer, nor torch, vLLM or datasets: a user without them can still use everything else."""

import subprocess
import sys


def test_the_adapter_packages_import_no_trainer():
    code = (
        "import sys, toolgym.cli\n"
        "import toolgym.trainers.trl_adapter as t, toolgym.trainers.openrlhf_adapter as o\n"
        "import toolgym.trainers.trl_adapter.data, toolgym.trainers.trl_adapter.config\n"
        "import toolgym.trainers.trl_adapter.launch, toolgym.trainers.trl_adapter.lockstep\n"
        "import toolgym.trainers.openrlhf_adapter.export\n"
        "t.make_rollout_func; o.agent_func_path(); toolgym.cli._build_parser()\n"
        "heavy = ('trl', 'openrlhf', 'torch', 'vllm', 'datasets', 'transformers')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
