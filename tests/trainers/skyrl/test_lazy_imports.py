"""Importing toolgym and the SkyRL-Gym and verifiers adapter packages (and the SkyRL data module) imports
neither skyrl_gym nor verifiers: a user without them can still use everything else."""

import subprocess
import sys


def test_the_skyrl_and_verifiers_adapter_packages_import_neither_package():
    code = (
        "import sys, toolgym, toolgym.cli\n"
        "import toolgym.trainers.skyrl_adapter as s, toolgym.trainers.verifiers_adapter as v\n"
        "import toolgym.trainers.skyrl_adapter.data\n"
        "s.skyrl_rows, s.export_skyrl, v.load_environment, v.TASKSET_ID\n"
        "print(sorted(m for m in ('skyrl_gym', 'verifiers', 'omegaconf') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    # and asking for an adapter class imports its package then, not before
    code = (
        "import sys, toolgym.trainers.skyrl_adapter as s; s.ToolgymTextEnv; print('skyrl_gym' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"
