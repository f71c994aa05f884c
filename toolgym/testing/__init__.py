"""What tests, examples and benchmarks share: the tiny offline model builder, scripted policies, fakes."""

from toolgym.testing.chat_template import CHAT_TEMPLATE
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
    "TINY_MODEL_SPEC",
    "TinyModelSpec",
    "build_tiny_model",
    "tiny_model_path",
]
