"""Fixes verl 0.9.1 needs next to the packages toolgym installs, on every platform: verl imports this module
in every process of a ``toolgym train`` run (``VERL_USE_EXTERNAL_MODULES``, set by the launcher for the verl
process and, through Ray's runtime env, for every worker on every node).

- ``verl/models/transformers/monkey_patch.py:352`` imports trl's ``AutoModelForCausalLMWithValueHead``
  whenever trl is importable; trl >= 1.0 (``toolgym[trl]`` installs 1.16) removed it, so building the actor
  fails with an ImportError. Only value models use it: the guard reports trl as available only when the class
  exists.

Each patch names the line it works around and applies to verl ``VERL_VERSION`` only (another release may
have moved or fixed the line). The import hooks here (``after_import``/``around_import``) patch a module at
its first import, in whichever process imports it; the CPU platform (``cpu/platform.py``) uses them too.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator

import verl

#: the verl release the patches here and in ``cpu/platform.py`` were written against
VERL_VERSION = "0.9.1"


def apply_patches() -> None:
    if verl.__version__ != VERL_VERSION:
        return
    after_import("verl.models.transformers.monkey_patch", _trl_value_head_guard)


def _trl_value_head_guard(module: types.ModuleType) -> None:
    def is_trl_available() -> bool:
        for where in ("trl.experimental.ppo", "trl"):
            try:
                if hasattr(importlib.import_module(where), "AutoModelForCausalLMWithValueHead"):
                    return True
            except ImportError:
                continue
        return False

    module.is_trl_available = is_trl_available


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

        def exec_around(module: types.ModuleType) -> None:
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
    def around(module: types.ModuleType) -> Iterator[None]:
        yield
        patch(module)

    sys.meta_path.insert(0, _AroundImport(name, around))


apply_patches()
