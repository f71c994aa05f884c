"""SWE-v0's environments per repository version beside the peers' method, side by side on this machine.

- **build**: ``toolgym swe envs build`` (uv: a relocatable venv, ``uv pip install``, the install pointed at
  the workspace, compiled parts packed) for each of ``toolgym.testing.swe_layouts``' four repositories, beside
  what a SWE-bench environment image runs inside Docker, without Docker: ``python -m venv``, ``pip install``
  of the same packages and ``pip install -e .`` in a checkout. Seconds and disk per environment. The published
  Docker figures are printed beside them: SWE-bench's harness builds about 60 environment images (~100 GB,
  ~1.7 GB each) plus per-instance images (~2 TB for the full set), and a container-free peer reports ~5% of
  the containers' disk and ~25% of their build time.
- **reset on a 3,000-commit repository** (``long_history_row``): the first ``reset`` of SWE-v0 on a row, which
  validates it (SWE-bench's validation: the gold patch and the bare base, two test runs) and builds its
  workspace archive; a reset once the row's validation is in the environments' cache (``toolgym swe validate``
  wrote it, or any process before); and the peers' stand-in, a fresh ``git clone`` at the base commit.
- **judge**: the gold patch judged in its environment on that repository.
- **validation**: ``toolgym swe validate``'s rows per minute on 2 cores (``--jobs 2``), the four layouts.

Run::

    .venv/bin/pytest benchmarks/bench_swe_envs.py -q -s
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.envs.swe import swe_oracle
from toolgym.swe.environments import EnvironmentStore, build_all, plan
from toolgym.swe.requirements import clean_lines
from toolgym.testing.scripted import script_texts
from toolgym.testing.swe_layouts import LAYOUTS, layout_row, long_history_row

ROUNDS = 5
RESULTS: dict[str, float] = {}
SIZES: dict[str, float] = {}
PYTEST_PIN = f"pytest=={pytest.__version__}"


@pytest.fixture(scope="module")
def work():
    with tempfile.TemporaryDirectory(prefix="bench-swe-envs-") as tmp:
        root = Path(tmp)
        rows = [layout_row(root / "repos", layout, pytest_pin=PYTEST_PIN) for layout in LAYOUTS]
        rows.append(long_history_row(root / "repos"))
        (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        yield root, rows


def _du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if not p.is_dir())


def _pip_build(root: Path, row: dict, dest: Path) -> None:
    """A SWE-bench image's environment steps without Docker: a venv, pip install of the recipe's packages
    (and a requirements file read from the checkout), pip install -e . of the repository."""
    src = dest / "src"
    subprocess.run(
        ["git", "clone", "-q", str(root / "repos" / row["repo"].replace("/", "__")), str(src)], check=True
    )
    subprocess.run(["git", "checkout", "-q", row["environment_setup_commit"]], cwd=src, check=True)
    subprocess.run([sys.executable, "-m", "venv", str(dest / "venv")], check=True)
    pip = [str(dest / "venv" / "bin" / "python"), "-m", "pip", "install", "-q"]
    config = row["install_config"]
    if config.get("packages") == "requirements.txt":
        reqs = clean_lines((src / "requirements.txt").read_text())
        subprocess.run([*pip, *reqs], check=True, cwd=src)
    subprocess.run([*pip, *config["pip_packages"]], check=True, cwd=src)
    subprocess.run([*pip, "-e", "."], check=True, cwd=src)


def test_build_per_environment(work):
    root, rows = work
    layout_rows = rows[: len(LAYOUTS)]
    ours, peers, our_disk, peer_disk = [], [], [], []
    for row in layout_rows:
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            (result,) = build_all(plan([row]), root / "repos", Path(tmp) / "envs").values()
            ours.append(time.perf_counter() - started)
            assert isinstance(result, dict), result
            our_disk.append(result["size_bytes"])
        with tempfile.TemporaryDirectory() as tmp:
            started = time.perf_counter()
            _pip_build(root, row, Path(tmp))
            peers.append(time.perf_counter() - started)
            peer_disk.append(_du(Path(tmp) / "venv"))
    RESULTS["build: ours (uv, per environment)"] = statistics.median(ours)
    RESULTS["build: venv + pip install (per environment)"] = statistics.median(peers)
    SIZES["disk: ours (MiB per environment)"] = statistics.median(our_disk) / 2**20
    SIZES["disk: venv + pip (MiB per environment)"] = statistics.median(peer_disk) / 2**20


def test_reset_and_judge_on_a_3000_commit_repository(work):
    root, rows = work
    row = rows[-1]
    envs = root / "envs"
    build_all(plan([row]), root / "repos", envs)
    (root / "history.jsonl").write_text(json.dumps(row) + "\n")

    def make():
        return gym.make(
            "toolgym/SWE-v0", tasks=str(root / "history.jsonl"), repos=str(root / "repos"), envs=str(envs)
        )

    shutil.rmtree(envs / "validation", ignore_errors=True)
    env = make()
    started = time.perf_counter()
    env.reset(options={"task_id": row["instance_id"]})
    RESULTS["reset: first, validating the row (3,000 commits)"] = time.perf_counter() - started
    env.close()
    resets = []
    for _ in range(ROUNDS):  # a new process's env each time: the validation comes from the cache on disk
        env = make()
        started = time.perf_counter()
        env.reset(options={"task_id": row["instance_id"]})
        env.step(script_texts(env, [swe_oracle(env.unwrapped.task)[0]])[0])  # the workspace is unpacked
        resets.append(time.perf_counter() - started)
        env.close()
    RESULTS["reset: validation cached, workspace ready"] = statistics.median(resets)
    clones = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(ROUNDS):
            started = time.perf_counter()
            dest = Path(tmp) / f"c{i}"
            subprocess.run(
                ["git", "clone", "-q", "--no-checkout", str(root / "repos" / "acme__history"), str(dest)],
                check=True,
            )
            subprocess.run(["git", "checkout", "-q", row["base_commit"]], cwd=dest, check=True)
            clones.append(time.perf_counter() - started)
    RESULTS["reset: peers' fresh git clone at the base"] = statistics.median(clones)
    env = make()
    judged = []
    for _ in range(ROUNDS):
        env.reset(options={"task_id": row["instance_id"]})
        actions = script_texts(env, swe_oracle(env.unwrapped.task))
        for action in actions[:-1]:
            env.step(action)
        started = time.perf_counter()
        _, reward, _, _, info = env.step(actions[-1])
        judged.append(time.perf_counter() - started)
        assert reward == 1.0, info["verdict"]
    env.close()
    RESULTS["judge: gold patch in its environment"] = statistics.median(judged)


def test_validation_rows_per_minute(work):
    root, rows = work
    envs = root / "envs"
    layout_rows = rows[: len(LAYOUTS)]
    build_all(plan(layout_rows), root / "repos", envs, jobs=2)
    (root / "layouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in layout_rows))
    shutil.rmtree(envs / "validation", ignore_errors=True)
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "toolgym.cli", "swe", "validate", str(root / "layouts.jsonl"), "--repos",
         str(root / "repos"), "--envs", str(envs), "--jobs", "2"],
        capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"},
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    SIZES["validation: rows per minute (2 jobs, 2 cores)"] = len(layout_rows) / elapsed * 60
    SIZES["environments built"] = len(EnvironmentStore(envs).manifests())


def test_zz_print_table():
    print("\n\nSWE environments (toolgym swe envs build) beside the peers' method, this machine:")
    for key, value in RESULTS.items():
        print(f"  {key:<56} {value * 1000:9.1f} ms")
    for key, value in SIZES.items():
        print(f"  {key:<56} {value:9.1f}")
    if "build: ours (uv, per environment)" in RESULTS:
        ratio = (
            RESULTS["build: ours (uv, per environment)"]
            / RESULTS["build: venv + pip install (per environment)"]
        )
        disk = SIZES["disk: ours (MiB per environment)"] / SIZES["disk: venv + pip (MiB per environment)"]
        print(f"  build time, ours / venv + pip {'':<26} {ratio:9.2f}x")
        print(f"  disk, ours / venv + pip {'':<32} {disk:9.2f}x")
        print(
            "  published: SWE-bench's environment images ~1,700 MiB each (~100 GB for ~60); ours "
            f"{SIZES['disk: ours (MiB per environment)'] / 1700:.1%} of one"
        )
    if "reset: validation cached, workspace ready" in RESULTS:
        ratio = (
            RESULTS["reset: validation cached, workspace ready"]
            / RESULTS["reset: peers' fresh git clone at the base"]
        )
        print(f"  reset (cached) / fresh clone {'':<27} {ratio:9.2f}x")
