"""The env registry: toolgym's catalogue on top of Gymnasium's.

``register_env`` registers an env factory with Gymnasium (so ``gym.make(id)`` works) and records what
``toolgym list``, the demo and the tests need to know about it: its tools, task source, a one-line
description, and optionally an *oracle* (a scripted correct solution for a task, used to prove the verifier's
reward-1.0 path).

What ``toolgym list`` prints comes from *catalogue tables* (``CATALOGUE``, ``TOOL_CATALOGUE``), plain literals
that ``python -m toolgym.envs.catalogue`` writes from those declarations, so listing imports no env module:
toolgym's own table is ``toolgym/envs/_catalogue.py``, read by ``import toolgym``.

Third-party packages extend toolgym without touching it. A plugin lists its generated table (a module of
literals) under the ``toolgym.catalogue`` entry-point group: ``import toolgym`` reads it, registers its envs
with Gymnasium by name, and imports the plugin's own modules only when one of its envs is made (or a tool of
it is made by name, or ``toolgym.ENVS`` is read). The older form, a module (or a zero-argument function)
under the ``toolgym.envs`` or ``toolgym.tools`` groups, is still imported by ``import toolgym``: what it
registers cannot be known otherwise. A plugin that fails to load is reported with a warning and in
``PLUGIN_ERRORS`` (``toolgym doctor`` shows it), never silently skipped.
"""

from __future__ import annotations

import importlib
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import gymnasium as gym

if TYPE_CHECKING:
    from toolgym.core.task import Task
    from toolgym.core.types import ToolCall

#: A scripted correct solution: the tool calls to make, then the final answer text.
Oracle = Callable[["Task"], Sequence["ToolCall | str"]]


@dataclass(frozen=True)
class EnvSpec:
    id: str
    factory: Callable[..., gym.Env]
    tools: tuple[str, ...] = ()
    task_source: str = ""
    description: str = ""
    oracle: Oracle | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    #: a scripted wrong solution, for an env whose verifier judges the work rather than the answer (the
    #: default wrong solution, the oracle's tool calls with a wrong answer, is right there)
    wrong: Oracle | None = None


class _Catalogue(dict[str, EnvSpec]):
    """``ENVS``: every registered env's spec. The built-in envs are registered with Gymnasium lazily
    (``toolgym.envs``), so their specs are recorded when their modules are imported: every read of the
    catalogue imports the built-in modules first (once), so it always lists them all."""

    def __init__(self) -> None:
        super().__init__()
        self._complete = False
        self._lock = threading.RLock()
        #: the modules of envs registered by name (``register_lazily``), imported on the first read
        self.lazy_modules: set[str] = set()
        #: those of them that a plugin's catalogue named: module -> the plugin's key (a failure to import one
        #: is a warning and a ``PLUGIN_ERRORS`` line, as for any plugin, not an error of every read)
        self.plugin_modules: dict[str, str] = {}

    def _load(self) -> None:
        if self._complete:
            return
        with self._lock:
            if self._complete:
                return
            for module in sorted(self.lazy_modules):
                plugin = self.plugin_modules.get(module)
                if plugin is None:
                    importlib.import_module(module)
                    continue
                try:
                    importlib.import_module(module)
                except Exception as exc:
                    PLUGIN_ERRORS.setdefault(plugin, f"{type(exc).__name__}: {exc}")
                    warnings.warn(f"toolgym plugin {plugin} failed to load {module}: {exc}", stacklevel=3)
            self._complete = True

    def __getitem__(self, key: str) -> EnvSpec:
        self._load()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        self._load()
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._load()
        return super().__contains__(key)

    def __iter__(self) -> Iterator[str]:
        self._load()
        return super().__iter__()

    def __len__(self) -> int:
        self._load()
        return super().__len__()

    def keys(self) -> Any:
        self._load()
        return super().keys()

    def values(self) -> Any:
        self._load()
        return super().values()

    def items(self) -> Any:
        self._load()
        return super().items()

    def recorded(self) -> Mapping[str, EnvSpec]:
        """What is recorded so far, without importing anything (``register_env``'s own check)."""
        return dict(super().items())


ENVS: _Catalogue = _Catalogue()
#: what ``toolgym list`` shows without importing an env module: env id -> its catalogue row
#: (``entry_point``, ``tools``, ``task_source``, ``description``), read from the generated tables
CATALOGUE: dict[str, dict[str, Any]] = {}
#: tool name -> ``{"module": where it is registered, "summary": its ``Tool.summary()``}``
TOOL_CATALOGUE: dict[str, dict[str, str]] = {}
#: the entry-point group of plugins' catalogue tables (read by ``import toolgym``, imported modules: none)
CATALOGUE_GROUP = "toolgym.catalogue"
#: the older entry-point groups, whose modules ``import toolgym`` imports
PLUGIN_GROUPS = ("toolgym.tools", "toolgym.envs")
PLUGIN_ERRORS: dict[str, str] = {}
LOADED_PLUGINS: list[str] = []
_F = TypeVar("_F", bound=Callable[..., gym.Env])


