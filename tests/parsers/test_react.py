"""The react format: Thought / Action / Action Input lines and Final Answer; one call per turn."""

from __future__ import annotations

import pytest

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers import ReactParser, make_parser

CALC = ToolCall(name="calculator", arguments={"expression": "2+2"})


@pytest.fixture(scope="module")
def react(tools) -> ReactParser:
    return make_parser("react", tools)


@pytest.mark.parametrize(
    "text",
    [
        "Thought: I should add.\nAction: calculator\nAction Input: 2+2",
        "Thought: add\nAction: calculator\nAction Input: 2+2\nObservation:",
        "Thought: add\nAction: calculator\nAction Input: 2+2\nObservation: 5 (made up)",
        "thought: add\n  action: `calculator`\n  action input:   2+2  ",
        'Action: [calculator]\nAction Input: {"expression": "2+2"}',
    ],
)
def test_an_action_with_its_input_is_a_call(react, text):
    assert react.parse(text) == ParsedAction.calls(CALC)


def test_a_multi_line_input_is_kept_whole(react):
    text = "Action: python\nAction Input:\nfor i in range(3):\n    print(i)\n"
    assert react.parse(text) == ParsedAction.calls(
        ToolCall(name="python", arguments={"code": "for i in range(3):\n    print(i)"})
    )


def test_final_answer(react):
    assert react.parse("Thought: I know it.\nFinal Answer: Paris\n") == ParsedAction.final("Paris")


def test_the_first_of_action_and_final_answer_decides(react):
    action_first = "Action: calculator\nAction Input: 2+2\nFinal Answer: 4"
    answer_first = "Final Answer: 4\nAction: calculator\nAction Input: 2+2"
    assert react.parse(action_first) == ParsedAction.calls(CALC)
    assert react.parse(answer_first) == ParsedAction.final("4")


def test_only_the_first_action_of_a_turn_is_taken(react):
    text = "Action: calculator\nAction Input: 2+2\nAction: search\nAction Input: q"
    assert react.parse(text) == ParsedAction.calls(CALC)


def test_markers_count_only_at_the_start_of_a_line(react):
    action = react.parse("Thought: next I write Action: calculator and Final Answer: 4")
    assert action.kind == "invalid"
    assert "Final Answer:" in action.reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Action: calculator\nThought: hmm", "must be followed by 'Action Input"),
        ("Action:\nAction Input: 2+2", "names no tool"),
        ("Action: teleport\nAction Input: Mars", "unknown tool 'teleport'; available tools: calculator"),
        ("Action: lookup\nAction Input: key", "JSON object"),
        ("I think the answer is 4.", "no 'Action:' or 'Final Answer:'"),
    ],
)
def test_unusable_turns_are_invalid_with_the_reason(react, text, expected):
    action = react.parse(text)
    assert action.kind == "invalid"
    assert expected in action.reason


def test_generation_stops_before_the_observation(react):
    assert react.stop_sequences == ["Observation:"]
    assert react.observation_role == "user"
    assert react.render([ToolResult(name="calculator", output="4")]) == "Observation: 4"
    assert (
        react.render([ToolResult(name="python", status="error", output="boom")]) == "Observation: Error: boom"
    )


def test_instructions_list_the_tool_names_for_the_action_line(react):
    assert "one of [calculator, python, search, lookup]" in react.instructions()
