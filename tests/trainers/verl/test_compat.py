"""toolgym's verl compat module (loaded in verl's processes through ``VERL_USE_EXTERNAL_MODULES``): how its
modules are named, and the critic it makes loadable. What verl sees at import with and without it is
``test_what_verl_sees.py``."""

import pytest

from toolgym.trainers.verl_adapter import COMPAT_MODULE, METRICS_MODULE, verl_modules_env


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
