"""``make_renderer("tiny")`` reads the tiny model's tokenizer without transformers (``TinyTokenizer``): it
must be the same tokenizer as transformers' on the same files, for the chat template and for any text."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.rollout.models import make_renderer
from toolgym.tiny_model import tiny_model_path
from toolgym.tiny_model.tokenizer import TinyTokenizer

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": 'Look up <tags> & "quotes" — ünïcode 中',
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "Be exact."},
    {"role": "user", "content": [{"type": "text", "text": "héllo <b> & 中 🙂"}, {"type": "image"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": {"q": "<x>"}}}
        ],
    },
    {"role": "tool", "content": "found"},
    {
        "role": "assistant",
        "content": '{"s": 1}',
        "tool_calls": [{"function": {"name": "lookup", "arguments": '{"q": 2}'}}],
    },
    {"role": "tool", "content": "a"},
    {"role": "tool", "content": "b"},
    {"role": "assistant", "content": "<think>x</think><answer>42</answer>"},
]


@pytest.fixture(scope="module")
def tokenizers():
    from transformers import AutoTokenizer

    path = tiny_model_path()
    return TinyTokenizer(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.parametrize("tools", [None, TOOLS])
@pytest.mark.parametrize("generation_prompt", [False, True])
@pytest.mark.parametrize("upto", [1, 2, 3, 5, len(CONVERSATION)])
def test_the_chat_template_renders_as_transformers_renders_it(tokenizers, tools, generation_prompt, upto):
    light, hf = tokenizers
    messages = CONVERSATION[:upto]
    kwargs = {"tools": tools, "add_generation_prompt": generation_prompt}
    assert light.apply_chat_template(messages, tokenize=False, **kwargs) == hf.apply_chat_template(
        messages, tokenize=False, **kwargs
    )
    tokenized = hf.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs)
    assert light.apply_chat_template(messages, **kwargs) == list(tokenized)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=200))
def test_encode_and_decode_are_transformers(tokenizers, text):
    light, hf = tokenizers
    ids = light.encode(text)
    assert ids == hf.encode(text, add_special_tokens=False)
    assert light.decode(ids) == hf.decode(ids, skip_special_tokens=False)
    assert light.decode(ids, skip_special_tokens=True) == hf.decode(ids, skip_special_tokens=True)
    assert light.convert_ids_to_tokens(ids) == hf.convert_ids_to_tokens(ids)


def test_special_tokens_and_lookups(tokenizers):
    light, hf = tokenizers
    for name in ("eos_token_id", "pad_token_id", "bos_token_id", "unk_token_id"):
        assert getattr(light, name) == getattr(hf, name), name
    assert light.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == hf.convert_tokens_to_ids(
        ["<|im_start|>", "<|im_end|>"]
    )
    assert light.convert_tokens_to_ids("no-such-token") == hf.convert_tokens_to_ids("no-such-token")
    assert len(light) == len(hf)


def test_make_renderer_tiny_uses_it_and_keeps_the_model_eos_ids():
    renderer = make_renderer("tiny")
    assert isinstance(renderer.tokenizer, TinyTokenizer)
    assert renderer.tokenizer.eos_token_id in renderer.eos_ids and renderer.turn_suffix == "<|im_end|>\n"
