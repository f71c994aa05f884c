"""Fake tools and bound parsers shared by the parser tests.

The tools only need names, descriptions, argument models and primary arguments: parsers never run them. They
cover the three shapes a parser meets: a bare-text tool (calculator, python, search with an optional extra
argument) and a tool with no primary argument (lookup), which only takes a JSON object.
"""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from toolgym.core.types import ToolResult
from toolgym.parsers import ActionParser, make_parser
from toolgym.tools.base import Tool

FORMATS = ("xml", "hermes", "json", "react", "markdown")


class _EchoTool(Tool):
    def run(self, args: BaseModel) -> ToolResult:
        return ToolResult(name=self.name, output=repr(args))


class CalculatorArgs(BaseModel):
    expression: str


class FakeCalculator(_EchoTool):
    name = "calculator"
    description = "Evaluates an arithmetic expression."
    Args = CalculatorArgs
    primary_arg = "expression"


class PythonArgs(BaseModel):
    code: str


class FakePython(_EchoTool):
    name = "python"
    description = "Runs Python code and returns what it prints."
    Args = PythonArgs
    primary_arg = "code"


class SearchArgs(BaseModel):
    query: str
    top_k: int = 3


class FakeSearch(_EchoTool):
    name = "search"
    description = "Searches the corpus for passages."
    Args = SearchArgs
    primary_arg = "query"


class LookupArgs(BaseModel):
    key: str
    limit: int


class FakeLookup(_EchoTool):
    name = "lookup"
    description = "Looks a key up in a table."
    Args = LookupArgs


@pytest.fixture(scope="session")
def calculator() -> Tool:
    return FakeCalculator()


@pytest.fixture(scope="session")
def python_tool() -> Tool:
    return FakePython()


@pytest.fixture(scope="session")
def search_tool() -> Tool:
    return FakeSearch()


@pytest.fixture(scope="session")
def lookup_tool() -> Tool:
    return FakeLookup()


@pytest.fixture(scope="session")
def tools(calculator, python_tool, search_tool, lookup_tool) -> list[Tool]:
    """The standard tool set; calculator comes first, so it is the primary tool."""
    return [calculator, python_tool, search_tool, lookup_tool]


@pytest.fixture(scope="session")
def parsers(tools) -> dict[str, ActionParser]:
    return {fmt: make_parser(fmt, tools) for fmt in FORMATS}


@pytest.fixture(scope="session", params=FORMATS)
def parser(request, parsers) -> ActionParser:
    """Each built-in format bound to the standard tools (session scoped so hypothesis tests can use it)."""
    return parsers[request.param]
