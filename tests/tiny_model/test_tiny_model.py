"""The tiny offline model: a real HF model dir, deterministic, cached, with a prefix-stable template."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolgym.tiny_model import builder as tiny_model
from toolgym.tiny_model.builder import (
    MARKUP_TOKENS,
    SPECIAL_TOKENS,
    TINY_MODEL_FILES,
    TINY_MODEL_SPEC,
    build_tiny_model,
    tiny_model_path,
)

transformers = pytest.importorskip("transformers")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]

# A multi-turn tool-use conversation: thinking, dict and string arguments, a group of two tool results.
CONVERSATION = [
    {"role": "system", "content": "You are a careful assistant."},
    {"role": "user", "content": "What is 12 * 34, and what is 2 ** 10?"},
    {
        "role": "assistant",
        "content": "<think>\nTwo products.\n</think>",
        "tool_calls": [
            {"type": "function", "function": {"name": "calculator", "arguments": {"expression": "12 * 34"}}},
            {
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expression": "2 ** 10"}'},
            },
        ],
    },
    {"role": "tool", "content": "408"},
    {"role": "tool", "content": "1024"},
    {"role": "assistant", "content": "<think>\nDone.\n</think>\n<answer>408, 1024</answer>"},
    {"role": "user", "content": "And 7 + 8? 😀"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"name": "calculator", "arguments": {"expression": "7 + 8"}}],
    },
    {"role": "tool", "content": "15"},
    {"role": "assistant", "content": "<answer>15</answer>"},
]

EXPECTED = (
    "<|im_start|>system\nYou are a careful assistant.\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    + json.dumps(TOOLS[0], ensure_ascii=False)
    + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\nWhat is 12 * 34, and what is 2 ** 10?<|im_end|>\n"
    "<|im_start|>assistant\n<think>\nTwo products.\n</think>\n"
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "12 * 34"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "calculator", "arguments": {"expression": "2 ** 10"}}\n</tool_call><|im_end|>\n'
    "<|im_start|>user\n<tool_response>\n408\n</tool_response>\n<tool_response>\n1024\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n<think>\nDone.\n</think>\n<answer>408, 1024</answer><|im_end|>\n"
    "<|im_start|>user\nAnd 7 + 8? 😀<|im_end|>\n"
    '<|im_start|>assistant\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "7 + 8"}}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n15\n</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n<answer>15</answer><|im_end|>\n"
)


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    return tiny_model_path(tmp_path_factory.mktemp("toolgym-cache"))


@pytest.fixture(scope="session")
def tokenizer(model_dir):
    return transformers.AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="session")
def raw_tokenizer(model_dir):
    """``tokenizer.json`` read directly by the tokenizers library, as transformers 4.x and vLLM read it."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(model_dir / "tokenizer.json"))


@pytest.fixture(scope="session")
def model_and_info(model_dir):
    pytest.importorskip("torch")
    return transformers.AutoModelForCausalLM.from_pretrained(model_dir, output_loading_info=True)


def _json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _render(tokenizer, messages, **kwargs) -> str:
    return tokenizer.apply_chat_template(messages, tools=TOOLS, tokenize=False, **kwargs)


def _file_bytes(model_dir: Path) -> dict[str, bytes]:
    return {name: (model_dir / name).read_bytes() for name in TINY_MODEL_FILES}


# --- the model directory ----------------------------------------------------------------------------------


def test_model_dir_is_a_complete_qwen2_checkpoint(model_dir):
    assert sorted(p.name for p in model_dir.iterdir()) == sorted(TINY_MODEL_FILES)
    config = _json(model_dir / "config.json")
    assert config["architectures"] == ["Qwen2ForCausalLM"] and config["model_type"] == "qwen2"
    assert config["hidden_size"] // config["num_attention_heads"] == config["head_dim"] == 64
    assert config["hidden_size"] == 128 and config["num_hidden_layers"] == 2
    assert config["max_position_embeddings"] == 8192  # rollouts run to a few thousand tokens
    assert config["tie_word_embeddings"] is True and config["torch_dtype"] == config["dtype"] == "float32"
    assert config["vocab_size"] % 64 == 0
    assert "chat_template" in _json(model_dir / "tokenizer_config.json")


