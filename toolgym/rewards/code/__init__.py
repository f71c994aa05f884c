"""Code verification: hidden tests and stdin/stdout tests run against a submitted solution in the sandbox.

``verifier`` (``CodeTestsVerifier``, the scorers, the threat model in its docstring) judges; ``runner``
ships the in-sandbox ``harness`` and the tests ``plan`` prepares to a fresh session; ``io_tests`` runs
stdin/stdout tests and the contest checker; ``layouts`` reads contest datasets' test layouts. The public
names of the verifier, the runner and the planner are importable from here.
"""

from toolgym.rewards.code.plan import MODULE_ALIASES, plan_test
from toolgym.rewards.code.runner import (
    DEFAULT_TEST_TIMEOUT,
    DEFAULT_TOTAL_TIMEOUT,
    CodeTestReport,
    TestOutcome,
    arun_code_tests,
    run_code_tests,
)
from toolgym.rewards.code.verifier import (
    CodeTestsVerifier,
    Reward,
    code_io_scorer,
    code_tests_scorer,
    extract_code,
)

__all__ = [
    "DEFAULT_TEST_TIMEOUT",
    "DEFAULT_TOTAL_TIMEOUT",
    "MODULE_ALIASES",
    "CodeTestReport",
    "CodeTestsVerifier",
    "Reward",
    "TestOutcome",
    "arun_code_tests",
    "code_io_scorer",
    "code_tests_scorer",
    "extract_code",
    "plan_test",
    "run_code_tests",
]
