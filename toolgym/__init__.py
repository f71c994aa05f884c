"""toolgym: registered Gymnasium text environments for tool-using LLM agents, with built-in verifiers.

``import toolgym`` registers every built-in env under the ``toolgym/`` namespace from the generated catalogue
table (``toolgym/envs/_catalogue.py``), importing no env module, and reads third-party plugins' tables
(entry-point group ``toolgym.catalogue``: their modules are imported when their envs are made; the older
groups ``toolgym.tools`` and ``toolgym.envs`` are imported here)::

    import gymnasium as gym, toolgym
    env = gym.make("toolgym/Calculator-v0")
"""

from __future__ import annotations

import importlib
from typing import Any

from toolgym.core.registry import ENVS, load_plugins, register_catalogue, register_env
from toolgym.envs import BUILTIN_CATALOGUE, BUILTIN_TOOLS

#: the public names, and the module each comes from: imported on first use (PEP 562), so that ``import
#: toolgym`` costs little more than ``import gymnasium`` (tests/test_first_command.py)
_LAZY = {
    "ListSource": "toolgym.core.task",
    "ProceduralSource": "toolgym.core.task",
    "Task": "toolgym.core.task",
    "TaskSource": "toolgym.core.task",
    "ParsedAction": "toolgym.core.types",
    "ToolCall": "toolgym.core.types",
    "ToolResult": "toolgym.core.types",
    "Trajectory": "toolgym.core.types",
    "Verdict": "toolgym.core.types",
    "ToolEnv": "toolgym.envs.base",
    "make_env": "toolgym.envs.compose",
    "FieldMap": "toolgym.envs.task_files",
    "load_tasks": "toolgym.envs.task_files",
    "make_parser": "toolgym.parsers",
    "register_parser": "toolgym.parsers",
    "Verifier": "toolgym.rewards.base",
    "TOOLS": "toolgym.tools.base",
    "Tool": "toolgym.tools.base",
    "make_tool": "toolgym.tools.base",
    "register_tool": "toolgym.tools.base",
    "tool": "toolgym.tools.function",
}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            value = version("toolgym")
        except PackageNotFoundError:  # running from a source tree without installing
            value = "0+unknown"
    elif name in _LAZY:
        if name in ("TOOLS", "Tool", "make_tool", "register_tool"):
            importlib.import_module("toolgym.tools")  # the built-in tools register themselves
        value = getattr(importlib.import_module(_LAZY[name]), name)
    else:
        raise AttributeError(f"module 'toolgym' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


register_catalogue(BUILTIN_CATALOGUE, BUILTIN_TOOLS)
load_plugins()

__all__ = [
    "ENVS",
    "TOOLS",
    "FieldMap",
    "ListSource",
    "ParsedAction",
    "ProceduralSource",
    "Task",
    "TaskSource",
    "Tool",
    "ToolCall",
    "ToolEnv",
    "ToolResult",
    "Trajectory",
    "Verdict",
    "Verifier",
    "__version__",
    "load_tasks",
    "make_env",
    "make_parser",
    "make_tool",
    "register_env",
    "register_parser",
    "register_tool",
    "tool",
]
