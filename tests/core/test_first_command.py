"""The first commands stay light: ``import toolgym``, ``toolgym list``, ``toolgym play``, ``gym.make`` (and a
reset) of every built-in env and the tiny model's renderer import no torch, transformers or vLLM. Each runs
in a fresh interpreter, which reports what it imported. (Their times, as ratios of ``import gymnasium``, are
in ``benchmarks/bench_first_command.py``.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("torch", "transformers", "vllm")
REPORT = f"import sys, json; print(json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))"


def _heavy_after(code: str, stdin: str = "") -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\n{REPORT}"], input=stdin, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_toolgym():
    assert _heavy_after("import toolgym") == []


def test_toolgym_list():
    assert _heavy_after("from toolgym.cli import main; main(['list'])") == []


def test_toolgym_play():
    code = "from toolgym.cli import main; main(['play', 'toolgym/Calculator-v0', '--seed', '0'])"
    assert _heavy_after(code, stdin="<calculator>1+1</calculator>\n\n") == []


def test_make_and_reset_every_builtin_env():
    code = (
        "import gymnasium as gym, toolgym\n"
        "from toolgym.envs import BUILTIN_ENVS\n"
        "for env_id in BUILTIN_ENVS:\n"
        "    try:\n"
        "        env = gym.make(env_id)\n"
        "    except ImportError:  # an env whose optional package is not installed (ReasoningGym-v0)\n"
        "        continue\n"
        "    env.reset(seed=0); env.close()"
    )
    assert _heavy_after(code) == []


def test_the_tiny_renderer():
    code = (
        "from toolgym.rollout.models import make_renderer\n"
        "make_renderer('tiny').prompt_ids([{'role': 'user', 'content': 'hi'}])"
    )
    assert _heavy_after(code) == []


@pytest.mark.parametrize("name", ["Task", "Tool", "TOOLS", "make_env", "tool", "__version__"])
def test_the_public_names_load_on_first_use(name):
    import toolgym

    assert getattr(toolgym, name) is not None and name in dir(toolgym)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        toolgym.nope  # noqa: B018
