"""Dependencies point down: helpers <- contracts <- tools, rewards, ... <- envs <- rollout <- trainers <- cli.

Every ``import toolgym.x`` in the package (module level or inside a function, both count) is checked against
the layer table below, so a helper placed too high (as ``format_table`` once was, in the CLI) fails here
instead of growing an import circle. The table names whole packages only: no module is an exception to its
folder's layer. Beyond the layers:

- no two folders (package directories) import each other, directly or round a longer loop, even inside one
  layer (a sub-package and the package that holds it are one family: their imports of each other are left to
  the next rule);
- no two modules import each other, directly or round a longer loop, whether in one folder or across;
- a trainer adapter (a package under ``toolgym/trainers/``) imports only itself, the shared modules of
  ``toolgym/trainers/`` and the layers below: never another adapter, nor a package of its own layer.

docs/architecture.md describes the same layers.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "toolgym"

#: (layer, package prefixes), lowest first; the longest matching prefix decides a module's layer; "=name"
#: matches that module only (the package's own __init__, which registers the built-in envs)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # leaves that import no other toolgym package (the tiny model imports the cache directory's helper)
    ("helpers", ("toolgym.util", "toolgym.tiny_model")),
    ("contracts", ("toolgym.core", "toolgym.sandbox")),
    (
        "parsers, tools, rewards, search, sql",
        (
            "toolgym.parsers",
            "toolgym.tools",
            "toolgym.rewards",
            "toolgym.search",
            "toolgym.sql",
            "toolgym.swe",
        ),
    ),
    # ToolEnv and make_env wire a parser, tools and a verifier together: they sit above them
    ("envs", ("toolgym.envs", "=toolgym")),
    ("rollout", ("toolgym.rollout",)),
    # the gateway for agent programs: trainers and the server both run it, so it sits below them
    ("gateway", ("toolgym.gateway",)),
    (
        "trainers, server, testing, viewer",
        ("toolgym.trainers", "toolgym.server", "toolgym.testing", "toolgym.viewer"),
    ),
    ("cli", ("toolgym.cli",)),
]


def layer_of(module: str) -> int:
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix.startswith("="):
                matches = module == prefix[1:]
            else:
                matches = module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def toolgym_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "toolgym":
                found.update(f"toolgym.{alias.name}" for alias in node.names)
            elif node.module.startswith("toolgym."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name == "toolgym" or a.name.startswith("toolgym."))
    return found


def upward_edges() -> list[str]:
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = module_name(path)
        for target in sorted(toolgym_imports(path)):
            if layer_of(target) > layer_of(source):
                below, above = LAYERS[layer_of(source)][0], LAYERS[layer_of(target)][0]
                problems.append(f"{source} ({below}) imports {target} ({above})")
    return problems


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def folder_of(path: Path) -> str:
    """The package directory a module's file lies in (a package's ``__init__`` belongs to its own)."""
    return ".".join(path.relative_to(PACKAGE.parent).parent.parts)


def _existing(name: str, known: set[str]) -> str:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The toolgym modules a file imports (module level, in a function or for type checking: all count),
    each resolved to a module that exists: ``from toolgym.x import y`` is ``toolgym.x.y`` when that is a
    module, else ``toolgym.x``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "toolgym" or node.module.startswith("toolgym."):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    found.add(full if full in known else _existing(node.module, known))
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names if a.name == "toolgym" or a.name.startswith("toolgym.")]
            found.update(_existing(name, known) for name in names)
    found.discard("")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One loop through each group of nodes that reach each other (Tarjan's strongly connected components),
    as ``[a, b, ..., a]``: the shortest from the group's first node back to it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.add(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(_loop(graph, group) for group in groups)


def _loop(graph: dict[str, set[str]], group: set[str]) -> list[str]:
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for nxt in sorted(graph[node] & group):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    raise AssertionError(f"no loop through {start}")


def folder_edges() -> dict[tuple[str, str], str]:
    """Folder A -> folder B, with the first import that makes it (``a imports b``). A folder and the folders
    inside it are one family: their imports of each other are not folder edges (the module rule sees a loop
    there)."""
    mods = modules()
    known = set(mods)
    edges: dict[tuple[str, str], str] = {}
    for source, path in mods.items():
        for target in sorted(imported_modules(path, known)):
            a, b = folder_of(path), folder_of(mods[target])
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                edges.setdefault((a, b), f"{source} imports {target}")
    return edges


def folder_cycles() -> list[str]:
    edges = folder_edges()
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    return [
        " -> ".join(loop) + " (" + "; ".join(edges[step] for step in itertools.pairwise(loop)) + ")"
        for loop in cycles(graph)
    ]


def module_cycles() -> list[str]:
    mods = modules()
    known = set(mods)
    graph = {name: imported_modules(path, known) - {name} for name, path in mods.items()}
    return [" -> ".join(loop) for loop in cycles(graph)]


def adapter_imports() -> list[str]:
    """Imports of a trainer adapter (a package under ``toolgym/trainers/``) that reach another adapter, or a
    package of the adapters' own layer outside ``toolgym/trainers/`` (server, testing, viewer)."""
    trainers = PACKAGE / "trainers"
    adapters = (
        {d.name for d in trainers.iterdir() if (d / "__init__.py").is_file()} if trainers.is_dir() else set()
    )
    mods = modules()
    known = set(mods)
    problems = []
    for source, path in mods.items():
        parts = source.split(".")
        if len(parts) < 3 or parts[1] != "trainers" or parts[2] not in adapters:
            continue
        own = f"toolgym.trainers.{parts[2]}"
        for target in sorted(imported_modules(path, known)):
            if target == own or target.startswith(own + "."):
                continue
            target_parts = target.split(".")
            if len(target_parts) >= 3 and target_parts[1] == "trainers" and target_parts[2] in adapters:
                problems.append(f"{source} imports {target} (another adapter)")
            elif target_parts[:2] != ["toolgym", "trainers"] and layer_of(target) >= layer_of(source):
                problems.append(f"{source} imports {target} (its own layer)")
    return problems


