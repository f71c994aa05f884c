"""toolgym's verl compat module, as verl loads it (``VERL_USE_EXTERNAL_MODULES``): with trl >= 1.0 installed
(``toolgym[trl]``), verl 0.9.1 would import a class trl no longer has while building the actor."""

import os
import subprocess
import sys

import pytest

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


def test_the_critic_loads_with_the_attention_its_config_names():
    """verl 0.9.1's ``load_valuehead_model`` asks for flash_attention_2 whatever the critic's config says
    (verl issue #5210); with compat loaded it gives the critic the attention its config names."""
    import importlib.util

    import torch
    import transformers
    from transformers import AutoConfig
    from verl.utils import model as verl_model

    import toolgym.trainers.verl_adapter.compat  # noqa: F401  (patches verl.utils.model, as in verl's processes)
    from toolgym.testing import tiny_model_path

    path = str(tiny_model_path())
    config = AutoConfig.from_pretrained(path, attn_implementation="sdpa")
    config.num_labels = 1
    auto_classes = (transformers.AutoModelForTokenClassification, transformers.AutoModelForCausalLM)
    before = [cls.__dict__.get("from_pretrained") for cls in auto_classes]

    critic = verl_model.load_valuehead_model(path, torch.float32, config, False)
    assert type(critic).__name__ == "Qwen2ForTokenClassification"
    assert critic.config._attn_implementation == "sdpa"
    assert critic(input_ids=torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, 1)  # a value per token
    assert [cls.__dict__.get("from_pretrained") for cls in auto_classes] == before  # transformers restored
    if importlib.util.find_spec("flash_attn") is None:
        # unpatched, flash_attention_2 fails and verl falls back to trl's value head, which fails too
        with pytest.raises(ImportError):
            verl_model.load_valuehead_model.__wrapped__(path, torch.float32, config, False)