def test_token_ids_agree_across_config_generation_config_and_tokenizer(model_dir, tokenizer):
    config, generation = _json(model_dir / "config.json"), _json(model_dir / "generation_config.json")
    endoftext, im_end = tokenizer.convert_tokens_to_ids(["<|endoftext|>", "<|im_end|>"])
    assert tokenizer.eos_token_id == config["eos_token_id"] == generation["eos_token_id"][0] == im_end
    assert tokenizer.pad_token_id == config["pad_token_id"] == generation["pad_token_id"] == endoftext
    assert tokenizer.bos_token_id == config["bos_token_id"] == generation["bos_token_id"] == endoftext
    assert generation["eos_token_id"] == [im_end, endoftext]
    # no sampling defaults: vLLM would apply them to every request
    assert set(generation) == {"bos_token_id", "eos_token_id", "pad_token_id"}


def test_tokenizer_size_equals_embedding_size(model_dir, tokenizer):
    """No embedding row without a token: a random model samples every id, so each must decode."""
    assert len(tokenizer) == _json(model_dir / "config.json")["vocab_size"] == TINY_MODEL_SPEC.vocab_size
    assert 1000 <= len(tokenizer) <= 2000


def test_special_tokens_are_control_tokens_and_markup_tokens_are_kept_on_decode(tokenizer):
    for token in (*SPECIAL_TOKENS, *MARKUP_TOKENS):
        assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
    assert set(SPECIAL_TOKENS) <= set(tokenizer.all_special_tokens)
    assert not set(MARKUP_TOKENS) & set(tokenizer.all_special_tokens)
    text = "<|im_start|>assistant\n<think>\nhm\n</think>\n<tool_call>\n{}\n</tool_call><|im_end|>"
    ids = tokenizer.encode(text)  # default add_special_tokens=True must not add a BOS either
    assert ids == tokenizer.encode(text, add_special_tokens=False)
    assert (
        tokenizer.decode(ids, skip_special_tokens=True)
        == "assistant\n<think>\nhm\n</think>\n<tool_call>\n{}\n</tool_call>"
    )


def test_common_text_is_compressed(tokenizer):
    """The BPE merges work: a sentence from the training domain takes far fewer tokens than bytes."""
    text = "The answer is 42. <answer>42</answer> def add(a, b): return a + b"
    assert len(tokenizer.encode(text)) < len(text.encode()) / 2


# --- unicode round-trip -----------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8")))  # every code point but surrogates
@example(text="👩‍👩‍👧 emoji 🎉, CJK 你好世界, 日本語, 한국어, العربية, עברית")
@example(text="\x00\x01\x1b[31mred\x1b[0m\r\n\t\x7f\u200b\ufeff\U0010ffff")
@example(text="   leading, trailing   \n\n\n  ")
@example(text="<tool_call>{}</tool_call><|im_end|><|endoftext|>")
@example(text="e\u0301 A\u030a \u212b")  # not NFC: comes back composed
def test_any_text_round_trips_up_to_nfc(tokenizer, text):
    """Byte-level BPE loses nothing; the only change is Qwen's NFC normalization (see ``_train_tokenizer``).

    The tokenizer's own NFC is the reference: Python's ``unicodedata`` may know an older Unicode version.
    """
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(
        ids, skip_special_tokens=False
    ) == tokenizer.backend_tokenizer.normalizer.normalize_str(text)


def test_non_nfc_text_comes_back_composed(tokenizer):
    ids = tokenizer.encode("cafe\u0301 \u212b", add_special_tokens=False)
    assert tokenizer.decode(ids) == "caf\u00e9 \u00c5" == unicodedata.normalize("NFC", "cafe\u0301 \u212b")


@settings(max_examples=100, deadline=None)
@given(text=st.text(alphabet=st.characters(codec="utf-8")).map(lambda s: unicodedata.normalize("NFC", s)))
@example(text="Grüße, café, naïve — “quotes” … ½ ≠ ∞")
def test_nfc_text_round_trips_exactly_and_tokenizer_json_agrees_with_transformers(
    raw_tokenizer, tokenizer, text
):
    """v5 rebuilds qwen2 tokenizers from vocab+merges; v4 (and vLLM on v4) reads tokenizer.json."""
    raw = raw_tokenizer
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert raw.encode(text).ids == ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    assert raw.decode(ids, skip_special_tokens=False) == text


# --- transformers loading ---------------------------------------------------------------------------------


