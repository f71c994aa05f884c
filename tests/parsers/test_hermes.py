"""The hermes format: Qwen-style <tool_call> JSON blocks; a turn without one is the final answer."""

from __future__ import annotations

import json

import pytest

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers import HermesParser, make_parser


@pytest.fixture(scope="module")
def hermes(tools) -> HermesParser:
    return make_parser("hermes", tools)


def block(payload: str) -> str:
    return f"<tool_call>\n{payload}\n</tool_call>"


CALC = ToolCall(name="calculator", arguments={"expression": "2+2"})


def test_a_block_is_a_call(hermes):
    assert hermes.parse(block('{"name": "calculator", "arguments": {"expression": "2+2"}}')) == (
        ParsedAction.calls(CALC)
    )


def test_several_blocks_are_several_calls(hermes):
    text = (
        "Let me check both.\n"
        + block('{"name": "calculator", "arguments": {"expression": "2+2"}}')
        + "\n"
        + block('{"name": "search", "arguments": {"query": "q", "top_k": 1}}')
    )
    assert hermes.parse(text) == ParsedAction.calls(
        CALC, ToolCall(name="search", arguments={"query": "q", "top_k": 1})
    )


def test_arguments_encoded_as_a_json_string_are_accepted(hermes):
    text = block('{"name": "calculator", "arguments": "{\\"expression\\": \\"2+2\\"}"}')
    assert hermes.parse(text) == ParsedAction.calls(CALC)


@pytest.mark.parametrize(
    "payload",
    [
        '{"name": "calculator", "parameters": {"expression": "2+2"}}',
        '  {"name": "calculator", "arguments": {"expression": "2+2"}}  ',
    ],
)
def test_tolerated_variants(hermes, payload):
    assert hermes.parse(block(payload)) == ParsedAction.calls(CALC)


@pytest.mark.parametrize("arguments", ["", ', "arguments": null', ', "arguments": ""'])
def test_missing_arguments_mean_none(hermes, arguments):
    action = hermes.parse(block('{"name": "python"' + arguments + "}"))
    assert action == ParsedAction.calls(ToolCall(name="python", arguments={}))


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ('{"name": "calculator", "arguments": {"expression": }}', "Expecting value"),
        ("{'name': 'calculator'}", "Expecting property name enclosed in double quotes"),
        ('{"arguments": {"expression": "1"}}', '"name"'),
        ('{"name": 7}', '"name"'),
        ('["calculator"]', "must be a JSON object, got a list"),
        ('{"name": "calculator", "arguments": [1]}', '"arguments"'),
        ('{"name": "calculator", "arguments": "not json"}', "not valid JSON"),
    ],
)
def test_malformed_calls_are_invalid_with_the_reason(hermes, payload, expected):
    action = hermes.parse(block(payload))
    assert action.kind == "invalid"
    assert expected in action.reason


def test_one_bad_block_invalidates_the_turn_and_is_located(hermes):
    text = block('{"name": "calculator", "arguments": {}}') + block("{oops")
    action = hermes.parse(text)
    assert action.kind == "invalid"
    assert "block 2" in action.reason


def test_an_unclosed_trailing_block_counts_as_closed(hermes):
    assert hermes.parse('<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}') == (
        ParsedAction.calls(CALC)
    )


def test_unknown_tool_names_the_available_tools(hermes):
    action = hermes.parse(block('{"name": "teleport", "arguments": {}}'))
    assert action.kind == "invalid"
    assert "teleport" in action.reason and "calculator, python, search, lookup" in action.reason


def test_a_turn_without_calls_is_the_whole_text_as_answer(hermes):
    assert hermes.parse("\n  The capital is Paris.  \n") == ParsedAction.final("The capital is Paris.")


def test_the_last_answer_tag_is_the_answer(hermes):
    text = "Draft: <answer>3</answer>. Actually: <answer> 4 </answer> done."
    assert hermes.parse(text) == ParsedAction.final("4")
    assert hermes.parse("So <answer> 5") == ParsedAction.final("5")


def test_the_turn_ends_at_eos_and_results_use_the_tool_role(hermes):
    assert hermes.stop_sequences == []
    assert hermes.observation_role == "tool"


def test_render_is_plain_for_one_result_and_wrapped_for_several(hermes):
    ok = ToolResult(name="calculator", output="4")
    bad = ToolResult(name="python", status="error", output="boom")
    assert hermes.render([ok]) == "4"
    assert hermes.render([bad]) == "Error: boom"
    assert hermes.render([ok, bad]) == (
        "<tool_response>\n4\n</tool_response>\n<tool_response>\nError: boom\n</tool_response>"
    )


def test_instructions_list_the_function_schemas_in_tools_tags(hermes, tools):
    text = hermes.instructions()
    listed = text.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    assert [json.loads(line) for line in listed] == [tool.schema() for tool in tools]
    assert "<tool_call>" in text and "<answer>" in text
