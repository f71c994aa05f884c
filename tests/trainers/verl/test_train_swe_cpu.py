"""``toolgym train`` on SWE-v0 rows in their own environments: two real GRPO steps of verl's trainer on CPU
with the tiny model, each row played in the environment ``toolgym swe envs build`` made for it.

The four rows are ``toolgym.testing.swe_layouts``' repositories (a src layout, a namespace package, a C
extension, a requirements file), each importable only from its environment. ``toolgym swe validate`` runs
first, as a user would; then verl's launcher exports the rows and its Ray workers play them. The workers read
the environments' directory and its validation cache, and build nothing: the manifests, build logs and
validation results are the ones from before the run. The tiny random model never calls a tool well, so every
reward is 0; what this proves is the plumbing, end to end, with no infra or verifier error.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from toolgym.swe.environments import build_all, plan
from toolgym.testing.swe_layouts import LAYOUTS, layout_row, open_to_sandbox
from toolgym.testing.verl import removing_leaked_shm, run_in_session
from toolgym.trainers.verl_adapter.progress import step_metrics

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "verl" / "tiny-cpu.yaml"
TIMEOUT_S = 900


def _state(envs: Path) -> dict[str, int]:
    """Every file of the environments' directory but the venvs' own, with its modification time."""
    return {
        str(p.relative_to(envs)): p.stat().st_mtime_ns
        for p in envs.rglob("*")
        if p.is_file() and "venv" not in p.relative_to(envs).parts
    }


@pytest.fixture(scope="module")
def swe_run(tmp_path_factory):
    root = open_to_sandbox(tmp_path_factory.mktemp("swe-train"))
    rows = [
        layout_row(root / "repos", layout, pytest_pin=f"pytest=={pytest.__version__}") for layout in LAYOUTS
    ]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = build_all(plan(rows), root / "repos", root / "envs", jobs=2)
    assert all(isinstance(r, dict) for r in results.values()), results
    cli = [sys.executable, "-m", "toolgym.cli"]
    validated = subprocess.run(
        [*cli, "swe", "validate", str(root / "rows.jsonl"), "--repos", str(root / "repos"), "--envs",
         str(root / "envs")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert validated.returncode == 0, validated.stdout + validated.stderr
    before = _state(root / "envs")
    config = yaml.safe_load(EXAMPLE.read_text())
    kwargs = {"tasks": str(root / "rows.jsonl"), "repos": str(root / "repos"), "envs": str(root / "envs")}
    config["envs"] = [{"id": "toolgym/SWE-v0", "kwargs": kwargs}]
    config["max_prompt_length"] = 4096  # the SWE instruction and its two tools' descriptions
    (root / "swe-cpu.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    out = root / "run"
    command = [*cli, "train", "--config", str(root / "swe-cpu.yaml"), "--out", str(out)]
    with removing_leaked_shm():
        code, log = run_in_session(
            [*command, "--", f"trainer.rollout_data_dir={out / 'rollouts'}"], TIMEOUT_S
        )
    (root / "train.log").write_text(log)
    if code is None:
        pytest.fail(f"toolgym train did not finish in {TIMEOUT_S}s; the end of its log:\n{log[-6000:]}")
    assert code == 0, f"toolgym train failed; the end of its log:\n{log[-6000:]}"
    return root, out, log, before


@pytest.mark.slow
def test_two_grpo_steps_play_swe_rows_in_their_environments(swe_run):
    _, out, log, _ = swe_run
    steps = step_metrics(log)
    assert sorted(steps) == [1, 2], log[-4000:]
    for step, metrics in steps.items():
        rows = [json.loads(line) for line in (out / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert len(rows) == 2 * 2  # train_batch_size x group_size
        for row in rows:  # the SWE instruction, played by toolgym's runner, over two turns
            assert "Consider the following issue description" in row["input"], row["input"][-500:]
            assert row["turns"] == 2.0 and row["infra_errors"] == 0.0 and row["verifier_error"] == 0.0
        assert metrics["toolgym/infra_errors/total"] == 0
        assert metrics["toolgym/pass_rate/toolgym/SWE-v0"] == 0.0


@pytest.mark.slow
def test_the_workers_built_and_validated_nothing_again(swe_run):
    root, _, _, before = swe_run
    assert _state(root / "envs") == before  # same manifests, build logs and validation results
    assert len(list((root / "envs").glob("*/manifest.json"))) == len(LAYOUTS)
    assert len(list((root / "envs" / "validation").glob("*.json"))) == len(LAYOUTS)
    assert not list((root / "envs" / ".tmp").iterdir())
