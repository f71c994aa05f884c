"""examples/skyrl_env.py runs: each env's oracle, played through SkyRL-Gym, scores 1.0."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "skyrl_env.py"


def test_the_skyrl_example_scores_the_oracle_1():
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), "--n", "2", "--action-format", "hermes"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [line for line in out.stdout.splitlines() if "reward=" in line]
    assert len(lines) == 2 and all("reward=1.0" in line and "'passed': 1.0" in line for line in lines), (
        out.stdout
    )