def test_every_module_has_a_layer():
    assert all(layer_of(module_name(p)) >= 0 for p in PACKAGE.rglob("*.py"))


def test_the_layer_table_names_whole_packages():
    """No single module is an exception to its folder's layer (the package's own ``__init__`` aside)."""
    for _, prefixes in LAYERS:
        for prefix in prefixes:
            if prefix != "=toolgym":
                assert (PACKAGE.parent / prefix.replace(".", "/") / "__init__.py").is_file(), prefix


def test_no_import_points_up():
    assert upward_edges() == []


def test_no_folder_imports_itself_round_a_loop():
    assert folder_cycles() == []


def test_no_module_imports_itself_round_a_loop():
    assert module_cycles() == []


def test_trainer_adapters_import_no_other_adapter():
    assert adapter_imports() == []


def test_nothing_below_the_cli_imports_it():
    offenders = [
        module_name(p)
        for p in PACKAGE.rglob("*.py")
        if not module_name(p).startswith("toolgym.cli")
        and any(t == "toolgym.cli" or t.startswith("toolgym.cli.") for t in toolgym_imports(p))
    ]
    assert offenders == []


@pytest.mark.parametrize(
    ("module", "layer"),
    [
        ("toolgym.util.retry", "helpers"),
        ("toolgym.tiny_model.builder", "helpers"),
        ("toolgym.core.types", "contracts"),
        ("toolgym.envs.base", "envs"),
        ("toolgym.core.task", "contracts"),
        ("toolgym.envs.calculator", "envs"),
        ("toolgym.envs.task_files", "envs"),
        ("toolgym.rollout.episode", "rollout"),
        ("toolgym.cli.demo", "cli"),
        ("toolgym.viewer.page", "trainers, server, testing, viewer"),
    ],
)
def test_layer_table_places_modules(module, layer):
    assert LAYERS[layer_of(module)][0] == layer


