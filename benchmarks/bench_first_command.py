"""How long the first commands take, as ratios of ``python -c "import gymnasium"`` measured in the same run:
``import toolgym``, ``toolgym list``, ``toolgym play`` (one action, then an empty line), ``gym.make`` and a
reset of a built-in env, and the tiny model's renderer (``make_renderer("tiny")``, which ``--model tiny``, the
docs and the tests use). Each is a fresh interpreter (what a user runs), timed from outside; the rounds
alternate the commands so that a busy machine slows them alike, and each number is the median of its rounds.

Goal: at most 1.5x ``import gymnasium`` for ``import toolgym`` and ``toolgym list`` (#47). None of them
imports torch, transformers or vLLM (``tests/core/test_first_command.py``).

Run (about a minute on 2 cores)::

    .venv/bin/pytest benchmarks/bench_first_command.py -q -s
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

ROUNDS = 7
PLAY = "from toolgym.cli import main; main(['play', 'toolgym/Calculator-v0', '--seed', '0'])"
COMMANDS = {
    "import gymnasium": ("import gymnasium", ""),
    "import toolgym": ("import toolgym", ""),
    "toolgym list": ("from toolgym.cli import main; main(['list'])", ""),
    "toolgym play": (PLAY, "<calculator>1+1</calculator>\n\n"),
    "gym.make + reset": (
        "import gymnasium as gym, toolgym; gym.make('toolgym/Calculator-v0').reset(seed=0)",
        "",
    ),
    'make_renderer("tiny")': ("from toolgym.rollout.models import make_renderer; make_renderer('tiny')", ""),
}


def _seconds(code: str, stdin: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, text=True, check=True)
    return time.perf_counter() - started


def test_first_commands_against_import_gymnasium():
    _seconds(
        "import toolgym; from toolgym.rollout.models import make_renderer; make_renderer('tiny')", ""
    )  # warm
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(ROUNDS):
        for name, (code, stdin) in COMMANDS.items():
            times[name].append(_seconds(code, stdin))
    base = statistics.median(times["import gymnasium"])
    lines = [f"{'command':<24} {'median s':>9} {'x import gymnasium':>19}"]
    for name, samples in times.items():
        median = statistics.median(samples)
        lines.append(f"{name:<24} {median:>9.3f} {median / base:>19.2f}")
    print("\n" + "\n".join(lines))
    assert all(statistics.median(s) > 0 for s in times.values())
