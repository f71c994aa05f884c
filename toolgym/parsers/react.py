"""The ``react`` format: ``Thought: … / Action: TOOL / Action Input: …`` and ``Final Answer: …``.

The classic ReAct / LangChain agent prompt, for models and baselines that know it. One call per turn: the env
replies with ``Observation: …`` and generation stops at ``Observation:`` so the model cannot invent results.
Markers count only at the start of a line (case-insensitive), and each field runs to the next marker line, so
an Action Input may span several lines of code. If a turn has both an Action and a Final Answer, the first one
decides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers.base import ActionParser, InvalidAction, register_parser

THOUGHT, ACTION, ACTION_INPUT, OBSERVATION, FINAL_ANSWER = (
    "Thought",
    "Action",
    "Action Input",
    "Observation",
    "Final Answer",
)
# Linear: ``^`` fails at once except at line starts, and the blanks before a marker are scanned once.
_MARKER = re.compile(
    r"^[ \t]*(Thought|Action Input|Action|Observation|Final Answer)[ \t]*:", re.MULTILINE | re.IGNORECASE
)
#: decoration models put around a tool name (``Action: `python` ``, ``Action: [search]``)
_NAME_DECORATION = " \t`*[]\"'"


@register_parser
class ReactParser(ActionParser):
    name = "react"
    observation_role = "user"
    supports_multiple_calls = False

    @property
    def stop_sequences(self) -> list[str]:
        return [f"{OBSERVATION}:"]

    def _parse(self, text: str) -> ParsedAction:
        fields = _fields(text)
        for i, (marker, value) in enumerate(fields):
            if marker == FINAL_ANSWER.lower():
                return ParsedAction.final(value.strip())
            if marker == ACTION.lower():
                name = value.strip().split("\n", 1)[0].strip(_NAME_DECORATION)
                if not name:
                    raise InvalidAction(f"'{ACTION}:' names no tool; available tools: {self.tool_list()}")
                self.require_tool(name)
                following = fields[i + 1] if i + 1 < len(fields) else None
                if following is None or following[0] != ACTION_INPUT.lower():
                    raise InvalidAction(f"'{ACTION}: {name}' must be followed by '{ACTION_INPUT}: …'")
                return ParsedAction.calls(self.call_from_body(name, following[1]))
        raise InvalidAction(f"no '{ACTION}:' or '{FINAL_ANSWER}:' line found. {self.usage()}")

    def format_call(self, call: ToolCall) -> str:
        """``Action: calculator`` / ``Action Input: 2+2``; a multi-line input (code) starts on a new line."""
        return self.format_body_call(
            call, lambda body: f"{ACTION}: {call.name}\n{ACTION_INPUT}:{_input(body)}"
        )

    def format_answer(self, answer: str) -> str:
        """Reads back stripped; a line of the answer that starts with a marker (``Action:``…) ends it."""
        return f"{FINAL_ANSWER}: {answer}"

    def render(self, results: Sequence[ToolResult]) -> str:
        return "\n".join(f"{OBSERVATION}: {self.result_text(r)}" for r in results)

    def usage(self) -> str:
        return (
            f"Write '{ACTION}: <tool name>' and '{ACTION_INPUT}: <input>' on their own lines to call a tool, "
            f"or '{FINAL_ANSWER}: <answer>' to finish."
        )

    def instructions(self) -> str:
        steps = (
            f"{THOUGHT}: think about what to do next\n"
            f"{ACTION}: the tool to use, one of [{self.tool_list()}]\n"
            f"{ACTION_INPUT}: the input to the tool (plain text for its main argument, or a JSON object)\n"
            f"{OBSERVATION}: the result of the tool (it is written for you; never write it yourself)\n"
            f"... (this {THOUGHT}/{ACTION}/{ACTION_INPUT}/{OBSERVATION} can repeat, one action per turn)\n"
            if self.tools
            else ""
        )
        return (
            f"# Tools\n\n{self.describe_tools(bare_text=True)}\n\n# How to act\n\n"
            f"Use the following format:\n\n{steps}"
            f"{THOUGHT}: I now know the final answer\n"
            f"{FINAL_ANSWER}: the final answer (this ends the task)\n\n"
            f"{self.example_section()}"
        )


def _input(body: str) -> str:
    return f"\n{body}" if "\n" in body else f" {body}"


def _fields(text: str) -> list[tuple[str, str]]:
    """(marker in lower case, the text after it up to the next marker line) for each marker line in order."""
    matches = list(_MARKER.finditer(text))
    ends = [m.start() for m in matches[1:]] + [len(text)]
    return [(m.group(1).lower(), text[m.end() : end]) for m, end in zip(matches, ends)]