def test_loads_in_transformers_with_exactly_the_expected_weights(model_dir, model_and_info):
    from safetensors.numpy import load_file

    model, info = model_and_info
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert not info["error_msgs"]
    stored = load_file(str(model_dir / "model.safetensors"))
    state = model.state_dict()
    assert set(stored) | {"lm_head.weight"} == set(state)
    for name, array in stored.items():
        assert (state[name].numpy() == array).all(), name
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # tied


def test_attention_has_head_dim_64(model_and_info):
    model, _ = model_and_info
    attn = model.model.layers[0].self_attn
    assert model.config.head_dim == attn.head_dim == 64
    assert attn.q_proj.out_features == model.config.num_attention_heads * 64


def test_forward_and_generate_run(model_and_info, tokenizer):
    import torch

    model, _ = model_and_info
    prompt = tokenizer.apply_chat_template(
        CONVERSATION[:2], tools=TOOLS, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    with torch.no_grad():
        logits = model(**prompt).logits
    assert logits.shape == (1, prompt["input_ids"].shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()
    out = model.generate(**prompt, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    new = out[0, prompt["input_ids"].shape[1] :]
    assert out[0, : prompt["input_ids"].shape[1]].tolist() == prompt["input_ids"][0].tolist()
    assert len(new) == 4 and all(0 <= i < len(tokenizer) for i in new.tolist())
    assert isinstance(tokenizer.decode(new), str)


# --- determinism ------------------------------------------------------------------------------------------


def test_two_builds_are_byte_identical(tmp_path, model_dir):
    first, second = build_tiny_model(tmp_path / "a"), build_tiny_model(tmp_path / "b")
    assert _file_bytes(first) == _file_bytes(second) == _file_bytes(model_dir)


def test_building_does_not_need_torch(tmp_path):
    """Builds happen in CPU-only tool processes and CI steps; torch is only for loading the model."""
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError
        "from toolgym.tiny_model.builder import build_tiny_model\n"
        f"build_tiny_model({str(tmp_path / 'm')!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=tmp_path)
    assert all((tmp_path / "m" / name).is_file() for name in TINY_MODEL_FILES)


# --- the cache --------------------------------------------------------------------------------------------


def test_second_call_reuses_the_cached_dir(tmp_path, monkeypatch):
    first = tiny_model_path(tmp_path)
    mtimes = {p.name: p.stat().st_mtime_ns for p in first.iterdir()}

    def must_not_build(out_dir):
        raise AssertionError("rebuilt although the model was cached")

    monkeypatch.setattr(tiny_model, "build_tiny_model", must_not_build)
    assert tiny_model_path(tmp_path) == first
    assert {p.name: p.stat().st_mtime_ns for p in first.iterdir()} == mtimes


def test_cache_dir_name_follows_the_recipe(tmp_path, monkeypatch):
    first = tiny_model_path(tmp_path)
    assert first.parent == tmp_path and first.name == f"tiny-qwen2-{tiny_model.recipe_hash()}"
    monkeypatch.setattr(tiny_model, "BUILDER_VERSION", tiny_model.BUILDER_VERSION + 1)
    second = tiny_model_path(tmp_path)
    assert second != first and second.is_dir() and first.is_dir()


def test_default_cache_root_is_toolgym_cache_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLGYM_CACHE", str(tmp_path / "env"))
    assert tiny_model_path().parent == tmp_path / "env"
    monkeypatch.delenv("TOOLGYM_CACHE")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert tiny_model_path().parent == tmp_path / "home" / ".cache" / "toolgym"


def test_a_build_that_loses_the_race_uses_the_winners_dir(tmp_path, monkeypatch):
    real_build = tiny_model.build_tiny_model
    final = tmp_path / f"tiny-qwen2-{tiny_model.recipe_hash()}"

    def build_while_another_process_wins(out_dir):
        real_build(final)  # the other process publishes first
        (final / "winner").write_text("")
        return real_build(out_dir)

    monkeypatch.setattr(tiny_model, "build_tiny_model", build_while_another_process_wins)
    assert tiny_model_path(tmp_path) == final
    assert (final / "winner").exists()
    assert [p.name for p in tmp_path.iterdir()] == [final.name]  # the loser's temp dir is gone


def test_a_broken_cached_dir_is_replaced(tmp_path, model_dir):
    final = tmp_path / model_dir.name
    final.mkdir()
    (final / "config.json").write_text("{}")  # e.g. the other files were deleted by hand
    assert tiny_model_path(tmp_path) == final
    assert _file_bytes(final) == _file_bytes(model_dir)
    assert [p.name for p in tmp_path.iterdir()] == [final.name]


# Spawned workers cannot import this test module (importlib mode), so the worker lives in a helper file.
_LOCKSTEP_WORKER = """
from toolgym.tiny_model import builder as tiny_model


def build_in_lockstep(args):
    cache_dir, barrier = args
    publish = tiny_model._publish

    def publish_once_both_have_built(tmp, final):
        barrier.wait(timeout=60)
        publish(tmp, final)

    tiny_model._publish = publish_once_both_have_built
    return tiny_model.tiny_model_path(cache_dir)
"""


def test_concurrent_builds_in_two_processes_leave_one_valid_dir(tmp_path, model_dir, monkeypatch):
    """Both processes build, then both publish at once; one wins, the other uses its dir.

    Also checks determinism across processes (the Rust BPE trainer's hash seeds differ per process).
    """
    (tmp_path / "helper").mkdir()
    (tmp_path / "helper" / "tiny_lockstep_worker.py").write_text(_LOCKSTEP_WORKER)
    monkeypatch.syspath_prepend(str(tmp_path / "helper"))  # spawned children inherit sys.path
    worker = importlib.import_module("tiny_lockstep_worker")
    cache = tmp_path / "cache"
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, context.Pool(2) as pool:
        barrier = manager.Barrier(2)
        paths = pool.map(worker.build_in_lockstep, [(cache, barrier)] * 2)
    assert paths[0] == paths[1]
    assert [p.name for p in cache.iterdir()] == [paths[0].name]  # no temp dir left behind
    assert _file_bytes(paths[0]) == _file_bytes(model_dir)


# --- the chat template ------------------------------------------------------------------------------------


def test_template_renders_tools_tool_calls_and_grouped_tool_results(tokenizer):
    assert _render(tokenizer, CONVERSATION) == EXPECTED


def test_generation_prompt_opens_an_assistant_turn(tokenizer):
    messages = [{"role": "user", "content": "hi"}]
    plain = tokenizer.apply_chat_template(messages, tokenize=False)
    assert plain == "<|im_start|>user\nhi<|im_end|>\n"  # no tools, no system: no system turn
    prompted = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompted == plain + "<|im_start|>assistant\n"


def test_tools_without_system_message_and_content_parts(tokenizer):
    messages = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    rendered = _render(tokenizer, messages)
    assert rendered.startswith("<|im_start|>system\n# Tools\n\n")
    assert rendered.endswith("</tool_call><|im_end|>\n<|im_start|>user\nab<|im_end|>\n")


def test_tool_result_first_in_conversation_opens_a_user_turn(tokenizer):
    rendered = tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], tokenize=False)
    assert rendered == "<|im_start|>user\n<tool_response>\nx\n</tool_response><|im_end|>\n"


def _boundaries(messages) -> list[int]:
    """Every k where messages[:k] ends a turn, i.e. not between two tool results that share a user turn."""
    return [
        k
        for k in range(1, len(messages))
        if not (messages[k - 1]["role"] == "tool" and messages[k]["role"] == "tool")
    ]


def test_earlier_turns_are_an_exact_string_and_token_prefix(tokenizer):
    assert _boundaries(CONVERSATION) == [1, 2, 3, 5, 6, 7, 8, 9]
    for k in _boundaries(CONVERSATION):
        shorter, longer = _render(tokenizer, CONVERSATION[:k]), _render(tokenizer, CONVERSATION[: k + 1])
        assert longer.startswith(shorter), k
        short_ids = tokenizer.encode(shorter, add_special_tokens=False)
        long_ids = tokenizer.encode(longer, add_special_tokens=False)
        assert long_ids[: len(short_ids)] == short_ids, k
    assert "<think>\nTwo products.\n</think>" in _render(tokenizer, CONVERSATION)  # earlier thinking is kept


def test_generation_prompt_plus_reply_is_a_prefix_of_the_next_render(tokenizer):
    """What the rollout relies on: prompt tokens + generated tokens reappear unchanged in the next prompt."""
    for k, message in enumerate(CONVERSATION):
        if message["role"] != "assistant":
            continue
        prompt = _render(tokenizer, CONVERSATION[:k], add_generation_prompt=True)
        full = _render(tokenizer, CONVERSATION[: k + 1])
        assert full.startswith(prompt), k
        prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
        assert tokenizer.encode(full, add_special_tokens=False)[: len(prompt_ids)] == prompt_ids, k
