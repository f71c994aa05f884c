"""The shared text helpers: clipping and the JSON nesting limit every parser and tool applies."""

import json

from toolgym.util.text import MAX_JSON_DEPTH, clip_middle, json_too_deep


def nested(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_json_deeper_than_the_limit_is_too_deep_whatever_python_would_decode():
    assert not json_too_deep(nested(MAX_JSON_DEPTH))
    assert json_too_deep(nested(MAX_JSON_DEPTH + 1))
    assert json.loads(nested(MAX_JSON_DEPTH + 1))  # valid JSON: the limit is ours, not the decoder's
    assert json_too_deep("[" * 5000)  # opened and never closed


def test_brackets_inside_strings_do_not_count():
    text = json.dumps({"code": "[" * 500 + "{" * 500, "quote": '\\"[[[[' * 50})
    assert not json_too_deep(text)


def test_siblings_are_not_depth():
    flat = "[" + ",".join(["[1]"] * 10_000) + "]"
    assert not json_too_deep(flat)


def test_clip_middle_keeps_head_and_tail():
    text = "a" * 50 + "b" * 50
    clipped = clip_middle(text, 60)
    assert clipped.startswith("a") and clipped.endswith("b") and "characters cut" in clipped
    assert clip_middle("short", 60) == "short"
