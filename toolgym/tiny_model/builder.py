"""A tiny Qwen2-architecture model with random weights, built locally and deterministically.

Why it exists: tests, the demo and benchmarks need a *real* model directory (tokenizer, chat template,
safetensors weights) that transformers and vLLM load like any Hugging Face model, but our machines have no
internet at run time. So the model is built from code: a byte-level BPE tokenizer trained on an embedded
corpus (any NFC text round-trips exactly, see :func:`_train_tokenizer`) and weights drawn from a seeded
numpy generator. It writes nonsense, which is fine: it exercises the token plumbing, batching and engine
speed, while tests that need meaningful actions use scripted policies.

Choices that matter to the engines:

- ``head_dim`` is 64 (hidden 128, 2 heads): vLLM's CPU attention rejects smaller heads.
- weights are stored, and declared, as float32: numpy cannot write bfloat16, transformers then loads the
  model in full precision (stable logits for tests), and vLLM accepts float32 on CPU (with ``dtype="auto"``
  it may downcast to bfloat16 itself; pass ``dtype="float32"`` to compare logprobs exactly).
- every JSON file is written by this module, not by ``save_pretrained``: their content then does not depend
  on the installed transformers version (v5 would write a tokenizer class v4 cannot load, and the chat
  template outside ``tokenizer_config.json``), and builds are byte-identical everywhere.

Building takes a fraction of a second and is cached: :func:`tiny_model_path` names the directory after a
hash of the recipe, builds into a temporary sibling and renames it into place atomically, so concurrent
builders never see a half-written model and the loser of a race simply uses the winner's directory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toolgym.tiny_model.chat_template import CHAT_TEMPLATE
from toolgym.tiny_model.corpus import tiny_corpus
from toolgym.util.paths import cache_root

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = [
    "BUILDER_VERSION",
    "TINY_MODEL_FILES",
    "TINY_MODEL_SPEC",
    "TinyModelSpec",
    "build_tiny_model",
    "tiny_model_path",
]

log = logging.getLogger(__name__)

BUILDER_VERSION = 1
"""Bump when the build changes in a way the spec does not capture; the cache dir name changes with it."""

TINY_MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
)

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = (ENDOFTEXT, IM_START, IM_END)
"""Control tokens: never produced by encoding ordinary text pieces, dropped by ``skip_special_tokens``."""
MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
"""Single-token tool markup, as in Qwen: added tokens that are *not* special, so decoding keeps them."""

# Qwen2's pre-tokenization regex: words with their leading space, single digits, punctuation runs, newlines.
_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """What decides the built files (besides corpus, template and code); hashed into the cache dir name."""

    # Tokenizer size including the added tokens, and also the embedding size: a multiple of 64 as engines
    # like, with no padding rows, because a random model samples every row and a padded id has no text.
    vocab_size: int = 1600
    # The embedded corpus is small: merging pairs seen only once is what reaches vocab_size.
    bpe_min_frequency: int = 1
    hidden_size: int = 128
    num_attention_heads: int = 2
    num_key_value_heads: int = 2
    num_hidden_layers: int = 2
    intermediate_size: int = 256
    max_position_embeddings: int = 8192
    rope_theta: float = 1_000_000.0
    rms_norm_eps: float = 1e-6
    init_std: float = 0.02
    seed: int = 20240601

    def __post_init__(self) -> None:
        if self.vocab_size % 64:
            raise ValueError(f"vocab_size must be a multiple of 64, got {self.vocab_size}")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


TINY_MODEL_SPEC = TinyModelSpec()


def tiny_model_path(cache_dir: str | Path | None = None) -> Path:
    """Return the tiny model's directory, building it first if it is not in the cache yet.

    The cache root is ``cache_dir``, else ``toolgym.util.paths.cache_root()`` (``$TOOLGYM_CACHE``, else
    ``~/.cache/toolgym``); the directory inside
    it is named after :func:`recipe_hash`, so a changed recipe never reuses a stale build.
    """
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    final = root / f"tiny-qwen2-{recipe_hash()}"
    if _is_complete(final):
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    try:
        log.info("building the tiny test model in %s", final)
        build_tiny_model(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; a shared cache must be readable by engine processes
        _publish(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already if it was renamed into place
    return final


def build_tiny_model(out_dir: str | Path) -> Path:
    """Write the model directory into ``out_dir`` (created if needed, files overwritten) and return it.

    Needs only tokenizers, numpy and safetensors (no torch, no transformers, no network).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = TINY_MODEL_SPEC
    tokenizer = _train_tokenizer(spec)
    ids = {token: _token_id(tokenizer, token) for token in SPECIAL_TOKENS}
    tokenizer.save(str(out / "tokenizer.json"))
    _write_json(out / "tokenizer_config.json", _tokenizer_config(tokenizer, spec))
    _write_json(out / "special_tokens_map.json", _special_tokens_map())
    _write_json(out / "config.json", _model_config(spec, ids))
    _write_json(out / "generation_config.json", _generation_config(ids))
    _write_weights(out / "model.safetensors", spec)
    for name in TINY_MODEL_FILES:  # readable by everyone, like any model dir (safetensors writes 0600)
        (out / name).chmod(0o644)
    return out


