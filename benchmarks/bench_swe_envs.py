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

- **real rows** (opt in, ``TOOLGYM_BENCH_SWE_ROWS``): published rows, as a user runs them: ``toolgym swe
  envs build`` and ``toolgym swe validate`` (``--jobs 2``), then per repository the build's seconds, the disk
  per environment and for all of them together as it lies (each inode once, as ``du`` counts; uv links from
  its cache), the seconds to validate a row; and for the rows named in ``TOOLGYM_BENCH_SWE_EPISODES`` (a
  Django row and a SymPy row, say) a SWE-v0 reset until the workspace is ready and the judge on the gold
  patch. Beside them, SWE-bench's Docker figures (published). The data is the user's: nothing here downloads
  it (docs/envs/swe-datasets.md says where the rows and clones come from).

Run::

    .venv/bin/pytest benchmarks/bench_swe_envs.py -q -s
    TOOLGYM_BENCH_SWE_ROWS=rows.jsonl TOOLGYM_BENCH_SWE_REPOS=repos TOOLGYM_BENCH_SWE_ENVS=envs \
    TOOLGYM_BENCH_SWE_EPISODES=django__django-13933,sympy__sympy-18189 \
        .venv/bin/pytest benchmarks/bench_swe_envs.py -q -s -k "real or print"

