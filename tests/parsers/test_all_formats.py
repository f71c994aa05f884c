"""What every action format promises, checked on each built-in format.

Round trips (``format_call``/``format_answer`` then ``parse``), robustness (any text gives a well-formed
``ParsedAction``; adversarial megabyte inputs parse in linear time), reasoning stripping, and the
instructions.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolgym.core.types import ParsedAction, ToolCall
from toolgym.parsers import PARSERS, ActionParser, make_parser
from toolgym.parsers.base import EXAMPLE_ANSWER, MAX_ACTION_CHARS
from toolgym.testing.complexity import cost_ratio

# -- strategies --------------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
arguments = st.dictionaries(st.text(max_size=8), json_values, max_size=4)

#: answers without surrounding whitespace, newlines or "<" (so no tags): every format returns them unchanged
plain_answers = st.text(
    alphabet=st.characters(blacklist_characters="<\n\r", blacklist_categories=("Cs",)), max_size=40
).map(str.strip)

#: pieces of every format's syntax, to build near-miss inputs
MARKERS = [
    "<calculator>",
    "</calculator>",
    "<python>",
    "</python>",
    "<lookup>",
    "<tool>",
    "</tool>",
    "<answer>",
    "</answer>",
    "<think>",
    "</think>",
    "<teleport>",
    "</teleport>",
    "<tool_call>",
    "</tool_call>",
    '{"name": "calculator", "arguments": ',
    '{"name": "teleport"',
    '"arguments": "{',
    '{"answer": ',
    '{"',
    "{",
    "}",
    "[",
    "]",
    '"',
    ",",
    ":",
    "\\",
    "Thought: ",
    "Action: ",
    "Action: calculator\n",
    "Action Input: ",
    "Final Answer: ",
    "Observation: ",
    "\n",
    " ",
    "```python\n",
    "```py\n",
    "```search\n",
    "```lookup\n",
    "```\n",
    "```output\n",
    "2+2",
    "null",
    "1e999",
]
near_misses = st.lists(st.sampled_from(MARKERS) | st.text(max_size=6), max_size=30).map("".join)


@st.composite
def calls_for(draw, parser: ActionParser) -> ToolCall:
    """A call to one of the parser's tools: a bare body for its primary argument, or any JSON arguments."""
    name = draw(st.sampled_from(sorted(parser.tools)))
    primary = parser.tools[name].primary_arg
    if primary is not None and draw(st.booleans()):
        return ToolCall(name=name, arguments={primary: draw(st.text() | near_misses)})
    return ToolCall(name=name, arguments=draw(arguments))


def assert_well_formed(parser: ActionParser, action: ParsedAction) -> None:
    assert isinstance(action, ParsedAction)
    if action.kind == "invalid":
        assert isinstance(action.reason, str) and action.reason.strip()
        assert "internal parser error" not in action.reason
    elif action.kind == "tool_calls":
        assert action.tool_calls
        for call in action.tool_calls:
            assert call.name in parser.tools
            assert isinstance(call.arguments, dict)
    else:
        assert isinstance(action.answer, str)


# -- round trips -------------------------------------------------------------------------------------------


@given(data=st.data())
def test_format_call_round_trips(parser, data):
    call = data.draw(calls_for(parser))
    assert parser.parse(parser.format_call(call)) == ParsedAction.calls(call)


@given(data=st.data())
def test_format_calls_round_trips_several_calls(parser, data):
    size = 3 if parser.supports_multiple_calls else 1
    calls = data.draw(st.lists(calls_for(parser), min_size=1, max_size=size))
    assert parser.parse(parser.format_calls(calls)) == ParsedAction.calls(*calls)


@given(answer=plain_answers)
def test_format_answer_round_trips(parser, answer):
    assert parser.parse(parser.format_answer(answer)) == ParsedAction.final(answer)


@pytest.mark.parametrize("answer", ["a < b", "x >= 3", "<b>bold</b>", "42", "Paris, France", "λ = 2π"])
def test_answers_with_markup_characters_round_trip(parser, answer):
    assert parser.parse(parser.format_answer(answer)) == ParsedAction.final(answer)


def test_only_react_refuses_several_calls(parser):
    calls = [ToolCall(name="calculator", arguments={"expression": "1"})] * 2
    if parser.name == "react":
        assert not parser.supports_multiple_calls
        with pytest.raises(ValueError, match="one tool call per turn"):
            parser.format_calls(calls)
    else:
        assert parser.parse(parser.format_calls(calls)) == ParsedAction.calls(*calls)


# -- robustness --------------------------------------------------------------------------------------------


@settings(max_examples=200)
@given(text=st.text() | near_misses)
def test_any_text_gives_a_well_formed_action(parser, text):
    assert_well_formed(parser, parser.parse(text))


@pytest.mark.parametrize("text", ["", "   ", "\n\t \n"])
def test_blank_turn_is_invalid(parser, text):
    action = parser.parse(text)
    assert action.kind == "invalid"
    assert "empty" in action.reason


def test_non_text_is_invalid(parser):
    action = parser.parse(None)  # type: ignore[arg-type]
    assert action.kind == "invalid"
    assert "text" in action.reason


def test_text_over_the_size_limit_is_invalid(parser):
    action = parser.parse("x" * (parser.max_action_chars + 1))
    assert action.kind == "invalid"
    assert "limit" in action.reason


