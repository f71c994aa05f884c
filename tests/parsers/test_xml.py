"""The xml format: tool tags, the generic <tool> tag, the first-element rule, unclosed trailing tags."""

from __future__ import annotations

import pytest

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers import XmlParser, make_parser


@pytest.fixture(scope="module")
def xml(tools) -> XmlParser:
    return make_parser("xml", tools)


def calc(expression: str) -> ToolCall:
    return ToolCall(name="calculator", arguments={"expression": expression})


def search(query: str) -> ToolCall:
    return ToolCall(name="search", arguments={"query": query})


def test_a_tag_calls_its_tool_with_the_body_as_primary_argument(xml):
    assert xml.parse("<calculator>2+2</calculator>") == ParsedAction.calls(calc("2+2"))
    assert xml.parse("I will search.\n<search> capital of France </search>") == ParsedAction.calls(
        search("capital of France")
    )


def test_code_bodies_keep_their_indentation(xml):
    action = xml.parse("<python>\n    x = 1\n    print(x)\n</python>")
    assert action == ParsedAction.calls(
        ToolCall(name="python", arguments={"code": "    x = 1\n    print(x)"})
    )


def test_a_json_object_body_is_the_arguments(xml):
    action = xml.parse('<search>{"query": "q", "top_k": 5}</search>')
    assert action == ParsedAction.calls(ToolCall(name="search", arguments={"query": "q", "top_k": 5}))


def test_a_tool_without_primary_argument_needs_a_json_body(xml):
    action = xml.parse("<lookup>key</lookup>")
    assert action.kind == "invalid"
    assert "JSON object" in action.reason
    assert xml.parse('<lookup>{"key": "k", "limit": 2}</lookup>') == ParsedAction.calls(
        ToolCall(name="lookup", arguments={"key": "k", "limit": 2})
    )


def test_generic_tool_tag_routes_to_the_primary_tool(xml):
    assert xml.primary_tool == "calculator"
    assert xml.parse("<tool>3*3</tool>") == ParsedAction.calls(calc("3*3"))


def test_several_tags_are_several_calls_in_order(xml):
    text = "<calculator>1+1</calculator>\nand also\n<search>q</search><tool>2</tool>"
    assert xml.parse(text) == ParsedAction.calls(calc("1+1"), search("q"), calc("2"))


def test_an_answer_first_decides_the_turn(xml):
    assert xml.parse("<answer> 4 </answer>\n<calculator>2+2</calculator>") == ParsedAction.final("4")


def test_calls_before_the_first_answer_are_the_turn(xml):
    text = "<calculator>2+2</calculator><answer>4</answer><search>ignored</search>"
    assert xml.parse(text) == ParsedAction.calls(calc("2+2"))


def test_tags_inside_a_body_are_part_of_the_body(xml):
    text = "<python>print('<answer>no</answer>')</python>"
    assert xml.parse(text) == ParsedAction.calls(
        ToolCall(name="python", arguments={"code": "print('<answer>no</answer>')"})
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<calculator>2+2", ParsedAction.calls(calc("2+2"))),
        ("<answer> 4", ParsedAction.final("4")),
        ("<calculator>1</calculator> <search>q", ParsedAction.calls(calc("1"), search("q"))),
        ("<python>\nprint(1)\n", ParsedAction.calls(ToolCall(name="python", arguments={"code": "print(1)"}))),
    ],
)
def test_an_unclosed_trailing_tag_counts_as_closed(xml, text, expected):
    """vLLM may drop the stop string (the closing tag) from the output."""
    assert xml.parse(text) == expected


def test_an_unknown_tag_names_the_available_tools(xml):
    action = xml.parse("<teleport>Mars</teleport>")
    assert action.kind == "invalid"
    assert "teleport" in action.reason
    assert "calculator, python, search, lookup" in action.reason


def test_text_without_tags_is_invalid_and_teaches_the_format(xml):
    action = xml.parse("The answer is 4.")
    assert action.kind == "invalid"
    assert "<answer>…</answer>" in action.reason
    assert "<calculator>…</calculator>" in action.reason


def test_bodies_that_would_not_read_back_are_written_as_json(xml):
    tricky = calc("  1 + </calculator> ")
    text = xml.format_call(tricky)
    assert text.startswith("<calculator>{")
    assert xml.parse(text) == ParsedAction.calls(tricky)
    assert xml.format_call(calc("2+2")) == "<calculator>2+2</calculator>"
    code = ToolCall(name="python", arguments={"code": "x = 1\nprint(x)"})
    assert xml.format_call(code) == "<python>\nx = 1\nprint(x)\n</python>"


def test_stop_sequences_are_the_closing_tags(xml):
    assert sorted(xml.stop_sequences) == sorted(
        ["</calculator>", "</python>", "</search>", "</lookup>", "</tool>", "</answer>"]
    )
    assert xml.observation_role == "user"


def test_render_wraps_each_result_in_the_result_tag(xml, tools):
    ok = ToolResult(name="calculator", output="4")
    bad = ToolResult(name="python", status="error", output="NameError: x")
    assert xml.render([ok]) == "<output>\n4\n</output>"
    assert xml.render([ok, bad]) == "<output>\n4\n</output>\n<output>\nError: NameError: x\n</output>"
    search_r1 = make_parser("xml", tools, result_tag="information")
    assert search_r1.render([ok]) == "<information>\n4\n</information>"
    assert "<information>" in search_r1.instructions()


@pytest.mark.parametrize("name", ["answer", "think"])
def test_tools_cannot_take_reserved_tag_names(calculator, name):
    impostor = type(calculator)()
    impostor.name = name
    with pytest.raises(ValueError, match="reserves"):
        make_parser("xml", [impostor])


def test_without_tools_only_answers_are_understood(calculator):
    bare = make_parser("xml", [])
    assert bare.parse("<answer>1</answer>") == ParsedAction.final("1")
    action = bare.parse("<tool>1+1</tool>")
    assert action.kind == "invalid"
    assert "no tools" in action.reason
