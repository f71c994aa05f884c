"""The ``json`` format: ``{"name": …, "arguments": {…}}`` (or a list of them) or ``{"answer": …}``.

For models prompted to "reply in JSON", which wrap it in a ```json fence or in prose as often as not: the
parser takes the first top-level JSON value of a call or answer shape anywhere in the text. A non-string
answer (``{"answer": 42}``) is given to the verifier as its JSON text (``"42"``).

Finding the value takes bounded work: only ``{"`` and ``[{`` can start a call or answer, each candidate is
decoded once with ``json.JSONDecoder.raw_decode``, and after a value that decodes but has another shape, or a
failure at some position, the scan resumes past it rather than retrying inside it. Failures are capped,
because building a ``JSONDecodeError`` counts the lines before its position (linear in the text each time).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

from toolgym.core.types import ParsedAction, ToolCall
from toolgym.parsers.base import ActionParser, InvalidAction, register_parser, to_json
from toolgym.util.text import MAX_JSON_DEPTH, json_too_deep

#: where a call or answer can start: an object with a key, or a list of objects
_CANDIDATE = re.compile(r'\{(?=\s*")|\[(?=\s*\{)')
_DECODER = json.JSONDecoder()
#: candidates that may fail to decode before the scan gives up (prose rarely has more than a few)
MAX_FAILED_DECODES = 32


@register_parser
class JsonParser(ActionParser):
    name = "json"
    observation_role = "tool"

    @property
    def stop_sequences(self) -> list[str]:
        return []

    def _parse(self, text: str) -> ParsedAction:
        scan = _Scan(text)
        for value in scan.values():
            if isinstance(value, dict) and "name" in value:
                return ParsedAction.calls(self.call_from_object(value))
            if isinstance(value, dict) and "answer" in value:
                answer = value["answer"]
                return ParsedAction.final(
                    answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
                )
            if isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value):
                return ParsedAction.calls(
                    *(self.call_from_object(v, f"tool call {i}") for i, v in enumerate(value, 1))
                )
        if scan.found_json:
            raise InvalidAction(f"the JSON is neither a tool call nor an answer. {self.usage()}")
        if scan.error is not None:
            raise InvalidAction(f"the JSON could not be parsed ({scan.error}). {self.usage()}")
        raise InvalidAction(f"no JSON object found. {self.usage()}")

    def format_call(self, call: ToolCall) -> str:
        return to_json(_call_object(call))

    def format_calls(self, calls: Sequence[ToolCall]) -> str:
        if len(calls) == 1:
            return self.format_call(calls[0])
        return to_json([_call_object(c) for c in calls])

    def format_answer(self, answer: str) -> str:
        """Any answer reads back exactly (it is a JSON string)."""
        return to_json({"answer": answer})

    def usage(self) -> str:
        return (
            'Reply with a JSON object: {"name": "<tool>", "arguments": {...}} to call a tool (a list of them '
            'for several calls), or {"answer": "..."} for the final answer.'
        )

    def instructions(self) -> str:
        how = (
            'To call a tool, reply with a JSON object {"name": "<tool name>", "arguments": {<arguments>}}; '
            "to make several calls at once, reply with a JSON list of such objects. The results are sent "
            "back to you. "
            if self.tools
            else ""
        )
        return (
            f"# Tools\n\n{self.describe_tools(bare_text=False)}\n\n# How to act\n\n{how}"
            'When you know the answer, reply with {"answer": "<your final answer>"}; '
            "the answer ends the task.\n\n"
            f"{self.example_section()}"
        )


class _Scan:
    """The top-level JSON values in a text, in order, remembering what went wrong for the error message."""

    def __init__(self, text: str):
        self.text = text
        self.found_json = False
        self.error: json.JSONDecodeError | None = None

    def values(self) -> Iterator[Any]:
        if json_too_deep(self.text):
            raise InvalidAction(f"the JSON is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
        pos, failures = 0, 0
        while (match := _CANDIDATE.search(self.text, pos)) is not None and failures < MAX_FAILED_DECODES:
            start = match.start()
            try:
                value, end = _DECODER.raw_decode(self.text, start)
            except json.JSONDecodeError as exc:
                self.error, failures = exc, failures + 1
                pos = max(exc.pos, start + 1)
                continue
            except RecursionError:
                raise InvalidAction("the JSON is nested too deeply") from None
            self.found_json = True
            yield value
            pos = end


def _call_object(call: ToolCall) -> dict[str, Any]:
    return {"name": call.name, "arguments": call.arguments}
