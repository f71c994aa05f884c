"""The ``xml`` format: one tag per tool, ``<calculator>2+2</calculator>``, and ``<answer>…</answer>``.

This is the format of Search-R1 and most tool-PPO recipes: cheap to generate, easy to stop on (the sampler
stops at a closing tag and the env answers), and the generic ``<tool>…</tool>`` marker those recipes use
routes to the primary tool. Mixed turns follow Search-R1: the first recognised element decides. If it is
``<answer>``, the turn is the final answer; otherwise every tool tag before the first ``<answer>`` is a call.
Because vLLM may or may not include the stop string in the output, an unclosed tag at the end of the text
counts as closed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers.base import ActionParser, InvalidAction, register_parser
from toolgym.tools.base import Tool

ANSWER_TAG = "answer"
GENERIC_TAG = "tool"
_RESERVED = frozenset({ANSWER_TAG, "think"})
#: a closing tag with a plausible tool name, to name the tool a model invented
_CLOSING_TAG = re.compile(r"</([\w-]{1,64})>")


@register_parser
class XmlParser(ActionParser):
    name = "xml"
    observation_role = "user"

    def __init__(self, tools: Sequence[Tool], result_tag: str = "output", **kwargs: Any):
        super().__init__(tools, **kwargs)
        clashes = _RESERVED & set(self.tools)
        if clashes:
            raise ValueError(f"the xml format reserves the tags {sorted(clashes)}; rename those tools")
        self.result_tag = result_tag
        #: recognised tag -> the tool it calls (None for the answer tag)
        self._tags: dict[str, str | None] = {name: name for name in self.tools}
        if self.primary_tool is not None:
            self._tags.setdefault(GENERIC_TAG, self.primary_tool)
        self._tags[ANSWER_TAG] = None
        # Literal alternatives after a literal "<": each position costs at most the longest tag, so linear.
        self._opening = re.compile("<(" + "|".join(re.escape(tag) for tag in self._tags) + ")>")

    @property
    def stop_sequences(self) -> list[str]:
        return [f"</{tag}>" for tag in self._tags]

    def _parse(self, text: str) -> ParsedAction:
        calls: list[ToolCall] = []
        for tag, body in self._elements(text):
            tool = self._tags[tag]
            if tool is None:  # <answer>: decides the turn only if it comes first
                if calls:
                    break
                return ParsedAction.final(body.strip())
            calls.append(self.call_from_body(tool, body))
        if calls:
            return ParsedAction.calls(*calls)
        unknown = _first_unknown_closing_tag(text, self._tags)
        if unknown is not None:
            raise InvalidAction(f"{self.unknown_tool_reason(unknown)}. {self.usage()}")
        raise InvalidAction(f"no tool call or answer found. {self.usage()}")

    def _elements(self, text: str) -> Iterator[tuple[str, str]]:
        """(tag, body) of each recognised element in order; an unclosed one runs to the end of the text.

        The search for the next opening tag resumes after the previous element and each body is scanned once
        for its closing tag, so the whole scan is linear in the text.
        """
        pos = 0
        while (opening := self._opening.search(text, pos)) is not None:
            tag = opening.group(1)
            closing = f"</{tag}>"
            end = text.find(closing, opening.end())
            if end == -1:
                yield tag, text[opening.end() :]
                return
            yield tag, text[opening.end() : end]
            pos = end + len(closing)

    def format_call(self, call: ToolCall) -> str:
        """``<calculator>2+2</calculator>``; a multi-line body (code) goes on its own lines."""
        return self.format_body_call(call, lambda body: f"<{call.name}>{_own_lines(body)}</{call.name}>")

    def format_answer(self, answer: str) -> str:
        """Reads back stripped; an answer holding ``</answer>`` does not."""
        return f"<{ANSWER_TAG}>{answer}</{ANSWER_TAG}>"

    def render(self, results: Sequence[ToolResult]) -> str:
        tag = self.result_tag
        return "\n".join(f"<{tag}>\n{self.result_text(r)}\n</{tag}>" for r in results)

    def usage(self) -> str:
        tags = " or ".join(f"<{t}>…</{t}>" for t in self.tools)
        calls = f"Call a tool with {tags}, or give" if tags else "Give"
        return f"{calls} the final answer as <{ANSWER_TAG}>…</{ANSWER_TAG}>."

    def instructions(self) -> str:
        sections = [
            "# Tools",
            self.describe_tools(bare_text=True),
            "# How to act",
            f"To call a tool, write its name as a tag around its input, e.g. <{self.primary_tool}>…"
            f"</{self.primary_tool}>. You may call several tools in one turn. Each result is shown to you "
            f"inside <{self.result_tag}>…</{self.result_tag}>. When you know the answer, write it inside "
            f"<{ANSWER_TAG}>…</{ANSWER_TAG}>; the answer ends the task."
            if self.tools
            else f"Write your final answer inside <{ANSWER_TAG}>…</{ANSWER_TAG}>; the answer ends the task.",
            self.example_section(),
        ]
        return "\n\n".join(sections)


def _own_lines(body: str) -> str:
    return f"\n{body}\n" if "\n" in body else body


def _first_unknown_closing_tag(text: str, known: dict[str, str | None]) -> str | None:
    """The name in the first ``</name>`` that is not a recognised tag, to tell the model what it invented."""
    for match in _CLOSING_TAG.finditer(text):
        if match.group(1) not in known and match.group(1) not in _RESERVED:
            return match.group(1)
    return None
