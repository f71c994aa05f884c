"""How long the first commands take, as ratios of ``python -c "import gymnasium"`` measured in the same run:
``import toolgym``, ``toolgym list``, ``toolgym play`` (one action, then an empty line), ``gym.make`` and a
reset of a built-in env, and the tiny model's renderer (``make_renderer("tiny")``, which ``--model tiny``, the
docs and the tests use). Each is a fresh interpreter (what a user runs), timed from outside; the rounds
alternate the commands so that a busy machine slows them alike, and each number is the median of its rounds.
Each row also has the interpreter's CPU time (user + system) and its ratio, which a busy machine disturbs
less than the wall-clock time; the goals are judged on the wall-clock ratio.

Goal: at most 1.5x ``import gymnasium`` for ``import toolgym`` and ``toolgym list`` (#47, #55); each of those
rows prints its goal beside its ratio, and whether it is met. ``toolgym list`` reads the catalogue tables
(``toolgym/envs/_catalogue.py`` and the plugins'), importing no env module; an installed plugin of the
catalogue form is not imported by either. None of them imports torch, transformers or vLLM
(``tests/core/test_first_command.py``).

Run (about a minute on 2 cores)::

    .venv/bin/pytest benchmarks/bench_first_command.py -q -s
"""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

ROUNDS = 7
#: the most each command may take, as a multiple of ``import gymnasium``
GOALS = {"import toolgym": 1.5, "toolgym list": 1.5}
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


def _seconds(code: str, stdin: str) -> tuple[float, float]:
    """Wall-clock seconds, and the CPU seconds (user + system) the interpreter used: on a shared machine the
    CPU time varies less than the wall-clock time, which waits for the other jobs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], input=stdin, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_first_commands_against_import_gymnasium():
    _seconds(
        "import toolgym; from toolgym.rollout.models import make_renderer; make_renderer('tiny')", ""
    )  # warm
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    cpu: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(ROUNDS):
        for name, (code, stdin) in COMMANDS.items():
            wall, used = _seconds(code, stdin)
            times[name].append(wall)
            cpu[name].append(used)
    base = statistics.median(times["import gymnasium"])
    cpu_base = statistics.median(cpu["import gymnasium"])
    lines = [f"{'command':<24} {'median s':>9} {'x import gymnasium':>19} {'cpu s':>7} {'x (cpu)':>8}  goal"]
    for name, samples in times.items():
        median, cpu_median = statistics.median(samples), statistics.median(cpu[name])
        goal = GOALS.get(name)
        verdict = "" if goal is None else f"<= {goal:.1f}x {'met' if median / base <= goal else 'MISSED'}"
        lines.append(
            f"{name:<24} {median:>9.3f} {median / base:>19.2f}"
            f" {cpu_median:>7.3f} {cpu_median / cpu_base:>8.2f}  {verdict}".rstrip()
        )
    print("\n" + "\n".join(lines))
    assert all(statistics.median(s) > 0 for s in times.values())
