"""The site's Python examples run as written, and an example followed by its ``Output:`` block prints exactly
that output (the env pages' sample episodes), so the docs cannot drift from the code.

The pages are listed in ``PAGES`` (add yours once its examples run standalone). Examples that README.md also
shows are run by ``tests/test_readme.py`` and skipped here; an example that needs a running service is written
as ```` ```python title="..." ```` and is not collected.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"```python\n(.*?)```(?:\n\nOutput:\n\n````text\n(.*?)\n````)?", re.DOTALL)
PAGES = (
    "index.md",
    "quickstart.md",
    "architecture.md",
    "extending.md",
    "rollouts.md",
    "viewer.md",
    "serving.md",
    "sandbox.md",
    "training.md",
    "benchmarks.md",
    "envs/index.md",
    "envs/calculator.md",
    "envs/math.md",
    "envs/python-code.md",
    "envs/search.md",
    "envs/search-multihop.md",
    "envs/reasoning-gym.md",
    "envs/sql.md",
    "envs/terminal.md",
)
README_BLOCKS = set(re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL))


def examples() -> list[tuple[str, str, str | None]]:
    found = []
    for page in PAGES:
        for index, (code, output) in enumerate(BLOCK.findall((ROOT / "docs" / page).read_text())):
            if code not in README_BLOCKS:
                found.append((f"{page}:{index}", code, output or None))
    return found


EXAMPLES = examples()


def test_the_env_pages_show_sample_episodes():
    shown = {name.split(":")[0] for name, _, output in EXAMPLES if output is not None}
    pages = ("calculator", "math", "python-code", "search", "search-multihop", "reasoning-gym", "sql")
    pages += ("terminal",)
    assert shown >= {f"envs/{page}.md" for page in pages}


@pytest.mark.parametrize(("name", "code", "output"), EXAMPLES, ids=[name for name, _, _ in EXAMPLES])
def test_docs_example_runs(name, code, output, tmp_path):
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    if output is not None:
        assert out.stdout.rstrip() == output
