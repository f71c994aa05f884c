"""The json format: the first JSON value of a call or answer shape, bare, fenced or in prose."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers import JsonParser, make_parser

CALC = ToolCall(name="calculator", arguments={"expression": "2+2"})
CALC_JSON = '{"name": "calculator", "arguments": {"expression": "2+2"}}'


@pytest.fixture(scope="module")
def as_json(tools) -> JsonParser:
    return make_parser("json", tools)


@pytest.mark.parametrize(
    "text",
    [
        CALC_JSON,
        f"```json\n{CALC_JSON}\n```",
        f"I will compute it: {CALC_JSON} and then report.",
        f"Config {{ not json }} and {{'single': 'quotes'}} first, then {CALC_JSON}",
        '{"name": "calculator", "arguments": "{\\"expression\\": \\"2+2\\"}"}',
    ],
)
def test_a_call_object_is_found_wherever_it_is(as_json, text):
    assert as_json.parse(text) == ParsedAction.calls(CALC)


def test_a_list_of_call_objects_is_several_calls(as_json):
    text = f'[{CALC_JSON}, {{"name": "search", "arguments": {{"query": "q"}}}}]'
    assert as_json.parse(text) == ParsedAction.calls(CALC, ToolCall(name="search", arguments={"query": "q"}))
    assert as_json.format_calls([CALC, CALC]).startswith("[")


def test_json_of_another_shape_is_skipped(as_json):
    assert as_json.parse(f'Given {{"x": 1}} and [{{"y": 2}}], call {CALC_JSON}') == ParsedAction.calls(CALC)


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ('{"answer": "Paris"}', "Paris"),
        ('{"answer": "  spaced  "}', "  spaced  "),
        ('{"answer": 42}', "42"),
        ('{"answer": 2.5}', "2.5"),
        ('{"answer": [1, 2]}', "[1, 2]"),
        ('{"answer": {"a": "é"}}', '{"a": "é"}'),
        ('{"answer": null}', "null"),
        ('Done! ```json\n{"answer": "4"}\n```', "4"),
    ],
)
def test_answers_are_strings_and_other_values_their_json(as_json, text, answer):
    assert as_json.parse(text) == ParsedAction.final(answer)


@given(answer=st.text() | st.sampled_from(["<think>x</think>", "</think>", " <answer>1</answer>\n"]))
def test_any_answer_round_trips(as_json, answer):
    assert as_json.parse(as_json.format_answer(answer)) == ParsedAction.final(answer)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is 4.", "no JSON object found"),
        ('{"result": 4}', "neither a tool call nor an answer"),
        ('{"name": "calculator", "arguments": {"expression": "2+2"}', "could not be parsed"),
        ('{"a":' * 5000, "nested too deeply"),
        # valid JSON that CPython 3.13 would decode (3.11 and 3.12 give up near 1,000): our limit decides
        ('{"a":' * 150 + "1" + "}" * 150, "nested too deeply"),
        ('{"name": "teleport", "arguments": {}}', "unknown tool 'teleport'"),
        ('[{"name": "calculator"}, {"name": 3}]', '"name"'),
        ('{"name": "calculator", "arguments": 5}', '"arguments"'),
    ],
)
def test_unusable_turns_are_invalid_with_the_reason(as_json, text, expected):
    action = as_json.parse(text)
    assert action.kind == "invalid"
    assert expected in action.reason


def test_results_use_the_tool_role(as_json):
    assert as_json.observation_role == "tool"
    assert as_json.stop_sequences == []
    assert as_json.render([ToolResult(name="calculator", output="4")]) == "4"
