"""A model's tool-call text as OpenAI ``tool_calls``: what an OpenAI-compatible endpoint (the gateway)
returns for the functions a client declared in its request.

The client's function schemas become :class:`DeclaredTool` s (a name, a description, a JSON schema; they run
in the client, never here) and one of toolgym's registered action formats reads the reply (``hermes`` by
default: the ``<tool_call>`` blocks Qwen's and the tiny model's chat templates teach when ``tools`` are
rendered), so the endpoint and the envs parse tool calls with the same code.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolgym.core.types import ParsedAction, ToolResult
from toolgym.parsers.base import make_parser
from toolgym.tools.base import Tool

#: OpenAI's rule for function names
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class _AnyArguments(BaseModel):
    model_config = ConfigDict(extra="allow")


class DeclaredTool(Tool):
    """A function a client declared (``tools`` of a chat request): its schema, for parsing; it runs in the
    client, so running it here is an error."""

    Args = _AnyArguments

    def __init__(self, schema: dict[str, Any]):
        function = schema["function"]
        self.name = function["name"]  # type: ignore[misc]  # one class, a tool per declared function
        self.description = function.get("description") or function["name"]  # type: ignore[misc]
        self._parameters = function.get("parameters") or {"type": "object", "properties": {}}
        required = self._parameters.get("required") or []
        properties = self._parameters.get("properties") or {}
        only = required[0] if len(required) == 1 else None
        # a lone required string argument is what a tag format's bare body fills
        primary = only if only and (properties.get(only) or {}).get("type") == "string" else None
        self.primary_arg = primary  # type: ignore[misc]

    @property
    def parameters(self) -> dict[str, Any]:
        return json.loads(json.dumps(self._parameters))

    def parameters_view(self) -> dict[str, Any]:
        return self._parameters

    def run(self, args: Any) -> ToolResult:
        raise RuntimeError(f"{self.name} is the client's function: it runs in the client")


def check_tool_schema(schema: Any, index: int) -> None:
    """Raise ``ValueError`` naming what is wrong with one entry of a request's ``tools``."""
    where = f"tools[{index}]"
    if not isinstance(schema, dict):
        raise ValueError(f"{where} must be an object")
    if schema.get("type", "function") != "function":
        raise ValueError(f"{where}.type must be 'function', got {schema.get('type')!r}")
    function = schema.get("function")
    if not isinstance(function, dict):
        raise ValueError(f"{where}.function must be an object with a name")
    name = function.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.match(name):
        raise ValueError(f"{where}.function.name must be 1-64 letters, digits, '_' or '-', got {name!r}")
    parameters = function.get("parameters")
    if parameters is not None and (
        not isinstance(parameters, dict) or parameters.get("type", "object") != "object"
    ):
        raise ValueError(f"{where}.function.parameters must be a JSON schema of type 'object'")


class ToolCallReader:
    """Reads replies for one request's declared functions with a registered action format."""

    def __init__(self, schemas: Sequence[dict[str, Any]], action_format: str = "hermes"):
        self.tools = [DeclaredTool(s) for s in schemas]
        self.parser = make_parser(action_format, self.tools)

    def read(self, text: str) -> tuple[str | None, list[dict[str, Any]], ParsedAction]:
        """The reply's ``content`` (its text without the tool-call blocks; None when nothing is left),
        its OpenAI ``tool_calls`` and the parse. A turn whose calls do not parse (an unknown function, bad
        JSON) is returned as text: the client sees what the model wrote, as vLLM's parsers do."""
        parsed = self.parser.parse(text) if self.tools else ParsedAction.final(text)
        if parsed.kind != "tool_calls":
            return text, [], parsed
        calls = [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in parsed.tool_calls
        ]
        content = _without_calls(text)
        return (content or None), calls, parsed


def _without_calls(text: str) -> str:
    """The text before the first tool-call block (reasoning kept), stripped: what vLLM's hermes parser
    returns as ``content`` beside the calls."""
    start = text.find("<tool_call>")
    return (text if start < 0 else text[:start]).strip()


__all__ = ["FUNCTION_NAME", "DeclaredTool", "ToolCallReader", "check_tool_schema"]