def recipe_hash() -> str:
    """A short hash of everything the build depends on: spec, builder version, corpus and chat template."""
    recipe = {
        "builder_version": BUILDER_VERSION,
        "spec": asdict(TINY_MODEL_SPEC),
        "corpus": tiny_corpus(),
        "chat_template": CHAT_TEMPLATE,
        "tokens": [SPECIAL_TOKENS, MARKUP_TOKENS, _SPLIT_PATTERN],
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


# --- cache -------------------------------------------------------------------------------------------------


def _is_complete(model_dir: Path) -> bool:
    return all((model_dir / name).is_file() for name in TINY_MODEL_FILES)


def _publish(tmp: Path, final: Path) -> None:
    """Rename the finished build into place; if another process got there first, keep theirs.

    ``rename`` of a directory is atomic and fails when the target is a non-empty directory, which is
    exactly the "someone else won" signal. A broken leftover (e.g. files deleted by hand) is moved aside
    and replaced once.
    """
    try:
        os.rename(tmp, final)
        return
    except OSError:
        if _is_complete(final):
            return
    broken = final.with_name(f".{final.name}.broken-{os.getpid()}")
    with contextlib.suppress(OSError):  # someone else may have moved or replaced it meanwhile
        os.rename(final, broken)
    shutil.rmtree(broken, ignore_errors=True)
    try:
        os.rename(tmp, final)
    except OSError:
        if not _is_complete(final):
            raise


# --- tokenizer ---------------------------------------------------------------------------------------------


def _train_tokenizer(spec: TinyModelSpec) -> Tokenizer:
    """Train byte-level BPE on the embedded corpus, then append the special and markup tokens.

    The pipeline is exactly the one transformers v5 rebuilds for every ``qwen2`` model (it ignores the
    pipeline in ``tokenizer.json`` and keeps only vocab and merges), so transformers 4.x and vLLM, which read
    ``tokenizer.json`` as is, produce the same ids as v5. That includes Qwen's NFC normalizer: text
    round-trips exactly when it is in NFC form, other text comes back NFC-normalized. The ByteLevel
    pre-tokenizer maps every byte to a symbol of the 256-symbol initial alphabet, so no text is ever
    unknown. Added tokens go after the learned vocabulary, as in Qwen. The trainer is deterministic (the
    tests compare builds from different processes).
    """
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    tokenizer = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size - len(SPECIAL_TOKENS) - len(MARKUP_TOKENS),
        min_frequency=spec.bpe_min_frequency,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(tiny_corpus(), trainer=trainer)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in MARKUP_TOKENS])
    if tokenizer.get_vocab_size(with_added_tokens=True) != spec.vocab_size:
        raise RuntimeError(
            f"the embedded corpus yields {tokenizer.get_vocab_size(with_added_tokens=True)} tokens, "
            f"not {spec.vocab_size}: enlarge the corpus or lower vocab_size"
        )
    return tokenizer


def _token_id(tokenizer: Tokenizer, token: str) -> int:
    """The id of a token ``_train_tokenizer`` added (a special or markup token)."""
    found = tokenizer.token_to_id(token)
    if found is None:
        raise ValueError(f"{token!r} is not in the tiny model's vocabulary")
    return found


