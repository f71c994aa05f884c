"""Task files at training scale: env construction time and memory for 1, 32 and 256 concurrent envs on one
file, beside pyarrow's read of the same file.

A verl worker, the collector and the OpenEnv server make an env per concurrent episode, all with the same
``tasks=`` file. Files (written here, nothing downloaded):

- a 200k-row QA file (the size of Search-R1's NQ + HotpotQA train split) for ``Search-v0`` (with a retriever
  URL: no search index is built);
- a 20k-row code file with large tests (50 per row) for ``PythonCode-v0``.

Each row of the table is a fresh process with toolgym (and the search stack) imported before the clock
starts: the first env
(``gym.make`` and a first ``reset``, which reads the file), then the rest, time and RSS growth. Goals (#29):
the first env at most 3x pyarrow's read, the 256th env nearly free (at most 1% of the first).

Run::

    .venv/bin/pytest benchmarks/bench_task_files.py -q -s
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

COUNTS = (1, 32, 256)
RESULTS: list[str] = []

_MEASURE = r"""
import json, resource, sys, time
import gymnasium as gym
import pyarrow.json as pj
import toolgym
import toolgym.search.sources  # the search stack's imports (bm25s, httpx): once per process, not the file's
env_id, path, n, kwargs = sys.argv[1], sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4])
def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096
if n == 0:
    base = rss(); t = time.perf_counter(); pj.read_json(path)
    print(json.dumps([time.perf_counter() - t, rss() - base])); sys.exit()
base = rss(); t = time.perf_counter()
first = gym.make(env_id, tasks=path, **kwargs); first.reset(seed=0)
first_s, first_b = time.perf_counter() - t, rss() - base
envs = [first]
for i in range(1, n):
    env = gym.make(env_id, tasks=path, **kwargs); env.reset(seed=i); envs.append(env)
last = time.perf_counter(); env = gym.make(env_id, tasks=path, **kwargs); env.reset(seed=n)
last = time.perf_counter() - last
print(json.dumps([first_s, first_b, time.perf_counter() - t, rss() - base, last]))
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("taskfiles")
    qa = root / "nq_hotpot.jsonl"
    with qa.open("w") as fh:
        for i in range(200_000):
            row = {"id": f"train_{i}", "question": f"who founded the company that employs person {i}?"}
            fh.write(
                json.dumps({**row, "golden_answers": [f"Person {i * 7 % 1000}"], "data_source": "nq"}) + "\n"
            )
    code = root / "code.jsonl"
    with code.open("w") as fh:
        for i in range(20_000):
            tests = [
                f"assert add_{i}({j}, {j + 1}) == {2 * j + 1}, 'case {j} of a long test file'"
                for j in range(50)
            ]
            fh.write(json.dumps({"id": f"p{i}", "prompt": f"Write add_{i}(a, b).", "tests": tests}) + "\n")
    return {"qa": qa, "code": code}


CASES = {
    "Search-v0, 200k-row QA": ("toolgym/Search-v0", "qa", {"retriever": "http://127.0.0.1:9"}),
    "PythonCode-v0, 20k rows x 50 tests": ("toolgym/PythonCode-v0", "code", {}),
}


def _measure(env_id: str, path: Path, n: int, kwargs: dict) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, env_id, str(path), str(n), json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", list(CASES))
def test_env_construction_at_scale(benchmark, files, case):
    env_id, file_key, kwargs = CASES[case]
    path = files[file_key]
    read_s, read_b = _measure(env_id, path, 0, kwargs)
    MiB = 2**20
    RESULTS.append(f"\n{case} ({path.stat().st_size / MiB:.0f} MiB file)")
    RESULTS.append(f"  pyarrow read_json of the file: {read_s:.3f} s, +{read_b / MiB:.0f} MiB")
    for n in COUNTS:
        first_s, first_b, all_s, all_b, next_s = (
            benchmark.pedantic(_measure, args=(env_id, path, n, kwargs), rounds=1, iterations=1)
            if n == COUNTS[-1]
            else _measure(env_id, path, n, kwargs)
        )
        RESULTS.append(
            f"  {n:>3} envs: {all_s:.3f} s ({all_s / first_s:.2f}x the first env), +{all_b / MiB:.0f} MiB "
            f"({all_b / max(first_b, 1):.2f}x); first env {first_s:.3f} s ({first_s / read_s:.1f}x pyarrow's "
            f"read); env #{n + 1} {next_s * 1000:.2f} ms ({next_s / first_s:.2%} of the first)"
        )


def teardown_module(module):
    print("\n".join(["", "task files: env construction (gym.make + first reset) per process", *RESULTS]))
