"""The markdown format: fenced code blocks are calls; <answer> or a turn without blocks is the answer."""

from __future__ import annotations

import pytest

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers import MarkdownParser, make_parser


@pytest.fixture(scope="module")
def md(tools) -> MarkdownParser:
    return make_parser("markdown", tools)


def code(source: str, tool: str = "python") -> ToolCall:
    return ToolCall(name=tool, arguments={"code": source})


@pytest.mark.parametrize("language", ["python", "py", "Python", "python3", "python title='x.py'"])
def test_a_python_block_calls_the_code_tool(md, language):
    text = f"Let me run it.\n```{language}\nprint(1)\n```\n"
    assert md.parse(text) == ParsedAction.calls(code("print(1)"))


def test_indentation_inside_a_block_is_kept(md):
    text = "```python\n    x = 1\n\nif x:\n    print(x)\n```"
    assert md.parse(text) == ParsedAction.calls(code("    x = 1\n\nif x:\n    print(x)"))


def test_several_blocks_are_several_calls(md):
    text = "```python\na = 1\n```\nthen\n```py\nprint(a)\n```"
    assert md.parse(text) == ParsedAction.calls(code("a = 1"), code("print(a)"))


def test_a_block_tagged_with_a_tool_name_calls_that_tool(md):
    assert md.parse("```search\ncapital of France\n```") == ParsedAction.calls(
        ToolCall(name="search", arguments={"query": "capital of France"})
    )


def test_blocks_in_other_languages_are_text(md):
    text = "Run this:\n```bash\nls\n```"
    assert md.parse(text) == ParsedAction.final(text)


def test_a_turn_without_blocks_is_the_answer(md):
    assert md.parse("  It is 4.  ") == ParsedAction.final("It is 4.")
    assert md.parse("So: <answer> 4 </answer> done") == ParsedAction.final("4")


def test_an_answer_before_any_block_decides(md):
    text = "<answer>4</answer>\n```python\nprint(4)\n```"
    assert md.parse(text) == ParsedAction.final("4")


def test_blocks_before_the_answer_are_the_calls(md):
    text = "```python\nprint(4)\n```\n<answer>4</answer>\n```python\nprint(5)\n```"
    assert md.parse(text) == ParsedAction.calls(code("print(4)"))


def test_an_answer_tag_inside_a_block_is_code(md):
    text = "```python\nprint('<answer>1</answer>')\n```"
    assert md.parse(text) == ParsedAction.calls(code("print('<answer>1</answer>')"))


@pytest.mark.parametrize("text", ["```python\nprint(1)\n", "```python\nprint(1)\n```\n```output"])
def test_an_unclosed_or_stopped_block_at_the_end_counts(md, text):
    assert md.parse(text) == ParsedAction.calls(code("print(1)"))


def test_python_blocks_go_to_the_primary_tool_without_a_python_tool(calculator, search_tool):
    md = make_parser("markdown", [calculator, search_tool])
    assert md.code_tool == "calculator"
    assert md.parse("```python\n2+2\n```") == ParsedAction.calls(
        ToolCall(name="calculator", arguments={"expression": "2+2"})
    )


def test_without_tools_blocks_are_text():
    md = make_parser("markdown", [])
    text = "```python\nprint(1)\n```"
    assert md.parse(text) == ParsedAction.final(text)


def test_a_tool_without_primary_argument_needs_a_json_block(md):
    action = md.parse("```lookup\nkey\n```")
    assert action.kind == "invalid"
    assert "JSON object" in action.reason


def test_output_blocks_and_stop_sequence(md):
    assert md.stop_sequences == ["```output"]
    assert md.observation_role == "user"
    ok = ToolResult(name="python", output="4")
    bad = ToolResult(name="python", status="error", output="boom")
    assert md.render([ok]) == "```output\n4\n```"
    assert md.render([ok, bad]) == "```output\n4\n```\n```output\nError: boom\n```"


def test_format_call_writes_a_block_tagged_with_the_tool(md):
    assert md.format_call(code("print(1)")) == "```python\nprint(1)\n```"