@pytest.mark.parametrize("fmt", [name for name, cls in PARSERS.items() if cls.supports_multiple_calls])
def test_too_many_calls_in_one_turn_is_invalid(fmt, tools):
    strict = make_parser(fmt, tools, max_calls_per_turn=2)
    calls = [ToolCall(name="calculator", arguments={"expression": str(i)}) for i in range(3)]
    action = strict.parse(strict.format_calls(calls))
    assert action.kind == "invalid"
    assert "3 tool calls" in action.reason
    assert strict.parse(strict.format_calls(calls[:2])) == ParsedAction.calls(*calls[:2])


#: (repeated unit, repeats): about a megabyte of each shape
ADVERSARIAL = {
    "open tool tags": ("<python>", 125_000),
    "open answer tags": ("<answer>", 125_000),
    "open braces": ("{", 1_000_000),
    "open brackets": ("[", 1_000_000),
    "nested objects": ('{"a":', 200_000),
    "lists of objects": ("[{", 500_000),
    "key starts": ('{"', 500_000),
    "angle brackets": ("<", 1_000_000),
    "closing starts": ("</", 500_000),
    "unclosed reasoning": ("<think>", 140_000),
    "orphan reasoning ends": ("</think>", 120_000),
    "tool_call opens": ("<tool_call>", 90_000),
    "fences": ("```python\n", 100_000),
    "backticks": ("`", 1_000_000),
    "react actions": ("Action: calculator\n", 50_000),
    "react markers on one line": ("Action Input:", 75_000),
    "indented lines": ("\n" + " " * 999, 1_000),
    "spaces": (" ", 1_000_000),
    "many small calls": ("<calculator>1</calculator>", 40_000),
}


@pytest.mark.parametrize("shape", sorted(ADVERSARIAL))
def test_adversarial_megabyte_inputs_parse_in_linear_time(parser, shape):
    """A megabyte of each shape is refused by the size limit before any format code reads it. Up to that
    limit (``MAX_ACTION_CHARS``, the most text the format code ever sees) the format code gives a
    well-formed action, and ten times the text costs at most ~20x the time (measured in this run, so a slow
    machine slows both): the limit-sized text against a tenth of it."""
    unit, count = ADVERSARIAL[shape]
    megabyte = unit * count
    default = parser.parse(megabyte)
    assert default.kind == "invalid" and "limit" in default.reason
    at_limit = unit * (MAX_ACTION_CHARS // len(unit))
    tenth = unit * (MAX_ACTION_CHARS // len(unit) // 10)
    action = parser.parse(at_limit)
    assert_well_formed(parser, action)
    assert "characters long" not in (action.reason or ""), "the format code must see the limit-sized text"
    ratio = cost_ratio(parser.parse, tenth, at_limit)
    assert ratio <= 20, f"{parser.name}: 10x the text cost {ratio:.0f}x the time on {shape!r}"


# -- reasoning ---------------------------------------------------------------------------------------------


def test_calls_inside_reasoning_are_not_executed(parser):
    call = ToolCall(name="calculator", arguments={"expression": "1+1"})
    text = f"<think>\nLet me try:\n{parser.format_call(call)}\n</think>\n\n{parser.format_answer('2')}"
    assert parser.parse(text) == ParsedAction.final("2")


def test_reasoning_before_a_call_is_dropped(parser):
    call = ToolCall(name="search", arguments={"query": "capital of France"})
    text = f"<think>{parser.format_answer('a guess')}</think>\n{parser.format_call(call)}"
    assert parser.parse(text) == ParsedAction.calls(call)


def test_reasoning_opened_by_the_prompt_ends_at_the_first_close(parser):
    """QwQ / DeepSeek-R1 templates put ``<think>`` in the prompt: the turn starts inside the reasoning."""
    call = ToolCall(name="calculator", arguments={"expression": "6*7"})
    text = f"I could answer {parser.format_answer('41')} but\n</think>\n{parser.format_call(call)}"
    assert parser.parse(text) == ParsedAction.calls(call)


def test_unclosed_leading_reasoning_is_all_reasoning(parser):
    call = ToolCall(name="calculator", arguments={"expression": "1+1"})
    action = parser.parse(f"  <think>I will call {parser.format_call(call)}")
    assert action.kind == "invalid"
    assert "reasoning" in action.reason


# -- unknown tools -----------------------------------------------------------------------------------------


def test_unknown_tool_is_invalid_and_names_the_tools(parser):
    action = parser.parse(parser.format_call(ToolCall(name="teleport", arguments={"to": "Mars"})))
    if parser.name == "markdown":
        # a fence tagged with an unknown name is just a code block in some language: no call, so an answer
        assert action.kind == "answer"
        return
    assert action.kind == "invalid"
    assert "teleport" in action.reason
    for name in parser.tools:
        assert name in action.reason


# -- instructions ------------------------------------------------------------------------------------------


def test_instructions_describe_every_tool(parser):
    text = parser.instructions()
    for tool in parser.tools.values():
        assert tool.name in text
        assert tool.description in text
        for argument in tool.parameters["properties"]:
            assert argument in text


def test_instructions_show_a_call_and_an_answer_that_parse(parser):
    text = parser.instructions()
    example = parser.example_call()
    assert example is not None and example.name == parser.primary_tool
    assert parser.format_call(example) in text
    assert parser.parse(parser.format_call(example)) == ParsedAction.calls(example)
    assert parser.format_answer(EXAMPLE_ANSWER) in text


def test_instructions_without_tools_still_teach_the_answer(parser):
    bare = make_parser(parser.name, [])
    text = bare.instructions()
    assert bare.example_call() is None
    assert bare.format_answer(EXAMPLE_ANSWER) in text
    assert bare.parse(bare.format_answer("7")) == ParsedAction.final("7")
