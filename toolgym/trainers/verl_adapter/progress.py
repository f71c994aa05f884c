"""What ``toolgym train`` shows of a verl run: verl's console output streams through as it comes, and when the
run ends, one table with a row per training step (reward, pass rate, turns, tool and infra errors, step time).

verl's console logger prints each step as one long ``step:N - key:value - key:value ...`` line of some
hundred metrics; the numbers a user watches (``metrics.py`` adds toolgym's) are in there but hard to find.
``step_metrics`` parses those lines (the tests read verl's metrics back with it too).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

_STEP = re.compile(r"step:(\d+) - (.*)")
_METRIC = re.compile(r"([\w/@.\-]+):(?:np\.\w+\()?(-?[\d.]+(?:e[-+]?\d+)?|nan|inf)\)?")

#: (heading, metric key, format) of the summary table's columns
COLUMNS = (
    ("reward", "critic/score/mean", "{:.3f}"),
    ("pass rate", "toolgym/pass_rate", "{:.3f}"),
    ("turns", "toolgym/turns/mean", "{:.2f}"),
    ("tool calls", "toolgym/tool_calls/mean", "{:.2f}"),
    ("tool errors", "toolgym/tool_errors/total", "{:.0f}"),
    ("infra errors", "toolgym/infra_errors/total", "{:.0f}"),
    ("verifier errors", "toolgym/verifier_error/total", "{:.0f}"),
    ("staleness", "toolgym/staleness/mean", "{:.2f}"),
    ("step s", "timing_s/step", "{:.1f}"),
)
PASS_RATE_OF_ENV = "toolgym/pass_rate/"


def parse_step_line(line: str) -> tuple[int, dict[str, float]] | None:
    """``(step, metrics)`` of one console-logger line, or None for any other line."""
    match = _STEP.search(line)
    if match is None:
        return None
    return int(match[1]), {key: float(value) for key, value in _METRIC.findall(match[2])}


def step_metrics(lines: Iterable[str] | str) -> dict[int, dict[str, float]]:
    """Every training step's metrics in a verl log (text or lines); a step logged twice keeps its last line.
    verl's steps count from 1: the fully-async trainer's step-0 line holds only the initial weight sync's
    timings, and is left out."""
    steps: dict[int, dict[str, float]] = {}
    for line in lines.splitlines() if isinstance(lines, str) else lines:
        parsed = parse_step_line(line)
        if parsed is not None and parsed[0] > 0:
            steps[parsed[0]] = parsed[1]
    return steps


def step_table(steps: dict[int, dict[str, float]]) -> str:
    """The per-step table; a column verl did not log is left out, and with several envs each env's pass
    rate gets a column."""
    envs = sorted(
        {
            key[len(PASS_RATE_OF_ENV) :]
            for m in steps.values()
            for key in m
            if key.startswith(PASS_RATE_OF_ENV)
        }
    )
    columns = [c for c in COLUMNS if any(c[1] in m for m in steps.values())]
    if len(envs) > 1:
        columns += [(f"pass {env}", PASS_RATE_OF_ENV + env, "{:.3f}") for env in envs]
    header = ["step", *(heading for heading, _, _ in columns)]
    rows = [
        [str(step), *(fmt.format(m[key]) if key in m else "-" for _, key, fmt in columns)]
        for step, m in sorted(steps.items())
    ]
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(cell.rjust(width) for cell, width in zip(row, widths, strict=True))
        for row in [header, *rows]
    ]
    return "\n".join(lines)


def run_and_summarize(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, out: TextIO | None = None
) -> int:
    """Run verl with its stdout streaming through ``out`` line by line (stderr untouched), then print the
    per-step table to stderr; the exit status is verl's."""
    out = out or sys.stdout
    # verl's prints reach a pipe now, not the terminal: unbuffered, they still stream as they come
    env = {**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"}

    def echoed(lines: Iterable[str]) -> Iterable[str]:
        for line in lines:
            out.write(line)
            out.flush()
            yield line

    with subprocess.Popen(
        command, cwd=cwd, env=env, stdout=subprocess.PIPE, text=True, errors="replace", bufsize=1
    ) as proc:
        assert proc.stdout is not None
        steps = step_metrics(echoed(proc.stdout))
    if steps:
        noun = "training step" if len(steps) == 1 else "training steps"
        print(f"\ntoolgym train: {len(steps)} {noun}\n{step_table(steps)}", file=sys.stderr, flush=True)
    return proc.returncode
