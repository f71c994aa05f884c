"""The site's Python examples run as written, and an example followed by its ``Output:`` block prints exactly
that output (the env pages' sample episodes), so the docs cannot drift from the code.

The pages are listed in ``PAGES`` (add yours once its examples run standalone). Examples that README.md also
shows are run by ``tests/test_readme.py`` and skipped here, and so are those another test runs as it needs
(``RUN_ELSEWHERE``); an example that needs a running service is written as ```` ```python title="..." ````
and is not collected.

An example that starts the embedded model's in-process engine (``make_client("tiny")``) runs in this process
on the session's engine (tests/conftest.py), which is that same engine, instead of starting another in a
subprocess (about a minute of CPU on two cores): its ``main()`` is awaited on the engine's loop, with
``make_client`` giving the session's client. This file is in the vLLM group for that (tests/conftest.py).
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
    "judges.md",
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
    "envs/report.md",
    "envs/reasoning-gym.md",
    "envs/sql.md",
    "envs/terminal.md",
    "envs/swe.md",
)
README_BLOCKS = set(re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.DOTALL))
#: a line of an example -> the test that runs that example, in its own way
RUN_ELSEWHERE = {
    # its printed reward curve must climb, and the same run with the mask inverted must not learn
    "rollout_func=make_rollout_func(ENV_ENTRY, max_tokens_per_turn=1),": (
        "tests/trainers/trl/test_learning.py"
    ),
}
TINY_ENGINE = 'make_client("tiny")'


def examples(*, skipping: bool = True) -> list[tuple[str, str, str | None]]:
    found = []
    for page in PAGES:
        for index, (code, output) in enumerate(BLOCK.findall((ROOT / "docs" / page).read_text())):
            elsewhere = code in README_BLOCKS or any(line in code for line in RUN_ELSEWHERE)
            if not (skipping and elsewhere):
                found.append((f"{page}:{index}", code, output or None))
    return found


EXAMPLES = examples()


def test_the_env_pages_show_sample_episodes():
    shown = {name.split(":")[0] for name, _, output in EXAMPLES if output is not None}
    pages = ("calculator", "math", "python-code", "search", "search-multihop", "reasoning-gym", "sql")
    pages += ("terminal", "swe", "report")
    assert shown >= {f"envs/{page}.md" for page in pages}


def test_each_example_left_to_another_test_is_found_once():
    """So that a reworded example is not silently left untested."""
    every = [code for _, code, _ in examples(skipping=False)]
    for line, test in RUN_ELSEWHERE.items():
        assert sum(line in code for code in every) == 1, f"{test} runs the example with {line!r}"
        assert (ROOT / test).read_text().count(line) == 1, f"{test} no longer finds it by {line!r}"


class SessionClient:
    """The session engine's client, for an example that closes its client when done: the session owns it."""

    def __init__(self, client):
        self.client = client

    def __getattr__(self, name):
        return getattr(self.client, name)

    async def close(self) -> None:
        pass


def run_on_the_session_engine(code: str, engine, capsys) -> str:
    namespace = {"__name__": "docs_example"}  # its `if __name__ == "__main__":` stays out
    exec(compile(code, "<docs example>", "exec"), namespace)
    assert "make_client" in namespace and "main" in namespace, (
        "an engine example defines main() and imports make_client"
    )

    def make_client(model, **kwargs):
        assert model == "tiny" and not kwargs, (model, kwargs)
        return SessionClient(engine.client)

    namespace["make_client"] = make_client
    capsys.readouterr()
    engine.run(namespace["main"]())
    return capsys.readouterr().out


@pytest.mark.parametrize(("name", "code", "output"), EXAMPLES, ids=[name for name, _, _ in EXAMPLES])
def test_docs_example_runs(name, code, output, tmp_path, request, capsys, monkeypatch):
    if TINY_ENGINE in code:
        monkeypatch.chdir(tmp_path)
        stdout = run_on_the_session_engine(code, request.getfixturevalue("engine"), capsys)
        assert stdout.strip(), "the example printed nothing"
    else:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path
        )
        assert out.returncode == 0, out.stderr
        stdout = out.stdout
    if output is not None:
        assert stdout.rstrip() == output
