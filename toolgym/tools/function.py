"""Tools from plain typed functions: ``@toolgym.tool`` and ``Tool.from_function``.

A typed function with a Google-style docstring (the form TRL and Hugging Face chat templates take as a tool)
becomes a ``Tool``:

- the schema the model sees is transformers' ``get_json_schema`` of the function: its name, its docstring's
  description, each argument's type from its hint and description from the ``Args:`` section (``(choices:
  [...])`` there becomes an ``enum``);
- what the model sends is validated by a pydantic model built from the same signature (unknown arguments are
  refused, defaults fill what is left out), so the schema and the validation cannot disagree;
- the function may be sync or async (``acall`` awaits an async one natively; ``__call__`` runs it to
  completion, from a worker thread when an event loop is already running in this one);
- what it returns is the output: a ``str`` as is, ``None`` as nothing, anything else as JSON (or ``str()``);
  a ``ToolResult`` is passed through;
- an exception it raises is an ``error`` result the model reads (``ValueError: ...``), like every tool's
  failures: a function tool refuses bad input by raising.

The only argument that is required, when it is a string, is the tool's ``primary_arg``: tag formats then take
plain text for it (``<lookup>Paris</lookup>``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from copy import deepcopy
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from toolgym.core.types import ToolCall, ToolResult
from toolgym.tools.base import Tool, first_line, register_tool

_HOW = (
    "a function tool needs a type hint on every argument and a Google-style docstring: a description, then "
    "an 'Args:' section with one line per argument ('name: what it is')"
)


@dataclass(frozen=True)
class _Schema:
    description: str
    Args: type[BaseModel]
    primary_arg: str | None
    function_parameters: dict[str, Any]


class _FromSchema:
    """A class attribute of a function tool, read from the function's schema, which is built on first use:
    transformers (and the torch it imports) load when an env uses the tool, not when a plugin defines it on
    ``import toolgym``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type[FunctionTool]) -> Any:
        return getattr(owner.function_schema(), self.name)


class FunctionTool(Tool):
    """A tool whose work is a plain function; made by ``Tool.from_function`` (one subclass per function, so
    it can be registered and built by name like any tool)."""

    fn: ClassVar[Callable[..., Any]]
    is_async: ClassVar[bool]
    description_override: ClassVar[str | None] = None
    description = _FromSchema()
    Args = _FromSchema()
    primary_arg = _FromSchema()
    function_parameters = _FromSchema()

    @classmethod
    def function_schema(cls) -> _Schema:
        built = cls.__dict__.get("_schema")
        if built is None:
            built = _build_schema(cls.fn, cls.name, cls.description_override)
            cls._schema = built  # type: ignore[attr-defined]
        return built

    @classmethod
    def summary(cls) -> str:
        """The description's first line, read from the docstring without building the schema: listing the
        tools (``toolgym list``) does not import transformers and torch (7 s of its 11 here)."""
        return first_line(cls.description_override or inspect.getdoc(cls.fn) or cls.name)

    @property
    def parameters(self) -> dict[str, Any]:
        return deepcopy(self.function_parameters)

    def run(self, args: BaseModel) -> ToolResult:
        value = self.fn(**_arguments(args))
        if self.is_async:
            value = _run_to_completion(value)
        return self._result(value)

    async def arun(self, args: BaseModel) -> ToolResult:
        if not self.is_async:
            return await super().arun(args)
        return self._result(await self.fn(**_arguments(args)))

    def _result(self, value: Any) -> ToolResult:
        if isinstance(value, ToolResult):
            return value.model_copy(update={"name": self.name})
        return ToolResult(name=self.name, output=_as_text(value))

    def _failure(self, exc: Exception, call: ToolCall | dict[str, Any] | str) -> ToolResult:
        """The function refused the call: the model's to fix, not an infrastructure failure."""
        failure = super()._failure(exc, call)
        return failure.model_copy(update={"status": "error"})

    def __repr__(self) -> str:
        return f"<function tool {self.name!r} ({self.fn.__module__}.{self.fn.__qualname__})>"


