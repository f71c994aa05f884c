"""Every registered env: gym.make, Gymnasium's env checker, seeding, and the verifier's 1.0 / 0.0 paths."""

import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import toolgym
from toolgym.parsers import PARSERS
from toolgym.testing.scripted import oracle_script, play_script, wrong_script

ENV_IDS = sorted(toolgym.ENVS)
#: judged envs (toolgym/Report-v0) score against a scripted judge, not skipped
pytestmark = pytest.mark.usefixtures("scripted_judge_env")
FORMATS = sorted(PARSERS)


def test_builtin_envs_are_registered():
    assert "toolgym/Calculator-v0" in ENV_IDS
    assert all(i in gym.registry for i in ENV_IDS)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_passes_without_warnings(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    env.close()


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_same_seed_same_task_and_different_seeds_differ(env_id):
    a, b = gym.make(env_id), gym.make(env_id)
    prompts_a = [a.reset(seed=s)[0] for s in range(8)]
    assert prompts_a == [b.reset(seed=s)[0] for s in range(8)]
    assert len(set(prompts_a)) == 8


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("fmt", FORMATS)
def test_oracle_scores_one_and_wrong_answer_zero(env_id, fmt):
    """Four tasks in the first format, one in each other (the kit's own split, tests/testing's
    test_builtin_envs_pass_the_kit: the formats change the parsing, not the verifier, and SWE-v0's verdicts
    are a sandboxed test run each, 40 of them here at four tasks a format, ~150 s of a CI run)."""
    env = gym.make(env_id, action_format=fmt)
    for seed in range(4 if fmt == FORMATS[0] else 1):
        env.reset(seed=seed)
        task = env.unwrapped.task
        good = play_script(env, oracle_script(env_id, task), options={"task": task})
        assert good.reward == 1.0 and good.terminated and good.verdict.passed, good
        assert good.tool_calls >= 1 and good.tool_errors == 0
        bad = play_script(env, wrong_script(env_id, task), options={"task": task})
        assert bad.reward == 0.0 and bad.terminated and not bad.verdict.passed, bad


def test_the_readme_one_liner_works_in_a_fresh_interpreter():
    code = "import gymnasium as gym, toolgym\n"
    code += 'env = gym.make("toolgym/Calculator-v0"); print(env.reset(seed=0)[0])'
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "?" in out.stdout


def test_each_lazy_entry_point_is_the_factory_its_module_registers():
    """``toolgym.envs.BUILTIN_ENVS`` registers the built-ins with Gymnasium by name (no import); each name
    must be the factory the env's module registers under that id, with no defaults Gymnasium would miss."""
    from toolgym.core.registry import ENVS
    from toolgym.envs import BUILTIN_ENVS

    builtin = {env_id for env_id in ENVS if env_id.startswith("toolgym/")}
    assert builtin == set(BUILTIN_ENVS)
    for env_id, entry_point in BUILTIN_ENVS.items():
        spec = ENVS[env_id]
        assert f"{spec.factory.__module__}:{spec.factory.__qualname__}" == entry_point
        assert gym.spec(env_id).entry_point == entry_point and spec.kwargs == {}
