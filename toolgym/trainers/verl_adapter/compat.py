"""Fixes verl 0.9.1 needs next to the packages toolgym installs, on every platform: verl imports this module
in every process of a ``toolgym train`` run (``VERL_USE_EXTERNAL_MODULES``, set by the launcher for the verl
process and, through Ray's runtime env, for every worker on every node).

- ``verl/models/transformers/monkey_patch.py:352`` imports trl's ``AutoModelForCausalLMWithValueHead``
  whenever trl is importable; trl >= 1.0 (``toolgym[trl]`` installs 1.16) removed it, so building the actor
  fails with an ImportError. Only value models use it: the guard reports trl as available only when the class
  exists.
- ``verl/utils/model.py:649`` and ``:674`` (``load_valuehead_model``) load PPO's critic with
  ``attn_implementation="flash_attention_2"`` whatever ``critic.model.override_config.attn_implementation``
  says (verl issue #5210, open; PR #6495 closed unmerged), so PPO fails without flash-attn: on a CPU, on GPUs
  older than Ampere, or wherever flash-attn is not built. The critic gets the attention its own config names
  (``toolgym train`` sets the actor's there), as the actor does.

Each patch names the line it works around and applies to verl ``VERL_VERSION`` only (another release may
have moved or fixed the line). The import hooks here (``after_import``/``around_import``) patch a module at
its first import, in whichever process imports it; the CPU platform (``cpu/platform.py``) uses them too.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import verl

#: the verl release the patches here and in ``cpu/platform.py`` were written against
VERL_VERSION = "0.9.1"


def apply_patches() -> None:
    if verl.__version__ != VERL_VERSION:
        return
    after_import("verl.models.transformers.monkey_patch", _trl_value_head_guard)
    after_import("verl.utils.model", _critic_attention_from_its_config)


def _trl_value_head_guard(module: Any) -> None:
    def is_trl_available() -> bool:
        for where in ("trl.experimental.ppo", "trl"):
            try:
                if hasattr(importlib.import_module(where), "AutoModelForCausalLMWithValueHead"):
                    return True
            except ImportError:
                continue
        return False

    module.is_trl_available = is_trl_available


def _critic_attention_from_its_config(module: Any) -> None:
    original = module.load_valuehead_model

    @functools.wraps(original)
    def load_valuehead_model(local_path, torch_dtype, model_config, trust_remote_code):
        attention = getattr(model_config, "_attn_implementation", None)
        if attention in (None, "flash_attention_2"):
            return original(local_path, torch_dtype, model_config, trust_remote_code)
        with _from_pretrained_attention(attention):
            return original(local_path, torch_dtype, model_config, trust_remote_code)

    module.load_valuehead_model = load_valuehead_model


@contextlib.contextmanager
def _from_pretrained_attention(attention: str) -> Iterator[None]:
    """While ``load_valuehead_model`` runs: the auto classes it uses load with ``attention`` where it asks
    for flash_attention_2."""
    import transformers

    classes = [transformers.AutoModelForTokenClassification, transformers.AutoModelForCausalLM]
    saved = {cls: cls.__dict__.get("from_pretrained") for cls in classes}

    def with_attention(cls: Any) -> classmethod:
        load = cls.from_pretrained.__func__

        def from_pretrained(klass, *args, **kwargs):
            if kwargs.get("attn_implementation") == "flash_attention_2":
                kwargs["attn_implementation"] = attention
            return load(klass, *args, **kwargs)

        return classmethod(from_pretrained)

    for cls in classes:
        cls.from_pretrained = with_attention(cls)
    try:
        yield
    finally:
        for cls, method in saved.items():
            if method is None:
                del cls.from_pretrained
            else:
                cls.from_pretrained = method


# -- import hooks: patch a module at its first import, whichever process imports it -------------------------


class _AroundImport(importlib.abc.MetaPathFinder):
    """Runs a module's first import inside ``around(module)``, a context manager factory."""

    def __init__(self, name: str, around: Callable[[types.ModuleType], contextlib.AbstractContextManager]):
        self.name, self.around = name, around

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_around(module: Any) -> None:
            with self.around(module):
                exec_module(module)

        spec.loader.exec_module = exec_around  # type: ignore[method-assign]
        return spec


def around_import(name: str, around: Callable[[types.ModuleType], contextlib.AbstractContextManager]) -> None:
    if name in sys.modules:
        raise RuntimeError(
            f"{name} was imported before toolgym could patch it: load toolgym's verl modules through "
            "VERL_USE_EXTERNAL_MODULES (toolgym.trainers.verl_adapter.verl_modules_env())"
        )
    sys.meta_path.insert(0, _AroundImport(name, around))


def after_import(name: str, patch: Callable[[types.ModuleType], None]) -> None:
    """Patch a module now if it is loaded, else right after its first import."""
    if name in sys.modules:
        patch(sys.modules[name])
        return

    @contextlib.contextmanager
    def around(module: Any) -> Iterator[None]:
        yield
        patch(module)

    sys.meta_path.insert(0, _AroundImport(name, around))


apply_patches()