def function_tool(
    fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
) -> FunctionTool:
    """``fn`` as a Tool (see the module docstring); ``name``/``description`` override the function's.

    What the signature shows is checked here; the docstring's argument descriptions when the schema is first
    needed (an env built with the tool), both as a ``TypeError`` that says how to fix the function."""
    if isinstance(fn, Tool | type) or not callable(fn):
        what = f"the class {fn.__name__}" if isinstance(fn, type) else type(fn).__name__
        raise TypeError(f"expected a plain function to make a tool of, got {what}")
    label = getattr(fn, "__qualname__", repr(fn))
    for param in inspect.signature(fn).parameters.values():
        problem = None
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            problem = f"*{param.name} is not allowed"
        elif param.kind is param.POSITIONAL_ONLY:
            problem = f"'{param.name}' is positional-only"
        elif param.annotation is param.empty:
            problem = f"argument {param.name} is missing a type hint"
        if problem:
            raise TypeError(f"cannot make a tool of {label}: {problem}; {_HOW}")
    if not inspect.getdoc(fn):
        raise TypeError(f"cannot make a tool of {label}: it has no docstring; {_HOW}")
    tool_name = name or fn.__name__
    namespace = {
        "name": tool_name,
        "description_override": description,
        "fn": staticmethod(fn),
        "is_async": inspect.iscoroutinefunction(fn),
        "__module__": getattr(fn, "__module__", __name__),
        "__qualname__": f"{label}.tool",
        "__doc__": f"The function tool {tool_name!r}, from {label}.",
    }
    cls = type(f"{tool_name}_tool", (FunctionTool,), namespace)
    return cls()


Tool.function_tool_factory = function_tool  # Tool.from_function's maker (base.py cannot import this module)


def _build_schema(fn: Callable[..., Any], name: str, description: str | None) -> _Schema:
    from transformers.utils import get_json_schema

    try:
        schema = get_json_schema(fn)["function"]
    except Exception as exc:  # transformers' DocstringParsingException / TypeHintParsingException
        raise TypeError(f"cannot make a tool of {fn.__qualname__}: {exc}; {_HOW}") from None
    parameters = schema.get("parameters") or {"type": "object", "properties": {}}
    required = list(parameters.get("required", []))
    properties = parameters.get("properties", {})
    primary = required[0] if len(required) == 1 and properties[required[0]].get("type") == "string" else None
    return _Schema(
        description=description or schema.get("description") or name,
        Args=_args_model(fn, name, properties),
        primary_arg=primary,
        function_parameters=parameters,
    )


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    register: bool = False,
) -> Any:
    """Decorator: ``@toolgym.tool`` or ``@toolgym.tool(name=..., register=True)`` turns a typed function into
    a Tool (``register``: also by name, for ``tools=["name"]``, ``make_tool`` and ``toolgym list``)."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        made = function_tool(f, name=name, description=description)
        if register:
            register_tool(type(made))
        return made

    return wrap(fn) if fn is not None else wrap


def _args_model(fn: Callable[..., Any], tool_name: str, properties: dict[str, Any]) -> type[BaseModel]:
    hints = typing.get_type_hints(fn)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        prop = properties.get(param.name, {})
        annotation = hints.get(param.name, Any)
        choices = prop.get("enum")
        if choices and typing.get_origin(annotation) is not Literal:  # docstring "(choices: [...])"
            annotation = Literal[tuple(choices)]
            if prop.get("nullable") or param.default is None:
                annotation = annotation | None
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (annotation, Field(default, description=prop.get("description")))
    return create_model(f"{tool_name}_args", __config__=ConfigDict(extra="forbid"), **fields)


def _arguments(args: BaseModel) -> dict[str, Any]:
    return {field: getattr(args, field) for field in type(args).model_fields}


def _as_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump_json()
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _run_to_completion(coro: Coroutine[Any, Any, Any]) -> Any:
    """Await ``coro`` from sync code: here, or in a worker thread when this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolgym-function-tool") as pool:
        return pool.submit(asyncio.run, coro).result()


__all__ = ["FunctionTool", "function_tool", "tool"]
