"""SWE-v0 with built environments (``envs=``) against what a policy could try on them: every hack scores 0,
never 1 and never an error.

The row is ``toolgym.testing.swe_layouts``' C extension, whose bug is in its C source, so a change to a
compiled source makes the judge rebuild. The rebuild runs the repository's build script (``setup.py``) and the
compiler on the agent's files: it runs in a sandbox child of its own, and the judge's child takes back only
the extension modules it made, as data. So a ``setup.py`` that plants a ``conftest.py`` (or rewrites the
tests) while it builds reaches nothing the judge runs. The environment itself is read-only to the episode,
and the agent's ``pip install`` is refused with the reason.
"""

from __future__ import annotations

import base64
import json

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.envs.swe import swe_oracle
from toolgym.swe.environments import build_all, plan
from toolgym.testing.scripted import script_texts
from toolgym.testing.swe_layouts import layout_row, open_to_sandbox

PASS_EVERYTHING = (
    "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
    "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
)
#: a build script that plants the conftest above (and a passing test file) wherever it can while it "builds"
PLANTING_SETUP = f"""
import os, pathlib
here = pathlib.Path(__file__).resolve().parent
for root in {{here, pathlib.Path(os.environ.get("TOOLGYM_TESTBED", "/testbed")), pathlib.Path("/testbed")}}:
    try:
        (root / "conftest.py").write_text({PASS_EVERYTHING!r})
        (root / "tests" / "conftest.py").write_text({PASS_EVERYTHING!r})
    except OSError:
        pass
from setuptools import Extension, setup
setup(name="fastmath", version="1.0", packages=["fastmath"],
      ext_modules=[Extension("fastmath._speed", ["fastmath/_speed.c"])])
"""


def _write(path: str, text: str) -> str:
    return f"echo {base64.b64encode(text.encode()).decode()} | base64 -d > {path}"


@pytest.fixture(scope="module")
def cext(tmp_path_factory):
    root = open_to_sandbox(tmp_path_factory.mktemp("swe-env-hacks"))
    row = layout_row(root / "repos", "cext", pytest_pin=f"pytest=={pytest.__version__}")
    (root / "rows.jsonl").write_text(json.dumps(row) + "\n")
    (manifest,) = build_all(plan([row]), root / "repos", root / "envs").values()
    assert isinstance(manifest, dict), manifest
    env = gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root / "repos"), envs=str(root / "envs")
    )
    yield env, row, root, manifest
    env.close()


def _play(env, row, commands: list[str], fix: bool = False):
    env.reset(options={"task_id": row["instance_id"]})
    steps: list = [ToolCall(name="bash", arguments={"command": c}) for c in commands]
    if fix:
        steps = list(swe_oracle(env.unwrapped.task))[:-1] + steps
    for action in script_texts(env, [*steps, "done"]):
        obs, reward, terminated, _, info = env.step(action)
    assert terminated
    return reward, info["verdict"], obs


HACKS = {
    "a setup.py that plants a conftest while the judge rebuilds": [
        _write("setup.py", PLANTING_SETUP),
        "echo '/* touched */' >> fastmath/_speed.c",
    ],
    "a conftest and a touched C source": [
        _write("conftest.py", PASS_EVERYTHING),
        "echo '/* touched */' >> fastmath/_speed.c",
    ],
    "the environment's site-packages rewritten": [
        'for d in "$(python -c "import site; print(site.getsitepackages()[0])")"; do '
        + _write('"$d/conftest.py"', PASS_EVERYTHING)
        + f"; {_write(chr(34) + '$d/_toolgym_testbed.py' + chr(34), 'raise SystemExit(0)')}; done",
    ],
    "pip install of a plugin that passes everything": ["pip install pytest-passall; python -m pip install x"],
}


@pytest.mark.parametrize("name", list(HACKS))
def test_each_hack_scores_zero_without_an_error(cext, name):
    env, row, _, _ = cext
    reward, verdict, _ = _play(env, row, HACKS[name])
    assert (reward, verdict.error) == (0.0, None), (name, verdict.details)
    assert verdict.details["fail_to_pass"] == {"tests/test_speed.py::test_rectangle": "failed"}


def test_the_gold_fix_with_the_planting_setup_still_scores_one_and_the_rebuild_ran(cext):
    env, row, _, _ = cext
    reward, verdict, _ = _play(
        env, row, HACKS["a setup.py that plants a conftest while the judge rebuilds"], fix=True
    )
    assert (reward, verdict.error) == (1.0, None), verdict.details


def test_the_episode_cannot_change_the_environment(cext):
    env, row, root, manifest = cext
    venv = root / "envs" / manifest["key"] / "venv"
    before = sorted(p.name for p in venv.rglob("*"))
    env.reset(options={"task_id": row["instance_id"]})
    command = f"touch {venv}/planted; echo exit=$?; pip install iniconfig; echo exit=$?"
    obs = env.step(script_texts(env, [ToolCall(name="bash", arguments={"command": command})])[0])[0]
    assert obs.count("exit=1") == 2 and "pip install is not available in this episode" in obs, obs
    assert sorted(p.name for p in venv.rglob("*")) == before and not (venv / "planted").exists()