def register_env(
    env_id: str,
    *,
    tools: Sequence[str] = (),
    task_source: str = "",
    description: str = "",
    oracle: Oracle | None = None,
    wrong: Oracle | None = None,
    **kwargs: Any,
) -> Callable[[_F], _F]:
    """Decorator for an env factory: ``@register_env("ns/Name-v0", tools=[...], description=...)``.

    ``kwargs`` become the factory's defaults in ``gym.make``. ``wrong``: a scripted wrong solution, where
    the oracle's tool calls with a wrong answer are not one (a verifier that judges the work). Registering
    an id twice with a different factory is an error (two packages claiming one id); re-registering the
    same factory is a no-op.
    """
    if "/" not in env_id:
        raise ValueError(f"env ids need a namespace, like 'toolgym/{env_id}' or 'mypkg/{env_id}'")

    def decorator(factory: _F) -> _F:
        existing = ENVS.recorded().get(env_id)
        if existing is not None and _qualname(existing.factory) != _qualname(factory):
            raise ValueError(f"env {env_id!r} is already registered by {_qualname(existing.factory)}")
        listed = CATALOGUE.get(env_id)  # a catalogue table's env, its module not imported yet
        entry_point = f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', '?')}"
        if existing is None and listed is not None and listed["entry_point"] != entry_point:
            raise ValueError(f"env {env_id!r} is already registered by {listed['entry_point']}")
        ENVS[env_id] = EnvSpec(
            env_id, factory, tuple(tools), task_source, description, oracle, dict(kwargs), wrong
        )
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=factory, kwargs=dict(kwargs))
        return factory

    return decorator


def register_catalogue(
    envs: Mapping[str, Mapping[str, Any]],
    tools: Mapping[str, Mapping[str, str]] | None = None,
    plugin: str = "",
) -> None:
    """Record a generated catalogue table (``python -m toolgym.envs.catalogue``) and register its envs with
    Gymnasium by name, importing nothing. An env id or tool name that another table claimed for another
    module is an error (two packages claiming one id)."""
    for env_id, row in envs.items():
        taken = CATALOGUE.get(env_id)
        if "/" not in env_id:
            raise ValueError(f"env ids need a namespace, like 'mypkg/{env_id}'")
        if taken is not None and taken["entry_point"] != row["entry_point"]:
            raise ValueError(f"env {env_id!r} is already registered by {taken['entry_point']}")
    tools = tools or {}
    for name, tool in tools.items():
        taken_tool = TOOL_CATALOGUE.get(name)
        if taken_tool is not None and taken_tool["module"] != tool["module"]:
            raise ValueError(f"a tool named {name!r} is already registered by {taken_tool['module']}")
    for env_id, row in envs.items():
        CATALOGUE[env_id] = dict(row)
        _register_by_name(env_id, row["entry_point"], row.get("kwargs", {}), plugin)
    for name, tool in tools.items():
        TOOL_CATALOGUE[name] = dict(tool)


def register_lazily(envs: Mapping[str, str]) -> None:
    """Register ``env id -> "module:factory"`` with Gymnasium without importing the modules (the first
    ``gym.make`` does; the module's ``@register_env`` then records the env's spec)."""
    for env_id, entry_point in envs.items():
        _register_by_name(env_id, entry_point, {}, "")


def _register_by_name(env_id: str, entry_point: str, kwargs: Mapping[str, Any], plugin: str) -> None:
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=entry_point, kwargs=dict(kwargs))
    module = entry_point.partition(":")[0]
    with ENVS._lock:
        ENVS.lazy_modules.add(module)
        if plugin:
            ENVS.plugin_modules[module] = plugin
        ENVS._complete = False


def load_plugins() -> None:
    """Read every plugin's catalogue table (``toolgym.catalogue``: its envs are registered by name, its
    modules imported when used), then import every entry point of the older groups (each once)."""
    from importlib.metadata import entry_points

    found = entry_points()  # one scan of the installed distributions for all of toolgym's groups
    for ep in found.select(group=CATALOGUE_GROUP):
        _load_plugin(
            f"{CATALOGUE_GROUP}:{ep.name}",
            ep,
            lambda table, key: register_catalogue(
                getattr(table, "ENVS", {}), getattr(table, "TOOLS", {}), plugin=key
            ),
        )
    for group in PLUGIN_GROUPS:
        for ep in found.select(group=group):
            _load_plugin(f"{group}:{ep.name}", ep, _call_registrar)


def _call_registrar(loaded: Any, key: str) -> None:
    """An older-form plugin's entry point: a module (imported: it registers) or a function to call."""
    if callable(loaded) and not isinstance(loaded, type):
        loaded()


def _load_plugin(key: str, ep: Any, use: Callable[[Any, str], None]) -> None:
    """Load one entry point once and ``use`` what it names; a failure is kept in ``PLUGIN_ERRORS`` (and
    warned about), never raised: one broken plugin must not break ``import toolgym``."""
    if key in LOADED_PLUGINS or key in PLUGIN_ERRORS:
        return
    try:
        use(ep.load(), key)
    except Exception as exc:
        PLUGIN_ERRORS[key] = f"{type(exc).__name__}: {exc}"
        warnings.warn(f"toolgym plugin {key} ({ep.value}) failed to load: {exc}", stacklevel=3)
    else:
        LOADED_PLUGINS.append(key)


def _qualname(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
