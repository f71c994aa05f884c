"""What env authors, tests, examples and benchmarks share: the env check kit (``check_toolenv``,
``env_check_tests``), the tiny offline model builder, scripted policies, fakes, and ``probe``
(``toolgym-debug/Probe-v0``, the env a model with random weights learns in a few steps: every trainer
adapter's learning test uses it)."""

from toolgym.testing.chat_template import CHAT_TEMPLATE
from toolgym.testing.check import CHECKS, CheckResult, EnvCheckError, EnvCheckReport, check_toolenv
from toolgym.testing.pytest_kit import env_check_tests
from toolgym.testing.tiny_model import (
    BUILDER_VERSION,
    TINY_MODEL_SPEC,
    TinyModelSpec,
    build_tiny_model,
    tiny_model_path,
)

__all__ = [
    "BUILDER_VERSION",
    "CHAT_TEMPLATE",
    "CHECKS",
    "TINY_MODEL_SPEC",
    "CheckResult",
    "EnvCheckError",
    "EnvCheckReport",
    "TinyModelSpec",
    "build_tiny_model",
    "check_toolenv",
    "env_check_tests",
    "tiny_model_path",
]
