"""examples/verifiers_env.py runs: verifiers plays the env's oracle behind the OpenAI API, reward 1.0."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_verifiers_example_scores_the_oracle_1():
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "verifiers_env.py"), "--n", "2"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [line for line in out.stdout.splitlines() if "reward=" in line]
    assert len(lines) == 2 and all("reward=1.0" in line and "'passed': 1.0" in line for line in lines), (
        out.stdout
    )
