"""How the driver runs one hidden test: which names it takes from the solution, which it imports itself.

The harness (:mod:`toolgym.rewards.code.harness`) executes a test in the driver, never in the solution's
process. Every free name of the test is either a *proxy* (a call through it is a message to the worker that
runs the solution) or a *module* the driver imports itself (``math.isclose``, ``np.allclose``): a name used
only as ``name.attr`` that is importable. The plan is computed here, outside the sandbox, from the test's
syntax tree; the task's ``setup`` names and the entry point are given, never proxied.
"""

from __future__ import annotations

import ast
import builtins
import importlib.util
import sys
from typing import Any

#: names that tests use as modules under a conventional alias
MODULE_ALIASES = {"np": "numpy", "pd": "pandas", "sp": "scipy", "nx": "networkx", "plt": "matplotlib.pyplot"}
_BUILTIN_NAMES = frozenset(dir(builtins))


def _bound_names(tree: ast.AST) -> set[str]:
    """Every name ``tree`` binds anywhere (assignments, defs, imports, arguments, handlers, patterns)."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            bound.add(node.name)
    return bound


def _is_module(name: str) -> bool:
    if name in MODULE_ALIASES or name in sys.stdlib_module_names:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def plan_test(source: str, setup_names: set[str], entry_point: str | None = None) -> dict[str, Any]:
    """How the driver runs one test: ``proxy`` (names taken from the solution), ``modules`` (names the
    driver imports itself: used only as ``name.attr`` and importable) and ``imports`` (every module the test
    needs, imported by the driver before any solution code runs). Raises ``SyntaxError``."""
    tree = ast.parse(source)
    loaded: set[str] = set()
    called: set[str] = set()
    attr_bases: set[str] = set()
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            loaded.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            attr_bases.add(node.value.id)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module)
    given = {"candidate", entry_point} if entry_point else set()
    free = loaded - _bound_names(tree) - setup_names - given - _BUILTIN_NAMES
    modules = sorted(n for n in free if n in attr_bases and n not in called and _is_module(n))
    bound = [[n, MODULE_ALIASES.get(n, n)] for n in modules]
    return {
        "src": source,
        "proxy": sorted(free - set(modules)),
        "modules": bound,
        "imports": sorted(imported | {module for _, module in bound}),
    }


def setup_names(setup: str, entry_point: str | None) -> set[str]:
    """The names the task's setup code binds (given to every test; never taken from the solution)."""
    try:
        names = _bound_names(ast.parse(setup))
    except SyntaxError:
        return set()
    return names - {entry_point}
