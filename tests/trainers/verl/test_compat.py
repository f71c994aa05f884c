"""toolgym's verl compat module, as verl loads it (``VERL_USE_EXTERNAL_MODULES``): with trl >= 1.0 installed
(``toolgym[trl]``), verl 0.9.1 would import a class trl no longer has while building the actor."""

import os
import subprocess
import sys

from toolgym.trainers.verl_adapter import COMPAT_MODULE, METRICS_MODULE, verl_modules_env

PROBE = (
    "import verl\nfrom verl.models.transformers import monkey_patch\nprint(monkey_patch.is_trl_available())\n"
)


def _probe(env):
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_verl_would_import_trls_removed_value_head_class_without_the_compat_module():
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_MODULES"}
    assert (
        _probe(env) == "True"
    )  # trl is importable, so verl 0.9.1 goes for AutoModelForCausalLMWithValueHead
    assert _probe({**env, **verl_modules_env()}) == "False"  # the class is gone in trl 1.16: skip that path


def test_modules_env_keeps_what_the_user_set_and_names_each_module_once(monkeypatch):
    monkeypatch.setenv("VERL_USE_EXTERNAL_MODULES", f"mine.plugin,{COMPAT_MODULE}")
    names = f"mine.plugin,{COMPAT_MODULE},{METRICS_MODULE},x.y"
    assert verl_modules_env("x.y") == {"VERL_USE_EXTERNAL_MODULES": names}