``TOOLGYM_BENCH_SWE_ENVS`` (default: a temporary directory) keeps the environments, so a second run finds
them built and validated and measures the episodes; ``TOOLGYM_BENCH_SWE_BUILD_ARGS`` adds options to the
build (``--exclude-newer``, ``--recipes FILE``).
"""

from __future__ import annotations

import json
import os
import shlex
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
from toolgym.rewards.swe_memo import SIZE_ENV
from toolgym.swe.environments import EnvironmentStore, build_all, plan
from toolgym.swe.requirements import clean_lines
from toolgym.swe.store_report import store_report
from toolgym.testing.scripted import script_texts
from toolgym.testing.swe_layouts import LAYOUTS, layout_row, long_history_row

ROUNDS = 5
RESULTS: dict[str, float] = {}
SIZES: dict[str, float] = {}
PYTEST_PIN = f"pytest=={pytest.__version__}"
REAL_ROWS = os.environ.get("TOOLGYM_BENCH_SWE_ROWS")
REAL_REPOS = os.environ.get("TOOLGYM_BENCH_SWE_REPOS")
REAL: dict[str, dict] = {}  # the real rows' figures: per repository, per episode, the store
real_rows = pytest.mark.skipif(
    not (REAL_ROWS and REAL_REPOS),
    reason="real rows are the user's data: set TOOLGYM_BENCH_SWE_ROWS and TOOLGYM_BENCH_SWE_REPOS (see the "
    "module's doc)",
)
# SWE-bench's harness, as its docs and issues give it: ~60 environment images of ~1.7 GB (~100 GB), plus
# per-instance images (~2 TB for the full set); Lite's evaluation ~30 min on 16 cores with its image cache
DOCKER_IMAGE_MIB = 1700
DOCKER_ENV_IMAGES = 60


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


def test_reset_and_judge_on_a_3000_commit_repository(work, monkeypatch):
    monkeypatch.setenv(SIZE_ENV, "0")  # each judge run runs the tests: no verdict remembered from the last
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


@pytest.fixture(scope="module")
def real_envs():
    keep = os.environ.get("TOOLGYM_BENCH_SWE_ENVS")
    if keep:
        yield Path(keep)
        return
    with tempfile.TemporaryDirectory(prefix="bench-swe-real-") as tmp:
        yield Path(tmp) / "envs"


def _cli(*args: str) -> float:
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "toolgym.cli", "swe", *args],
        capture_output=True, text=True, env={**os.environ, "TQDM_DISABLE": "1"},
    )  # fmt: skip
    elapsed = time.perf_counter() - started
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return elapsed


@real_rows
def test_real_rows_build_and_validate(real_envs):
    extra = shlex.split(os.environ.get("TOOLGYM_BENCH_SWE_BUILD_ARGS", ""))
    build_s = _cli("envs", "build", REAL_ROWS, "--repos", REAL_REPOS, "--out", str(real_envs), "--jobs", "2",
                   *extra)  # fmt: skip
    # a refused row is a figure too (its reason is in the table printed above), not a failed benchmark
    validate_s = _cli("validate", REAL_ROWS, "--repos", REAL_REPOS, "--envs", str(real_envs), "--jobs", "2")
    report = store_report(real_envs)
    for repo in report.repositories:
        envs = [e for e in report.environments if e.repo == repo.repo]
        REAL.setdefault("repositories", {})[repo.repo] = {
            "environments": repo.environments,
            "build_s": repo.build_s,
            "disk_per_env_mib": [e.disk.on_disk_bytes / 2**20 for e in envs],
            "disk_together_mib": repo.disk.on_disk_bytes / 2**20,
            "rows": repo.validation.rows,
            "valid": repo.validation.valid,
            "validate_s": repo.validation.seconds,
        }
    du = subprocess.run(["du", "-sk", str(real_envs)], capture_output=True, text=True, check=True)
    REAL["store"] = {
        "listed_mib": report.total.listed_bytes / 2**20,
        "on_disk_mib": report.total.on_disk_bytes / 2**20,
        "shared_mib": report.total.shared_bytes / 2**20,
        "du_mib": int(du.stdout.split()[0]) / 1024,
        "environments": len(report.environments),
        "build_wall_s": build_s,
        "validate_wall_s": validate_s,
    }


@real_rows
def test_real_rows_episodes(real_envs, monkeypatch):
    monkeypatch.setenv(SIZE_ENV, "0")  # each judge run runs the tests: no verdict remembered from the last
    wanted = [i for i in os.environ.get("TOOLGYM_BENCH_SWE_EPISODES", "").split(",") if i]
    if not wanted:
        pytest.skip("name the rows to play in TOOLGYM_BENCH_SWE_EPISODES (instance ids, comma-separated)")
    for instance_id in wanted:
        resets, judged = [], []
        for _ in range(3):
            # a new env each time, as a new worker process has: the validation comes from the cache on disk
            env = gym.make("toolgym/SWE-v0", tasks=REAL_ROWS, repos=REAL_REPOS, envs=str(real_envs))
            started = time.perf_counter()
            env.reset(options={"task_id": instance_id})
            actions = script_texts(env, swe_oracle(env.unwrapped.task))
            env.step(actions[0])  # the workspace is unpacked on the first command
            resets.append(time.perf_counter() - started)
            for action in actions[1:-1]:
                env.step(action)
            started = time.perf_counter()
            _, reward, _, _, info = env.step(actions[-1])
            judged.append(time.perf_counter() - started)
            env.close()
            assert reward == 1.0, info["verdict"]
        REAL.setdefault("episodes", {})[instance_id] = {
            "reset_s": statistics.median(resets),
            "judge_s": statistics.median(judged),
        }


def _span(values: list[float], fmt: str = "{:.0f}") -> str:
    if not values:
        return "-"
    low, high = min(values), max(values)
    return fmt.format(low) if low == high else f"{fmt.format(low)} to {fmt.format(high)}"


def _print_real() -> None:
    print("\nReal rows (toolgym swe envs build, toolgym swe validate --jobs 2), this machine:")
    print(f"  {'repository':<26} {'envs':>4} {'build s':>12} {'MiB per env':>12} {'MiB together':>12}"
          f" {'valid':>7} {'validate s (median)':>20}")  # fmt: skip
    for repo, f in sorted(REAL.get("repositories", {}).items()):
        median = f"{statistics.median(f['validate_s']):.1f}" if f["validate_s"] else "-"
        print(f"  {repo:<26} {f['environments']:>4} {_span(f['build_s']):>12} "
              f"{_span(f['disk_per_env_mib']):>12} {f['disk_together_mib']:>12.0f} "
              f"{f['valid']:>3}/{f['rows']:<3} {median:>20}")  # fmt: skip
    store = REAL.get("store")
    if store:
        per_env = store["on_disk_mib"] / max(store["environments"], 1)
        lines = [
            f"store: {store['environments']} environments; {store['listed_mib']:.0f} MiB added up, "
            f"{store['on_disk_mib']:.0f} MiB on disk (each inode once; du -sk: {store['du_mib']:.0f} MiB), "
            f"{store['shared_mib']:.0f} MiB of it also linked from uv's cache",
            f"wall: build {store['build_wall_s']:.0f} s, validation {store['validate_wall_s']:.0f} s",
            f"beside SWE-bench's Docker images: ~{DOCKER_IMAGE_MIB} MiB each, ~{DOCKER_ENV_IMAGES} of them "
            f"(~100 GB); ours {per_env:.0f} MiB an environment ({per_env / DOCKER_IMAGE_MIB:.1%} of one); "
            "Lite's evaluation ~30 min on 16 cores",
        ]
        for line in lines:
            print("  " + line)
    for instance_id, f in REAL.get("episodes", {}).items():
        print(f"  {instance_id:<34} reset, workspace ready {f['reset_s'] * 1000:8.0f} ms   "
              f"judge, gold patch {f['judge_s']:7.1f} s")  # fmt: skip


def test_zz_print_table():
    if REAL:
        _print_real()
    if not RESULTS:
        return
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
