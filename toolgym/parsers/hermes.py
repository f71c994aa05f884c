"""The ``hermes`` format: Qwen2.5/Qwen3-style ``<tool_call>{"name": …, "arguments": {…}}</tool_call>`` blocks.

This is what Qwen's chat template and vLLM's ``hermes`` tool parser speak, so models trained with it work
unchanged behind an OpenAI-compatible server. Several blocks in one turn are several calls, so generation is
not stopped at ``</tool_call>`` (the turn ends at EOS). A turn without any block is the final answer: the
content of the last ``<answer>…</answer>`` if there is one, else the whole text. Observations travel in the
``tool`` role, which the chat template wraps in ``<tool_response>``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers.base import ActionParser, load_json, register_parser, to_json

OPEN, CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"


@register_parser
class HermesParser(ActionParser):
    name = "hermes"
    observation_role = "tool"

    @property
    def stop_sequences(self) -> list[str]:
        return []

    def _parse(self, text: str) -> ParsedAction:
        bodies = list(_blocks(text))
        if not bodies:
            return ParsedAction.final(_last_answer(text))
        calls = []
        for i, body in enumerate(bodies, 1):
            where = f"{OPEN} block {i}" if len(bodies) > 1 else f"the {OPEN} block"
            calls.append(self.call_from_object(load_json(body.strip(), where), where))
        return ParsedAction.calls(*calls)

    def format_call(self, call: ToolCall) -> str:
        return f"{OPEN}\n{to_json({'name': call.name, 'arguments': call.arguments})}\n{CLOSE}"

    def format_answer(self, answer: str) -> str:
        """Reads back stripped; an answer holding ``<tool_call>``, ``<answer>`` or ``</answer>`` does not."""
        return f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}"

    def render(self, results: Sequence[ToolResult]) -> str:
        """One result is its plain output (the chat template adds ``<tool_response>``); several, sent as one
        message, are each wrapped so the model can tell them apart."""
        if len(results) == 1:
            return self.result_text(results[0])
        return "\n".join(f"<tool_response>\n{self.result_text(r)}\n</tool_response>" for r in results)

    def usage(self) -> str:
        return (
            f'Call a tool with {OPEN}{{"name": ..., "arguments": {{...}}}}{CLOSE}, or reply without a tool '
            f"call and put the final answer in {ANSWER_OPEN}…{ANSWER_CLOSE}."
        )

    def instructions(self) -> str:
        if not self.tools:
            return (
                "# Answer\n\nNo tools are available. Reply with your final answer inside "
                f"{ANSWER_OPEN}{ANSWER_CLOSE} tags.\n\n{self.example_section()}"
            )
        schemas = "\n".join(to_json(tool.schema()) for tool in self.tools.values())
        return (
            "# Tools\n\n"
            "You may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{schemas}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            f"{OPEN}{CLOSE} XML tags:\n"
            f'{OPEN}\n{{"name": <function-name>, "arguments": <args-json-object>}}\n{CLOSE}\n\n'
            "The results come back inside <tool_response></tool_response>. When you have the final answer, "
            f"reply without any tool call and put the answer inside {ANSWER_OPEN}{ANSWER_CLOSE} tags.\n\n"
            f"{self.example_section()}"
        )


def _blocks(text: str) -> Iterator[str]:
    """The body of each ``<tool_call>`` block; an unclosed last one (cut by max tokens) runs to the end."""
    pos = 0
    while (start := text.find(OPEN, pos)) != -1:
        start += len(OPEN)
        end = text.find(CLOSE, start)
        if end == -1:
            yield text[start:]
            return
        yield text[start:end]
        pos = end + len(CLOSE)


def _last_answer(text: str) -> str:
    """The content of the last ``<answer>`` (unclosed runs to the end), else the whole text, stripped."""
    start = text.rfind(ANSWER_OPEN)
    if start == -1:
        return text.strip()
    start += len(ANSWER_OPEN)
    end = text.find(ANSWER_CLOSE, start)
    return text[start : end if end != -1 else len(text)].strip()
