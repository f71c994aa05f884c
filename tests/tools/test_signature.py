"""A tool's JSON schema as a Python signature (what TRL's environment_factory and agent frameworks read)."""

import inspect

import pytest

from toolgym.core.types import ToolCall
from toolgym.tools import make_tool
from toolgym.tools.signature import python_type, tool_function

SCHEMA = {
    "name": "search",
    "description": "Search   the\nindex.",
    "parameters": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for"},
            "k": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 3},
            "mode": {"type": "string", "enum": ["bm25", "dense"]},
            "ids": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["query"],
    },
}


def test_the_signature_has_the_schemas_arguments_types_and_defaults():
    fn = tool_function(SCHEMA, lambda owner, arguments: repr((owner, arguments)))
    params = inspect.signature(fn).parameters
    assert list(params) == ["query", "k", "mode", "ids"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert params["query"].annotation is str and params["query"].default is inspect.Parameter.empty
    assert params["k"].annotation == int | None and params["k"].default == 3
    assert params["ids"].annotation == list[int] | None
    assert fn.__name__ == "search"
    assert fn.__doc__.startswith("Search the index.\n\nArgs:\n    query: what to look for")
    assert '(choices: ["bm25", "dense"])' in fn.__doc__
    assert fn(query="x", k=1) == repr((None, {"query": "x", "k": 1}))


def test_a_method_passes_its_instance():
    class Owner:
        search = tool_function(SCHEMA, lambda owner, args: f"{type(owner).__name__} {args}", method=True)

    assert Owner().search(query="q") == "Owner {'query': 'q'}"
    assert next(iter(inspect.signature(Owner.search).parameters)) == "self"


def test_an_argument_that_is_no_identifier_is_refused():
    bad = {"name": "t", "parameters": {"properties": {"not-ok": {"type": "string"}}}}
    with pytest.raises(ValueError, match="'not-ok' is not a Python identifier"):
        tool_function(bad, lambda owner, arguments: "")


@pytest.mark.parametrize(
    ("prop", "hint"),
    [
        ({"type": "number"}, float),
        ({"type": ["string", "null"]}, str),
        ({"type": "object"}, dict),
        ({"oneOf": [{"type": "integer"}, {"type": "string"}]}, str),
        ({}, str),
    ],
)
def test_json_types_map_to_python_hints(prop, hint):
    assert python_type(prop) == hint


def test_a_builtin_tools_schema_becomes_a_callable():
    tool = make_tool("calculator")
    run = lambda owner, arguments: tool(ToolCall(name="calculator", arguments=arguments)).output  # noqa: E731
    fn = tool_function(tool.schema()["function"], run)
    assert "expression" in inspect.signature(fn).parameters
    assert fn(expression="6*7").strip() == "42"
