"""The shared machinery in parsers/base.py: reasoning stripping, trimming, markup-safe JSON, the guards."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers import ActionParser, InvalidAction, make_parser, strip_reasoning
from toolgym.parsers.base import to_json, trim_body
from toolgym.tools.base import Tool


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>a <b>c</b></think>after", "after"),
        ("x<think>1</think>y<think>2</think>z", "xyz"),
        ("reasoning done</think>\nafter", "\nafter"),
        ("  <think>still thinking <answer>1</answer>", "  "),
        ("<think>a</think>\n<think>b <answer>1</answer>", "\n"),
        ("text then <think>unclosed", "text then <think>unclosed"),
        ("a </think> b </think> c", " b </think> c"),
        ("plain text", "plain text"),
    ],
)
def test_strip_reasoning(text, expected):
    assert strip_reasoning(text) == expected


@given(text=st.text() | st.lists(st.sampled_from(["<think>", "</think>", "x", " ", "\n"])).map("".join))
def test_no_closed_reasoning_block_survives(text):
    stripped = strip_reasoning(text)
    opening = stripped.find("<think>")
    assert opening == -1 or "</think>" not in stripped[opening:]
    if "<think>" not in text and "</think>" not in text:
        assert stripped == text


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("  2+2  ", "2+2"),
        ("\n\n    x = 1\n    y = 2\n\n", "    x = 1\n    y = 2"),
        ("\n  \n  indented\n", "  indented"),
        (" \t", ""),
        ("a\n  b", "a\n  b"),
    ],
)
def test_trim_body_drops_blank_lines_but_keeps_indentation(body, expected):
    assert trim_body(body) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(value=json_values)
def test_to_json_reads_back_and_cannot_close_a_tag(value):
    text = to_json(value)
    assert json.loads(text) == value
    assert "</" not in text and "<think>" not in text


def test_to_json_keeps_ordinary_text_readable():
    assert to_json({"code": "if x < 3: print('é')"}) == '{"code": "if x < 3: print(\'é\')"}'


class _Scripted(ActionParser):
    """A parser whose _parse does what the test tells it, to test the guards around it."""

    name = "scripted"

    def __init__(self, tools, behaviour, **kwargs):
        super().__init__(tools, **kwargs)
        self.behaviour = behaviour

    @property
    def stop_sequences(self):
        return []

    def instructions(self):
        return ""

    def _parse(self, text):
        return self.behaviour(text)

    def format_call(self, call):
        return ""

    def format_answer(self, answer):
        return answer


def _raise(exc):
    def behaviour(text):
        raise exc

    return behaviour


def test_invalid_action_raised_by_format_code_becomes_its_reason():
    parser = _Scripted([], _raise(InvalidAction("bad tag")))
    assert parser.parse("x") == ParsedAction.invalid("bad tag")


@pytest.mark.parametrize(
    ("exc", "expected"),
    [(KeyError("k"), "internal parser error (KeyError)"), (RecursionError(), "nested too deeply")],
)
def test_unexpected_errors_in_format_code_never_escape(exc, expected):
    action = _Scripted([], _raise(exc)).parse("x")
    assert action.kind == "invalid"
    assert expected in action.reason


def test_format_code_sees_the_text_without_reasoning():
    seen = []
    parser = _Scripted([], lambda text: seen.append(text) or ParsedAction.final(text))
    assert parser.parse("<think>hmm</think>42") == ParsedAction.final("42")
    assert seen == ["42"]


def test_only_reasoning_is_invalid_and_says_so():
    parser = _Scripted([], lambda text: pytest.fail("format code must not run"))
    action = parser.parse("<think>all thought, no action</think>\n")
    assert action.kind == "invalid"
    assert "only reasoning" in action.reason


def test_default_render_marks_errors_and_names_several_results():
    parser = _Scripted([], lambda text: ParsedAction.final(text))
    ok = ToolResult(name="calculator", output="4")
    bad = ToolResult(name="python", status="infra_error", output="sandbox down")
    assert parser.render([ok]) == "4"
    assert parser.render([ok, bad]) == (
        '<output name="calculator">\n4\n</output>\n<output name="python">\nError: sandbox down\n</output>'
    )
    assert parser.render_invalid("no tag") == "Invalid action: no tag"


def test_example_call_uses_the_schema_examples(calculator):
    class DocumentedArgs(BaseModel):
        expression: str = Field(examples=["(1+2)*3"])
        precision: int = 4

    class Documented(type(calculator)):
        Args = DocumentedArgs

    xml = make_parser("xml", [Documented()])
    assert xml.example_call() == ToolCall(name="calculator", arguments={"expression": "(1+2)*3"})
    assert "<calculator>(1+2)*3</calculator>" in xml.instructions()


def test_example_call_fills_required_arguments_by_type(lookup_tool):
    parser = make_parser("json", [lookup_tool])
    assert parser.example_call() == ToolCall(name="lookup", arguments={"key": "your key here", "limit": 1})


def test_tools_are_bound_by_name_and_the_first_is_primary(tools):
    parser = make_parser("xml", tools)
    assert list(parser.tools) == [t.name for t in tools]
    assert parser.primary_tool == tools[0].name
    assert isinstance(parser.tools["python"], Tool)
