"""What env authors, tests, examples and benchmarks share: the env check kit (``check_toolenv``,
``env_check_tests``), scripted policies, fakes, ``probe`` (``toolgym-debug/Probe-v0``, the env a model with
random weights learns in a few steps: every trainer adapter's learning test uses it), and the tiny offline
model's two functions (``tiny_model_path``, ``build_tiny_model``), re-exported from ``toolgym.tiny_model``
(product code, in the bottom layer, where its other names are)."""

from toolgym.testing.check import CHECKS, CheckResult, EnvCheckError, EnvCheckReport, check_toolenv
from toolgym.testing.pytest_kit import env_check_tests
from toolgym.tiny_model import build_tiny_model, tiny_model_path

__all__ = [
    "CHECKS",
    "CheckResult",
    "EnvCheckError",
    "EnvCheckReport",
    "build_tiny_model",
    "check_toolenv",
    "env_check_tests",
    "tiny_model_path",
]
