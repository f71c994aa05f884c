"""The tiny offline model: a Qwen2-architecture model with random weights, built locally and deterministically
(``builder``: the tokenizer trained on ``corpus``, the weights, the ``chat_template``).

Product code, not a test fixture: ``--model tiny`` and ``make_renderer("tiny")`` load it, so it sits in the
bottom layer where the rollout code can reach it. ``toolgym.testing`` re-exports its public names.
"""

from toolgym.tiny_model.builder import (
    BUILDER_VERSION,
    TINY_MODEL_FILES,
    TINY_MODEL_SPEC,
    TinyModelSpec,
    build_tiny_model,
    tiny_model_path,
)
from toolgym.tiny_model.chat_template import CHAT_TEMPLATE

__all__ = [
    "BUILDER_VERSION",
    "CHAT_TEMPLATE",
    "TINY_MODEL_FILES",
    "TINY_MODEL_SPEC",
    "TinyModelSpec",
    "build_tiny_model",
    "tiny_model_path",
]
