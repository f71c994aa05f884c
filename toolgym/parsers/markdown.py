"""The ``markdown`` format: fenced code blocks are calls, as chat models write code anyway.

A ```python (or ```py) block calls the code tool (the bound tool named ``python``, else the primary tool) with
the block as its primary argument; a block tagged with another bound tool's name (```search) calls that tool
the same way, so every tool set can be used; blocks in other languages are just text. Several blocks are
several calls. The env shows results in an ```output block, and generation stops at "```output" so the model
cannot invent them.

As in the xml format, the first element decides: an ``<answer>…</answer>`` before any call block is the final
answer, and call blocks before the first ``<answer>`` are the calls. A turn with no call block is the final
answer: the ``<answer>`` content if there is one, else the whole text. An unclosed block at the end counts as
closed.

``close_anywhere=True`` reads fences as verl-tool's python tool does (``serve tools``' compatibility mode):
a block ends at the first ```` ``` ```` after its opening line wherever it stands, also mid-line
(```` print('x')``` ````), instead of at the next bare fence line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers.base import ActionParser, register_parser

ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
OUTPUT_FENCE = "```output"
_PYTHON_ALIASES = frozenset({"python", "py", "python3"})
# A fence line: ``` at the start of a line, then its info string. Linear: no nested quantifiers.
_FENCE = re.compile(r"^[ \t]*```([^\n]*)", re.MULTILINE)


@register_parser
class MarkdownParser(ActionParser):
    name = "markdown"
    observation_role = "user"

    def __init__(self, tools: Sequence[Any], *, close_anywhere: bool = False, **kwargs: Any):
        super().__init__(tools, **kwargs)
        self.close_anywhere = close_anywhere

    @property
    def code_tool(self) -> str | None:
        """The tool ```python blocks call: the one named ``python`` if bound, else the primary tool."""
        return "python" if "python" in self.tools else self.primary_tool

    @property
    def stop_sequences(self) -> list[str]:
        return [OUTPUT_FENCE]

    def _parse(self, text: str) -> ParsedAction:
        calls: list[ToolCall] = []
        pos = 0
        for start, end, info, body in _blocks(text, self.close_anywhere):
            answer = _answer_between(text, pos, start)
            if answer is not None:
                return ParsedAction.calls(*calls) if calls else ParsedAction.final(answer)
            pos = end
            tool = self._tool_for(info)
            if tool is not None:
                calls.append(self.call_from_body(tool, body))
        if calls:
            return ParsedAction.calls(*calls)
        answer = _answer_between(text, pos, len(text))
        return ParsedAction.final(answer if answer is not None else text.strip())

    def _tool_for(self, info: str) -> str | None:
        """The tool a block's info string (```python, ```search) calls, if any."""
        words = info.split(maxsplit=1)
        language = words[0] if words else ""
        if language in self.tools:
            return language
        return self.code_tool if language.lower() in _PYTHON_ALIASES else None

    def format_call(self, call: ToolCall) -> str:
        return self.format_body_call(call, lambda body: f"```{call.name}\n{body}\n```")

    def format_calls(self, calls: Sequence[ToolCall]) -> str:
        return "\n\n".join(self.format_call(c) for c in calls)

    def format_answer(self, answer: str) -> str:
        """Reads back stripped; an answer holding ``</answer>`` does not."""
        return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"

    def render(self, results: Sequence[ToolResult]) -> str:
        return "\n".join(f"{OUTPUT_FENCE}\n{self.result_text(r)}\n```" for r in results)

    def usage(self) -> str:
        if self.code_tool is None:
            return f"Give the final answer as {ANSWER_OPEN}…{ANSWER_CLOSE}."
        return (
            f"Call a tool with a fenced code block tagged with its name (```{self.code_tool} … ```), "
            f"or give the final answer as {ANSWER_OPEN}…{ANSWER_CLOSE}."
        )

    def instructions(self) -> str:
        how = (
            "To call a tool, write a fenced code block tagged with the tool's name; its content is the "
            f"tool's input. A ```python block runs `{self.code_tool}`. You may write several blocks in one "
            "turn. Each result is shown to you in an ```output block. "
            if self.tools
            else ""
        )
        return (
            f"# Tools\n\n{self.describe_tools(bare_text=True)}\n\n# How to act\n\n{how}"
            f"When you know the answer, write it inside {ANSWER_OPEN}{ANSWER_CLOSE} tags; the answer ends "
            f"the task.\n\n{self.example_section()}"
        )


def _blocks(text: str, close_anywhere: bool = False) -> Iterator[tuple[int, int, str, str]]:
    """(start, end, info string, body) of each fenced block. A block closes at the next bare ``` line (with
    ``close_anywhere``, at the next ``` anywhere); an unclosed one runs to the end. Openings and closings
    come from one pass over the text."""
    if close_anywhere:
        yield from _blocks_closed_anywhere(text)
        return
    fences = _FENCE.finditer(text)
    for opening in fences:
        body_start = opening.end()  # keeps the newline, so trim_body keeps the first line's indentation
        for closing in fences:  # the same iterator: resumes after the opening
            if not closing.group(1).strip():
                yield (
                    opening.start(),
                    closing.end(),
                    opening.group(1).strip(),
                    text[body_start : closing.start()],
                )
                break
        else:
            yield opening.start(), len(text), opening.group(1).strip(), text[body_start:]
            return


def _blocks_closed_anywhere(text: str) -> Iterator[tuple[int, int, str, str]]:
    pos = 0
    while (opening := _FENCE.search(text, pos)) is not None:
        body_start = opening.end()
        close = text.find("```", body_start)
        if close == -1:
            yield opening.start(), len(text), opening.group(1).strip(), text[body_start:]
            return
        pos = close + 3
        yield opening.start(), pos, opening.group(1).strip(), text[body_start:close]


def _answer_between(text: str, lo: int, hi: int) -> str | None:
    """The content of an ``<answer>`` that opens in ``text[lo:hi]`` (unclosed runs to the end), or None."""
    start = text.find(ANSWER_OPEN, lo, hi)
    if start == -1:
        return None
    start += len(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, start)
    return text[start : end if end != -1 else len(text)].strip()
