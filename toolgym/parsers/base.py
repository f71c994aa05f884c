"""The ActionParser protocol: how a model's text turn becomes tool calls, a final answer or an invalid action.

A parser is bound to the env's tools at construction (it needs their names to recognise calls and to route
generic markers such as ``<tool>`` to the primary tool). The same object goes both ways: ``parse`` reads model
text, ``format_call``/``format_answer`` write it (scripted policies, SFT data), ``instructions`` teaches the
format in the system prompt and ``render`` shows tool results as the next observation.

``parse`` never raises: any text, however malformed or huge, gives a ``ParsedAction``; text it cannot use
becomes ``ParsedAction.invalid`` with a reason written for the model to read.

What every format shares lives here, once: reasoning (``<think>``) stripping, the empty-turn check, reading a
tag/fence body into arguments, reading a ``{"name", "arguments"}`` object into a call, JSON that is safe to
embed in markup, the tool list and example for ``instructions``, and the registry of formats.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal, TypeVar

from toolgym.core.errors import unknown_name
from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.tools.base import Tool
from toolgym.util.text import MAX_JSON_DEPTH, json_too_deep

#: Text longer than this is rejected as invalid before any parsing, so a runaway generation costs O(1).
MAX_ACTION_CHARS = 200_000
#: More calls than this in one turn make the turn invalid, so a degenerate generation that repeats a call
#: thousands of times does not make the env run them all.
MAX_CALLS_PER_TURN = 16

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
#: The answer text shown in every format's instructions.
EXAMPLE_ANSWER = "your final answer"
#: What marks a failed tool call in the observation. Written by ``ActionParser.result_text`` only, so every
#: tool's failures read the same in every format; a tool's output never carries it.
ERROR_MARKER = "Error:"


class InvalidAction(Exception):
    """Raised by format code (``_parse`` and the helpers below) to reject a turn.

    ``parse`` turns it into ``ParsedAction.invalid(reason)``, so format code can stop at the first problem
    without threading results back by hand. ``reason`` is written for the model to read.
    """

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason or "the action could not be understood"


def strip_reasoning(text: str) -> str:
    """Remove ``<think>…</think>`` reasoning so that calls written while thinking are never executed.

    Three shapes occur: closed blocks anywhere (Qwen3); a leading ``</think>`` with no opening tag, when the
    chat template already put ``<think>`` in the prompt (QwQ, DeepSeek-R1, Qwen3 thinking-2507), so everything
    before it is reasoning; and an unclosed ``<think>`` with nothing but whitespace before it, when generation
    stopped mid-thought (a stop sequence inside the reasoning, or the length limit), so everything after it is
    reasoning. An unclosed ``<think>`` after real text is kept as text. Linear time: ``str.find`` only.
    """
    start = 0
    first_close = text.find(THINK_CLOSE)
    if first_close != -1 and text.find(THINK_OPEN, 0, first_close) == -1:
        start = first_close + len(THINK_CLOSE)
    kept: list[str] = []
    seen_text = False
    while True:
        open_at = text.find(THINK_OPEN, start)
        if open_at == -1:
            kept.append(text[start:])
            break
        before = text[start:open_at]
        kept.append(before)
        seen_text = seen_text or bool(before.strip())
        close_at = text.find(THINK_CLOSE, open_at + len(THINK_OPEN))
        if close_at == -1:
            if seen_text:
                kept.append(text[open_at:])
            break
        start = close_at + len(THINK_CLOSE)
    return "".join(kept)


def trim_body(body: str) -> str:
    """Drop the blank lines around a tag or fence body and its trailing whitespace.

    Unlike ``str.strip`` this keeps the indentation of the first line when the body starts on its own line
    (``<python>\\n    x = 1\\n</python>``), which matters for code.
    """
    body = body.rstrip()
    content = body.lstrip()
    newline = body.rfind("\n", 0, len(body) - len(content))
    return body[newline + 1 :] if newline != -1 else content


def to_json(value: Any) -> str:
    """``json.dumps`` that can be embedded in any tag format and still parse back to ``value``.

    ``<`` only occurs inside JSON strings, so writing it as ``\\u003c`` where it starts a closing tag or a
    ``<think>`` is still the same JSON, and no closing tag or reasoning marker can appear in the text.
    """
    text = json.dumps(value, ensure_ascii=False)
    return text.replace("</", "\\u003c/").replace(THINK_OPEN, "\\u003cthink>")


def load_json(text: str, what: str) -> Any:
    """``json.loads`` whose failures become ``InvalidAction`` naming ``what`` and the decoder's message."""
    if json_too_deep(text):
        raise InvalidAction(f"{what} is nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidAction(f"{what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise InvalidAction(f"{what} is nested too deeply") from None


class ActionParser(ABC):
    name: ClassVar[str]
    #: the chat role that carries observations in this format
    observation_role: ClassVar[Literal["tool", "user"]] = "tool"
    #: whether one turn may hold several tool calls (``format_calls`` refuses more than one otherwise)
    supports_multiple_calls: ClassVar[bool] = True
    #: what ``result_text`` puts before the output of a failed call
    error_marker: ClassVar[str] = ERROR_MARKER

    def __init__(
        self,
        tools: Sequence[Tool],
        max_action_chars: int = MAX_ACTION_CHARS,
        max_calls_per_turn: int = MAX_CALLS_PER_TURN,
    ):
        self.tools = {t.name: t for t in tools}
        self.primary_tool = tools[0].name if tools else None
        self.max_action_chars = max_action_chars
        self.max_calls_per_turn = max_calls_per_turn

    # -- what each format defines --------------------------------------------------------------------------

    @property
    @abstractmethod
    def stop_sequences(self) -> list[str]:
        """Strings at which generation should stop (the end of a tool call), for the sampler."""

    @abstractmethod
    def instructions(self) -> str:
        """System-prompt text that teaches the model this format and lists the tools."""

    @abstractmethod
    def _parse(self, text: str) -> ParsedAction:
        """Format-specific parsing of a turn that is a str within the size limit, with reasoning removed and
        not blank. May raise ``InvalidAction``."""

    @abstractmethod
    def format_call(self, call: ToolCall) -> str:
        """The text a model would write to make ``call`` in this format; ``parse`` reads back the same name
        and arguments (JSON-compatible values; the call ``id`` is not written)."""

    @abstractmethod
    def format_answer(self, answer: str) -> str:
        """The text a model would write to give ``answer`` as its final answer.

        ``parse`` reads back ``answer`` unchanged except where a format's ``format_answer`` says otherwise
        (answers are free text, so they are not escaped; ``<think>`` tags in them are always reasoning).
        """

    def usage(self) -> str:
        """One sentence reminding the model how to act in this format; ends the reasons for invalid turns."""
        return "Call a tool or give a final answer in the format described in the instructions."

    # -- the shared protocol -------------------------------------------------------------------------------

    def parse(self, text: str) -> ParsedAction:
        """Understand one model turn. Never raises."""
        if not isinstance(text, str):
            return ParsedAction.invalid(f"the action must be text, got {type(text).__name__}")
        if len(text) > self.max_action_chars:
            return ParsedAction.invalid(
                f"the action is {len(text):,} characters long; the limit is {self.max_action_chars:,}"
            )
        try:
            content = strip_reasoning(text)
            if not content.strip():
                raise InvalidAction(self._blank_reason(text))
            action = self._parse(content)
            calls, limit = len(action.tool_calls), self.max_calls_per_turn
            if calls > limit:
                raise InvalidAction(f"the turn makes {calls} tool calls; the limit is {limit} per turn")
            return action
        except InvalidAction as exc:
            return ParsedAction.invalid(exc.reason)
        except RecursionError:
            return ParsedAction.invalid(f"the action is nested too deeply to parse. {self.usage()}")
        except Exception as exc:  # a bug in format code must not crash an episode; tests look for this text
            return ParsedAction.invalid(f"internal parser error ({type(exc).__name__}). {self.usage()}")

    def format_calls(self, calls: Sequence[ToolCall]) -> str:
        """The text of one turn that makes all of ``calls``."""
        if len(calls) > 1 and not self.supports_multiple_calls:
            raise ValueError(f"the {self.name} format allows one tool call per turn, got {len(calls)}")
        return "\n".join(self.format_call(c) for c in calls)

    def render(self, results: Sequence[ToolResult]) -> str:
        """How tool results are shown to the model as the next observation."""
        if len(results) == 1:
            return self.result_text(results[0])
        return "\n".join(f'<output name="{r.name}">\n{self.result_text(r)}\n</output>' for r in results)

    def render_invalid(self, reason: str) -> str:
        """The observation for an action that could not be used."""
        return f"Invalid action: {reason}"

    def result_text(self, result: ToolResult) -> str:
        """A result's output, marked as an error when the tool failed: the one place the marker is written,
        for every tool (``error`` and ``infra_error`` alike) and every format."""
        return result.output if result.ok else f"{self.error_marker} {result.output}".rstrip()

    # -- helpers for format code ---------------------------------------------------------------------------

    def tool_list(self) -> str:
        """The bound tool names for messages, e.g. ``calculator, python``."""
        return ", ".join(self.tools) or "none"

    def require_tool(self, name: str) -> Tool:
        """The bound tool called ``name``; an unknown name rejects the turn, listing the tools there are."""
        tool = self.tools.get(name)
        if tool is None:
            raise InvalidAction(self.unknown_tool_reason(name))
        return tool

    def unknown_tool_reason(self, name: str) -> str:
        if not self.tools:
            return f"there is no tool {name!r}: no tools are available in this task"
        return f"unknown tool {name!r}; available tools: {self.tool_list()}"

    def call_from_body(self, name: str, body: str) -> ToolCall:
        """A call from a tag or fence body: a JSON object is the arguments, other text fills the tool's
        primary argument (the rule ``Tool._from_text`` implements; it is reused, not repeated)."""
        tool = self.require_tool(name)
        try:
            arguments = tool._from_text(trim_body(body))
        except ValueError as exc:
            raise InvalidAction(str(exc)) from None
        except RecursionError:
            raise InvalidAction(f"{name}: the JSON arguments are nested too deeply") from None
        return ToolCall(name=name, arguments=arguments)

    def call_from_object(self, obj: Any, where: str = "the tool call") -> ToolCall:
        """A call from a decoded ``{"name": ..., "arguments": {...}}`` object (hermes, json).

        ``arguments`` may also arrive JSON-encoded as a string (some models write it so) and may be called
        ``parameters`` (Llama 3 style); missing arguments mean none.
        """
        if not isinstance(obj, dict):
            raise InvalidAction(f"{where} must be a JSON object, got {_json_type(obj)}")
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidAction(f'{where} has no "name" (a string naming one of: {self.tool_list()})')
        self.require_tool(name)
        arguments = obj.get("arguments", obj.get("parameters"))
        if isinstance(arguments, str):
            arguments = (
                load_json(arguments, f'the "arguments" string of {where}') if arguments.strip() else {}
            )
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise InvalidAction(
                f'the "arguments" of {where} must be a JSON object, got {_json_type(arguments)}'
            )
        return ToolCall(name=name, arguments=arguments)

    def bare_body(self, call: ToolCall) -> str | None:
        """The call's primary argument when it is the only argument and a str (the readable body form)."""
        tool = self.tools.get(call.name)
        if tool is None or tool.primary_arg is None or set(call.arguments) != {tool.primary_arg}:
            return None
        body = call.arguments[tool.primary_arg]
        return body if isinstance(body, str) else None

    def format_body_call(self, call: ToolCall, wrap: Callable[[str], str]) -> str:
        """Write a body-style call: the bare primary argument when that parses back to the same call, else
        the arguments as a JSON object (which always does). Checking by parsing keeps one source of truth
        for which bodies are ambiguous (closing tags inside, surrounding whitespace, JSON-looking text…)."""
        body = self.bare_body(call)
        if body is not None:
            text = wrap(body)
            if self.parse(text) == ParsedAction.calls(ToolCall(name=call.name, arguments=call.arguments)):
                return text
        return wrap(to_json(call.arguments))

    def example_call(self, name: str | None = None) -> ToolCall | None:
        """A call to the tool ``name`` (default: the primary tool, for the instructions) with values from the
        argument schema (a field's ``examples`` or ``default`` when the tool declares them, else a placeholder
        of the right type)."""
        name = name or self.primary_tool
        if name is None:
            return None
        tool = self.tools[name]
        schema = tool.parameters_view()
        properties = schema.get("properties", {})
        wanted = list(schema.get("required", [])) or ([tool.primary_arg] if tool.primary_arg else [])
        return ToolCall(
            name=tool.name, arguments={k: _example_value(k, properties.get(k, {})) for k in wanted}
        )

    def describe_tools(self, bare_text: bool) -> str:
        """One entry per tool: name, description, argument schema, and (for body formats, ``bare_text``)
        which argument plain text fills."""
        if not self.tools:
            return "No tools are available."
        entries = []
        for tool in self.tools.values():
            schema = to_json(tool.parameters_view())
            entry = f"- {tool.name}: {tool.description}\n  arguments (JSON schema): {schema}"
            if bare_text:
                entry += (
                    f"\n  plain text input fills `{tool.primary_arg}`; a JSON object gives all arguments"
                    if tool.primary_arg
                    else "\n  input: a JSON object of the arguments"
                )
            entries.append(entry)
        return "\n".join(entries)

    def example_section(self) -> str:
        """A concrete call (if any tool is bound) and a final answer, written in this format."""
        parts = []
        example = self.example_call()
        if example is not None:
            parts.append(f"Example of a tool call:\n{self.format_call(example)}")
        parts.append(f"Example of a final answer:\n{self.format_answer(EXAMPLE_ANSWER)}")
        return "\n\n".join(parts)

    def _blank_reason(self, text: str) -> str:
        if text.strip():
            return f"the turn holds only reasoning (<think>…</think>) with nothing after it. {self.usage()}"
        return f"the action is empty. {self.usage()}"


def _example_value(name: str, prop: dict[str, Any]) -> Any:
    if prop.get("examples"):
        return prop["examples"][0]
    if prop.get("default") is not None:
        return prop["default"]
    placeholders = {"integer": 1, "number": 1.5, "boolean": True, "array": [], "object": {}}
    return placeholders.get(prop.get("type", "string"), f"your {name.replace('_', ' ')} here")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


# -- the registry of formats ---------------------------------------------------------------------------------

PARSERS: dict[str, type[ActionParser]] = {}
_P = TypeVar("_P", bound=type[ActionParser])


def register_parser(cls: _P) -> _P:
    """Class decorator: make an action format available by name (``make_parser``, ``action_format=...``).

    Third-party formats register the same way; re-registering the same class is a no-op, another class under
    a taken name is an error.
    """
    existing = PARSERS.get(cls.name)
    if existing is not None and existing is not cls:
        raise ValueError(f"an action format named {cls.name!r} is already registered ({existing!r})")
    PARSERS[cls.name] = cls
    return cls


def make_parser(name: str, tools: Sequence[Tool], **kwargs: Any) -> ActionParser:
    """Instantiate the registered format ``name`` bound to ``tools``; ``kwargs`` go to its constructor."""
    try:
        cls = PARSERS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable name
        fix = "pass one of these names, or an ActionParser instance, as action_format"
        raise unknown_name("action format", name, sorted(PARSERS), fix, "registered formats") from None
    return cls(tools, **kwargs)