def _tokenizer_config(tokenizer: Tokenizer, spec: TinyModelSpec) -> dict[str, Any]:
    """``tokenizer_config.json`` in the layout both transformers 4.x and 5.x (and so vLLM) read."""
    added = {}
    for token in (*SPECIAL_TOKENS, *MARKUP_TOKENS):
        added[str(tokenizer.token_to_id(token))] = {
            "content": token,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": token in SPECIAL_TOKENS,
        }
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "added_tokens_decoder": added,
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": ENDOFTEXT,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "add_prefix_space": False,
        "clean_up_tokenization_spaces": False,  # otherwise decode() would rewrite " ." to "." etc.
        "split_special_tokens": False,
        "errors": "replace",
        "model_max_length": spec.max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }


def _special_tokens_map() -> dict[str, Any]:
    return {
        "additional_special_tokens": [IM_START, IM_END],
        "bos_token": ENDOFTEXT,
        "eos_token": IM_END,
        "pad_token": ENDOFTEXT,
    }


# --- model -------------------------------------------------------------------------------------------------


def _model_config(spec: TinyModelSpec, ids: dict[str, int]) -> dict[str, Any]:
    """``config.json`` for ``Qwen2ForCausalLM``; rope is given in both the v4 and the v5 spelling."""
    return {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": spec.vocab_size,
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": spec.rms_norm_eps,
        "rope_theta": spec.rope_theta,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": spec.rope_theta},
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": spec.num_hidden_layers,
        "attention_dropout": 0.0,
        "initializer_range": spec.init_std,
        "tie_word_embeddings": True,
        "use_cache": True,
        "torch_dtype": "float32",
        "dtype": "float32",
        "bos_token_id": ids[ENDOFTEXT],
        "eos_token_id": ids[IM_END],
        "pad_token_id": ids[ENDOFTEXT],
    }


def _generation_config(ids: dict[str, int]) -> dict[str, Any]:
    """Token ids only: sampling defaults here would silently change vLLM's defaults for every request."""
    return {
        "bos_token_id": ids[ENDOFTEXT],
        "eos_token_id": [ids[IM_END], ids[ENDOFTEXT]],
        "pad_token_id": ids[ENDOFTEXT],
    }


def _weight_shapes(spec: TinyModelSpec) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes exactly as in ``Qwen2ForCausalLM`` (``lm_head`` is tied, so absent)."""
    h, i = spec.hidden_size, spec.intermediate_size
    q, kv = spec.num_attention_heads * spec.head_dim, spec.num_key_value_heads * spec.head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (spec.vocab_size, h)}
    for layer in range(spec.num_hidden_layers):
        p = f"model.layers.{layer}."
        shapes |= {
            p + "input_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.q_proj.bias": (q,),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.k_proj.bias": (kv,),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.v_proj.bias": (kv,),
            p + "self_attn.o_proj.weight": (h, q),
            p + "post_attention_layernorm.weight": (h,),
            p + "mlp.gate_proj.weight": (i, h),
            p + "mlp.up_proj.weight": (i, h),
            p + "mlp.down_proj.weight": (h, i),
        }
    shapes["model.norm.weight"] = (h,)
    return shapes


def _write_weights(path: Path, spec: TinyModelSpec) -> None:
    """Matrices ~ N(0, init_std), biases 0, norm scales 1; drawn in a fixed order from one seeded rng."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(spec.seed)
    tensors = {}
    for name, shape in _weight_shapes(spec).items():
        if name.endswith("norm.weight"):
            tensors[name] = np.ones(shape, dtype=np.float32)
        elif name.endswith(".bias"):
            tensors[name] = np.zeros(shape, dtype=np.float32)
        else:
            tensors[name] = rng.standard_normal(shape, dtype=np.float32) * np.float32(spec.init_std)
    save_file(tensors, str(path), metadata={"format": "pt"})


# --- helpers -----------------------------------------------------------------------------------------------


def _write_json(path: Path, obj: dict[str, Any]) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n", encoding="utf-8")