def test_the_check_sees_an_upward_import(tmp_path, monkeypatch):
    """The checker itself: a core module importing the CLI is reported."""
    fake = tmp_path / "toolgym" / "core"
    fake.mkdir(parents=True)
    (fake / "bad.py").write_text("def f():\n    from toolgym.cli import main\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "toolgym")
    assert upward_edges() == ["toolgym.core.bad (contracts) imports toolgym.cli (cli)"]


def _plant(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> None:
    """A fake ``toolgym`` package of these files (every folder a package), which the checks then read."""
    for rel, text in files.items():
        path = tmp_path / "toolgym" / rel
        for folder in [path.parent, *path.parent.parents]:
            if folder == tmp_path:
                break
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
        path.write_text(text)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "toolgym")


def test_the_check_sees_a_folder_cycle(tmp_path, monkeypatch):
    """Two folders that import each other (one of the imports inside a function) are reported, with the
    imports that make the loop, though no module imports itself back."""
    _plant(
        tmp_path,
        monkeypatch,
        {
            "search/qa_files.py": "from toolgym.rewards.qa import golden_answers\n",
            "rewards/qa.py": "def golden_answers(task): ...\n",
            "rewards/sql.py": "def score():\n    from toolgym.search.world import vocabulary\n",
            "search/world.py": "vocabulary = []\n",
        },
    )
    assert folder_cycles() == [
        "toolgym.rewards -> toolgym.search -> toolgym.rewards (toolgym.rewards.sql imports "
        "toolgym.search.world; toolgym.search.qa_files imports toolgym.rewards.qa)"
    ]
    assert module_cycles() == []


def test_the_check_sees_a_module_cycle(tmp_path, monkeypatch):
    """Modules importing each other are reported in one folder, and across a package and the sub-package
    inside it (which are no folder cycle: one family)."""
    _plant(
        tmp_path,
        monkeypatch,
        {
            "sql/world.py": "def task():\n    from toolgym.sql.world_questions import draw\n",
            "sql/world_questions.py": "from toolgym.sql.world import DatabaseSpec\n",
            "testing/check.py": "from toolgym.testing import checks as kit\n",
            "testing/checks/__init__.py": "from toolgym.testing.checks.api import check_api\n",
            "testing/checks/api.py": "from toolgym.testing.check import CheckResult\n",
        },
    )
    assert module_cycles() == [
        "toolgym.sql.world -> toolgym.sql.world_questions -> toolgym.sql.world",
        "toolgym.testing.check -> toolgym.testing.checks -> toolgym.testing.checks.api"
        " -> toolgym.testing.check",
    ]
    assert folder_cycles() == []


def test_the_check_sees_an_adapter_importing_another(tmp_path, monkeypatch):
    """An adapter may import itself, the trainers' shared modules and the layers below; another adapter or a
    package of its own layer is reported."""
    _plant(
        tmp_path,
        monkeypatch,
        {
            "rollout/episode.py": "",
            "server/agent.py": "",
            "trainers/train_config.py": "",
            "trainers/one_adapter/__init__.py": "from toolgym.trainers.one_adapter.data import rows\n",
            "trainers/one_adapter/data.py": (
                "from toolgym.rollout.episode import run_episode\n"
                "from toolgym.trainers.train_config import load\n"
                "def rows():\n"
                "    from toolgym.trainers.two_adapter.export import export\n"
                "    from toolgym.server.agent import serve\n"
            ),
            "trainers/two_adapter/export.py": "",
        },
    )
    assert adapter_imports() == [
        "toolgym.trainers.one_adapter.data imports toolgym.server.agent (its own layer)",
        "toolgym.trainers.one_adapter.data imports toolgym.trainers.two_adapter.export (another adapter)",
    ]
