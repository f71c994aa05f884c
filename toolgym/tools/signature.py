"""A Python function with a tool's JSON-schema signature, for frameworks that read tools off functions.

TRL's ``environment_factory`` (and agent frameworks such as smolagents, langgraph or the OpenAI Agents SDK)
take tools as Python callables and read their schema back from the signature and a Google-style docstring
(transformers' ``get_json_schema``). :func:`tool_function` builds such a callable from a toolgym tool's OpenAI
schema, typed so that reading it back gives the tool's own schema: required arguments keep their type,
optional ones become ``T | None`` with the schema's default, enums and descriptions go in the docstring.
Calling it runs ``call(arguments)``; nothing here runs a tool itself.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from typing import Any

_JSON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "object": dict,
}


def tool_function(
    function: dict[str, Any], call: Callable[[Any, dict[str, Any]], str], *, method: bool = False
) -> Callable[..., str]:
    """A function named after the tool whose keyword-only arguments are the schema's ``properties``
    (``function``: the ``"function"`` part of an OpenAI tool schema). Calling it returns
    ``call(owner, arguments)``: ``owner`` is the instance when ``method`` (the function then takes ``self``
    first, to be set on a class), else ``None``."""
    name = function["name"]
    parameters = function.get("parameters") or {}
    properties: dict[str, Any] = parameters.get("properties") or {}
    required = set(parameters.get("required") or ())
    signature = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)] if method else []
    annotations: dict[str, Any] = {}
    arg_lines = []
    for arg, prop in properties.items():
        if not arg.isidentifier():
            raise ValueError(
                f"tool {name!r}: argument {arg!r} is not a Python identifier (called as f(**args))"
            )
        hint = python_type(prop)
        annotations[arg] = hint = hint if arg in required else hint | None
        default = inspect.Parameter.empty if arg in required else prop.get("default")
        signature.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint)
        )
        arg_lines.append(f"    {arg}: {_describe(arg, prop)}")
    annotations["return"] = str

    def bound(self: Any, **arguments: Any) -> str:
        return call(self, arguments)

    def unbound(**arguments: Any) -> str:
        return call(None, arguments)

    fn: Callable[..., str] = bound if method else unbound

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = " ".join((function.get("description") or name).split())
    if arg_lines:
        fn.__doc__ += "\n\nArgs:\n" + "\n".join(arg_lines)
    fn.__annotations__ = annotations
    # inspect reads a function's __signature__ first (typeshed does not declare the attribute)
    fn.__signature__ = inspect.Signature(signature, return_annotation=str)  # type: ignore[attr-defined]
    return fn


def python_type(prop: dict[str, Any]) -> Any:
    """The Python hint whose JSON schema (transformers' reading) is ``prop``'s type; a nullable type
    (pydantic's ``anyOf [T, null]``) is T."""
    options = prop.get("anyOf") or prop.get("oneOf")
    if options:
        kinds = [python_type(o) for o in options if o.get("type") != "null"]
        return kinds[0] if len(kinds) == 1 else str
    kind = prop.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else "string"
    if kind == "array":
        item = python_type(prop.get("items") or {"type": "string"})
        return list[item]  # type: ignore[valid-type]  # a generic alias made at run time from the schema
    return _JSON_TYPES.get(str(kind), str)


def _describe(arg: str, prop: dict[str, Any]) -> str:
    text = " ".join(str(prop.get("description") or f"the {arg}").split())
    if "enum" in prop:
        text += f" (choices: {json.dumps(prop['enum'])})"
    return text


__all__ = ["python_type", "tool_function"]
