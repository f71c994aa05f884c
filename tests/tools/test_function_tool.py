"""Tools from typed functions: ``@toolgym.tool`` / ``Tool.from_function`` and ``make_env(tools=[fn])``."""

import asyncio
import subprocess
import sys
from typing import Literal

import pytest
from transformers.utils import get_json_schema

import toolgym
from toolgym.core.types import ToolResult
from toolgym.tools.base import TOOLS, Tool, make_tool
from toolgym.tools.function import FunctionTool


def convert(amount: float, unit: Literal["km", "mi"] = "km", places: int = 2) -> dict:
    """Convert a distance to metres.

    Args:
        amount: The distance.
        unit: The unit it is in.
        places: Decimal places to round to.
    """
    if amount < 0:
        raise ValueError("a distance cannot be negative")
    metres = amount * (1000 if unit == "km" else 1609.344)
    return {"metres": round(metres, places)}


async def shout(text: str) -> str:
    """Upper-case text, after a short wait.

    Args:
        text: What to shout.
    """
    await asyncio.sleep(0)
    return text.upper()


def test_schema_is_transformers_get_json_schema():
    tool = Tool.from_function(convert)
    expected = get_json_schema(convert)["function"]
    assert isinstance(tool, FunctionTool) and tool.name == "convert"
    assert tool.schema()["function"] == {
        "name": "convert",
        "description": expected["description"],
        "parameters": expected["parameters"],
    }
    assert tool.parameters["properties"]["unit"]["enum"] == ["km", "mi"]
    assert tool.primary_arg is None  # one required argument, but not a string


def test_arguments_are_validated_by_the_signature():
    tool = Tool.from_function(convert)
    assert tool({"amount": 2}).output == '{"metres": 2000.0}'
    assert tool({"amount": "1.5", "unit": "mi", "places": 0}).output == '{"metres": 2414.0}'  # lax numbers
    for arguments, problem in [
        ({}, "amount: Field required"),
        ({"amount": "far"}, "amount: Input should be a valid number"),
        ({"amount": 1, "unit": "ly"}, "unit: Input should be 'km' or 'mi'"),
        ({"amount": 1, "speed": 3}, "speed: Extra inputs are not permitted"),
    ]:
        result = tool(arguments)
        assert result.status == "error" and problem in result.output, result


def test_an_exception_is_an_error_result_the_model_reads():
    result = Tool.from_function(convert)({"amount": -1})
    assert result == ToolResult(
        name="convert", status="error", output="ValueError: a distance cannot be negative"
    )


def test_async_functions_run_natively_and_from_sync_code():
    tool = toolgym.tool(shout)
    assert tool.primary_arg == "text"  # the only required argument is a string: bare text fills it
    assert tool("hey").output == "HEY"
    assert asyncio.run(tool.acall({"text": "hi"})).output == "HI"

    async def inside_a_running_loop():
        return tool({"text": "loop"})  # __call__ from a coroutine: run in a worker thread, not deadlocked

    assert asyncio.run(inside_a_running_loop()).output == "LOOP"


def test_return_values_become_text():
    def answer(kind: str):
        """Return something.

        Args:
            kind: What to return.
        """
        return {"none": None, "text": "plain", "list": [1, "a"], "result": ToolResult(name="x", output="r")}[
            kind
        ]

    tool = Tool.from_function(answer)
    assert [tool(k).output for k in ("none", "text", "list", "result")] == ["", "plain", '[1, "a"]', "r"]
    assert tool("result").name == "answer"


def test_the_decorator_names_describes_and_registers():
    @toolgym.tool(name="metres", description="Distances in metres.", register=True)
    def to_metres(amount: float) -> float:
        """Convert kilometres.

        Args:
            amount: Kilometres.
        """
        return amount * 1000

    try:
        assert to_metres.name == "metres" and to_metres.description == "Distances in metres."
        assert TOOLS["metres"] is type(to_metres)
        assert make_tool("metres")({"amount": 2}).output == "2000.0"
        assert "function tool 'metres'" in repr(to_metres)
        again = toolgym.tool(to_metres.fn, name="metres", register=True)  # the module imported twice: no-op
        assert TOOLS["metres"] is type(to_metres) is not type(again)
        with pytest.raises(ValueError, match="a tool named 'metres' is already registered"):
            toolgym.tool(convert, name="metres", register=True)
    finally:
        TOOLS.pop("metres")


def test_what_cannot_be_a_tool_says_how_to_fix_it():
    def undocumented(x: int) -> int:
        """Does something."""
        return x

    def untyped(x):
        """Does something.

        Args:
            x: A thing.
        """
        return x

    def bare(x: int) -> int:
        return x

    def star(*values: int) -> int:
        """Sum.

        Args:
            values: Numbers.
        """
        return sum(values)

    lazy = Tool.from_function(undocumented)  # the docstring's Args are read when the schema is first needed
    with pytest.raises(TypeError, match=r"no description for the argument 'x'.*'Args:' section"):
        lazy.schema()
    with pytest.raises(TypeError, match=r"no description for the argument 'x'"):
        toolgym.make_env([{"id": "t", "prompt": "p"}], [undocumented], lambda t, a: 0.0)
    with pytest.raises(TypeError, match="it has no docstring"):
        Tool.from_function(bare)
    with pytest.raises(TypeError, match="missing a type hint"):
        Tool.from_function(untyped)
    with pytest.raises(TypeError, match=r"\*values is not allowed"):
        Tool.from_function(star)
    with pytest.raises(TypeError, match="got the class Task"):
        Tool.from_function(toolgym.Task)


def test_make_env_takes_functions_and_the_model_sees_their_errors_once():
    env = toolgym.make_env(
        [{"id": "t", "prompt": "How many metres is 2 km?", "answer": "2000"}],
        tools=[convert, "calculator"],
        verifier=lambda task, answer: answer.strip() == task.answer,
    )
    _, info = env.reset(seed=0)
    assert [t["function"]["name"] for t in info["tools"]] == ["convert", "calculator"]
    obs = env.step('<convert>{"amount": -2}</convert>')[0]
    assert obs == "<output>\nError: ValueError: a distance cannot be negative\n</output>"
    obs = env.step('<convert>{"amount": 2}</convert>')[0]
    assert obs == '<output>\n{"metres": 2000.0}\n</output>'
    assert env.step("<answer>2000</answer>")[1] == 1.0


def test_make_env_refuses_a_tool_class_and_other_objects():
    with pytest.raises(TypeError, match=r"write Calculator\(\)"):
        toolgym.make_env([{"id": "t", "prompt": "p"}], [type(make_tool("calculator"))], lambda t, a: 0.0)
    with pytest.raises(TypeError, match="a tool is a registered name, a Tool or a typed function"):
        toolgym.make_env([{"id": "t", "prompt": "p"}], [42], lambda t, a: 0.0)


def test_defining_a_function_tool_does_not_import_transformers():
    """Plugins define their tools on ``import toolgym``: that must stay cheap (transformers imports torch),
    and so must listing them (``toolgym list`` shows each tool's first line)."""
    code = (
        "import sys, toolgym\n"
        "@toolgym.tool(register=True)\n"
        "def echo(text: str) -> str:\n"
        '    """Echo the text.\n\n    More.\n\n    Args:\n        text: Text.\n    """\n'
        "    return text\n"
        "from toolgym.cli import main\n"
        "assert main(['list']) == 0\n"
        "assert echo.summary() == 'Echo the text.'\n"
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules, 'imported too early'\n"
        "assert echo.primary_arg == 'text' and 'transformers' in sys.modules\n"
        "assert echo.description.splitlines()[0] == echo.summary()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
