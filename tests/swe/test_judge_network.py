"""The judge's runs have a loopback network of each run's own (``LocalSandbox(network="loopback")``), as the
suites written for SWE-bench's containers expect: a test serving on 127.0.0.1 (Django's live-server tests)
passes on the fix and fails on the bare tree, a connect beyond the machine times out (requests'
``TestTimeout``). Where the machine allows no network namespace (this file also runs in the Docker-like
setup, ``tests/sandbox/test_setups.py``), such a row's verdict is an error saying why, never a 0.
"""

from __future__ import annotations

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym.core.types import ToolCall
from toolgym.envs.swe_tasks import TaskRefused
from toolgym.rewards.swe import SWEJudge
from toolgym.sandbox import LocalSandbox
from toolgym.sandbox.shared import TERMINAL_LINKS, shared_test_sandbox
from toolgym.testing.swe import play, sample_row

FIX = ToolCall(name="bash", arguments={"command": "sed -i 's/a - b/a + b/' calc/ops.py"})
SERVED = "tests/test_ops.py::test_add_served"


@pytest.fixture(scope="module")
def network_env(tmp_path_factory):
    root = tmp_path_factory.mktemp("network")
    row = sample_row(root, network=True)
    env = gym.make("toolgym/SWE-v0", tasks=[row], repos=str(root), validate=False)
    yield env
    env.close()


def _loopback_here() -> bool:
    return "loopback_network" in shared_test_sandbox().isolation.active


def test_a_test_serving_on_loopback_is_judged_on_the_change(network_env):
    reward, verdict = play(network_env, [FIX, "done"])
    if not _loopback_here():  # (the Docker-like setup: no network namespace)
        assert verdict.error and "gives them no network" in verdict.error, verdict
        assert "loopback_network" in shared_test_sandbox().isolation.missing
        return
    assert (reward, verdict.error) == (1.0, None), verdict
    # (a parameter holding "::" matched its test too, and so did duplicate ids as an older pytest wrote them)
    assert verdict.details["tests_passed"] == "7/7", verdict.details
    reward, verdict = play(network_env, ["done"])
    assert (reward, verdict.error) == (0.0, None), verdict
    # the served test failed on its assertion (the bare tree's answer), the timeout test still passed
    assert (
        verdict.details["fail_to_pass"][SERVED] == "failed" and verdict.details["pass_to_pass_failed"] == {}
    )


def test_on_a_sandbox_without_a_network_the_verdict_is_an_error_never_a_zero(network_env):
    base = network_env.unwrapped.verifier
    # network="none" (no socket at all), the test sandbox's view links (the tree at /testbed)
    with LocalSandbox(workers=1, links=TERMINAL_LINKS) as no_network:
        network_env.unwrapped.verifier = SWEJudge(
            base.tool, base.workspaces, python=base.python_for, options=base.options, sandbox=no_network
        )
        try:
            for steps in ([FIX, "done"], ["done"]):
                reward, verdict = play(network_env, steps)
                assert reward == 0.0 and verdict.error, verdict
                assert "open inet sockets" in verdict.error and "network='loopback'" in verdict.error
        finally:
            network_env.unwrapped.verifier = base


def test_a_row_whose_tests_need_a_real_network_is_refused_saying_so(tmp_path):
    row = sample_row(tmp_path, network="online")  # (one listed test fetches from httpbin.org)
    env = gym.make("toolgym/SWE-v0", tasks=[row], repos=str(tmp_path))
    try:
        with pytest.raises(TaskRefused, match="every task of swe-rows is refused"):
            env.reset(seed=0)  # (its only row refused: nothing to play)
        reason = env.unwrapped.tasks.refused[row["instance_id"]]
    finally:
        env.close()
    if _loopback_here():
        assert reason.startswith("it needs a real network: its tests look up httpbin.org"), reason
        assert "tests/test_ops.py::test_add_online (failed)" in reason
    else:  # (no network at all: the judge's verdict is the error)
        assert "gives them no network" in reason, reason
