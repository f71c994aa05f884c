"""Dependencies point down: contracts <- parsers/tools/rewards <- envs <- rollout <- trainers/server <- cli.

Every ``import toolgym.x`` in the package (module level or inside a function, both count) is checked against
the layer table below, so a helper placed too high (as ``format_table`` once was, in the CLI) fails here
instead of growing an import circle. docs/architecture.md describes the same layers.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "toolgym"

#: (layer, module prefixes), lowest first; the longest matching prefix decides a module's layer;
#: "=name" matches that module only (the package's __init__, which registers the built-in envs)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "contracts",
        (
            "toolgym.core",
            "toolgym.sandbox",
            # the tiny model's files: leaves that the rollout layer's "tiny" model name resolves to
            "toolgym.testing.tiny_model",
            "toolgym.testing.chat_template",
            "toolgym.testing.tiny_corpus",
        ),
    ),
    (
        "parsers, tools, rewards, search, sql",
        ("toolgym.parsers", "toolgym.tools", "toolgym.rewards", "toolgym.search", "toolgym.sql"),
    ),
    # ToolEnv and make_env wire a parser, tools and a verifier together: they sit above them
    ("envs", ("toolgym.envs", "=toolgym")),
    ("rollout", ("toolgym.rollout",)),
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


def test_every_module_has_a_layer():
    assert all(layer_of(module_name(p)) >= 0 for p in PACKAGE.rglob("*.py"))


def test_no_import_points_up():
    assert upward_edges() == []


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
        ("toolgym.core.types", "contracts"),
        ("toolgym.envs.base", "envs"),
        ("toolgym.core.task", "contracts"),
        ("toolgym.envs.calculator", "envs"),
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
