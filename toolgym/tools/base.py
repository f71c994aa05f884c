"""The Tool protocol and the tool registry.

A tool is a named function the model can call. Its arguments are a pydantic model, so the JSON schema the
model sees (``parameters``) and the validation of what it sent are one definition. A tool never raises: bad
arguments and failures come back as a ``ToolResult`` the model reads as its observation. A failed result's
output is the message alone: the parser puts the error marker before it (``ActionParser.result_text``), once,
the same way for every tool. A typed function becomes a tool with ``Tool.from_function`` (``@toolgym.tool``).
"""

from __future__ import annotations

import asyncio
import importlib
import json
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from toolgym.core.errors import unknown_name
from toolgym.core.task import Task
from toolgym.core.types import ToolCall, ToolResult
from toolgym.util.text import json_too_deep


class Tool(ABC):
    """Base class for tools.

    Subclasses set ``name``, ``description`` and ``Args`` (a pydantic model) and implement ``run``.
    ``primary_arg`` names the argument that a bare text body fills, so that tag formats such as
    ``<calculator>2+2</calculator>`` need no JSON.

    Tools that keep per-episode state (a Python session) override ``start_episode``/``end_episode``; a tool
    that works on the episode's task (the sql tool and its database) overrides ``bind_task``;
    ``close`` releases everything the tool holds. ``Tool.from_function(fn)`` makes one from a typed function.
    """

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]
    primary_arg: ClassVar[str | None] = None
    #: a call is cheap and never waits (bounded CPU well under a millisecond, no I/O): async callers run it
    #: on their event loop instead of hopping to a worker thread, which costs more than such a call
    inline: ClassVar[bool] = False

    #: what ``from_function`` calls: ``toolgym.tools.function.function_tool``, which that module installs here
    #: when it is imported (it subclasses ``Tool``, so this module does not import it; the ``toolgym.tools``
    #: package imports it, and so before anyone can reach this class)
    function_tool_factory: ClassVar[Callable[..., Tool] | None] = None

    @staticmethod
    def from_function(
        fn: Callable[..., Any], *, name: str | None = None, description: str | None = None
    ) -> Tool:
        """A tool from a typed function (sync or async) with a Google-style docstring: the schema from
        transformers' ``get_json_schema``, validation by pydantic, exceptions as error results (see
        ``toolgym.tools.function``)."""
        factory = Tool.function_tool_factory
        if factory is None:  # (only while the toolgym.tools package is still being imported)
            raise RuntimeError("Tool.from_function needs toolgym.tools.function imported")
        return factory(fn, name=name, description=description)

    @property
    def parameters(self) -> dict[str, Any]:
        """The JSON schema of the arguments (OpenAI ``function.parameters``): built once per ``Args`` class
        (every env makes its tools, and a trainer makes an env per concurrent episode), a copy each time
        (decoded from its JSON text, which costs a third of a deep copy)."""
        return json.loads(_args_schema_json(self.Args))

    def parameters_view(self) -> dict[str, Any]:
        """``parameters`` without the copy, for readers that do not modify it (the parsers' instructions):
        the schema shared by every instance of the tool class. Tools that compute ``parameters`` themselves
        get their own."""
        if type(self).parameters is Tool.parameters:
            return _args_schema(self.Args)
        return self.parameters

    @classmethod
    def summary(cls) -> str:
        """The description's first line (``toolgym list``)."""
        return first_line(cls.description)

    def schema(self) -> dict[str, Any]:
        """The OpenAI-style function schema (what chat templates render as ``tools``)."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    @abstractmethod
    def run(self, args: Any) -> ToolResult:
        """Do the work on validated arguments. May raise; ``__call__`` turns exceptions into results."""

    async def arun(self, args: Any) -> ToolResult:
        """Async ``run``; the default runs it in a worker thread so the event loop stays free (an ``inline``
        tool runs here). Tools with a native async backend (the sandbox's bounded pool) override it."""
        if self.inline:
            return self.run(args)
        return await asyncio.to_thread(self.run, args)

    def __call__(self, call: ToolCall | dict[str, Any] | str) -> ToolResult:
        """Validate the arguments and run. Returns an ``error`` result instead of raising."""
        validated = self._validated(call)
        if isinstance(validated, ToolResult):
            return validated
        try:
            result = self.run(validated)
        except Exception as exc:  # a tool must never crash the episode
            return self._failure(exc, call)
        return self._with_call_id(result, call)

    async def acall(self, call: ToolCall | dict[str, Any] | str) -> ToolResult:
        """Async ``__call__``: the same validation and error handling around ``arun``."""
        validated = self._validated(call)
        if isinstance(validated, ToolResult):
            return validated
        try:
            result = await self.arun(validated)
        except Exception as exc:  # a tool must never crash the episode
            return self._failure(exc, call)
        return self._with_call_id(result, call)

    def _validated(self, call: ToolCall | dict[str, Any] | str) -> BaseModel | ToolResult:
        try:
            return self.validate(call)
        except ValueError as exc:
            return ToolResult(name=self.name, status="error", output=str(exc), call_id=_call_id(call))

    def _failure(self, exc: Exception, call: ToolCall | dict[str, Any] | str) -> ToolResult:
        output = f"{type(exc).__name__}: {exc}"
        return ToolResult(name=self.name, status="infra_error", output=output, call_id=_call_id(call))

    @staticmethod
    def _with_call_id(result: ToolResult, call: ToolCall | dict[str, Any] | str) -> ToolResult:
        call_id = _call_id(call)
        return result.model_copy(update={"call_id": call_id}) if call_id else result

    def validate(self, call: ToolCall | dict[str, Any] | str) -> BaseModel:
        """Turn what the model sent into ``Args``; raises ``ValueError`` with a message the model can read."""
        arguments = self.arguments_object(call)
        try:
            return self.Args.model_validate(arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'arguments'}: {err['msg']}" for err in exc.errors()
            )
            raise ValueError(f"{self.name}: invalid arguments ({problems})") from None

    def arguments_object(self, call: ToolCall | dict[str, Any] | str) -> dict[str, Any]:
        """What the model sent as a JSON object (a text body fills ``primary_arg``); ``ValueError`` for
        anything else. ``validate`` then checks it against the tool's arguments."""
        arguments: Any = call.arguments if isinstance(call, ToolCall) else call
        if isinstance(arguments, str):
            arguments = self._from_text(arguments)
        if not isinstance(arguments, dict):
            raise ValueError(f"{self.name}: arguments must be a JSON object, got {type(arguments).__name__}")
        return arguments

    def _from_text(self, text: str) -> dict[str, Any]:
        stripped = text.strip()
        if stripped.startswith("{") and not json_too_deep(stripped):
            try:
                parsed = json.loads(stripped)
            except (json.JSONDecodeError, RecursionError):  # deeply nested JSON must not crash the tool
                parsed = None
            if isinstance(parsed, dict):
                return parsed
        if self.primary_arg is None:
            raise ValueError(f"{self.name}: expected a JSON object of arguments")
        return {self.primary_arg: text}

    def bind_task(self, task: Task) -> None:
        """Called by the env on ``reset``, before ``start_episode``, with the episode's task: a tool whose
        work depends on the task (the sql tool queries the task's database) takes what it needs from it
        here."""

    def start_episode(self, episode_id: str) -> None:
        """Called by the env on ``reset``; stateful tools open per-episode state here."""

    def end_episode(self, episode_id: str) -> None:
        """Called by the env when an episode ends or is abandoned."""

    def close(self) -> None:
        """Release every resource the tool holds."""


_SCHEMAS: weakref.WeakKeyDictionary[type[BaseModel], dict[str, Any]] = weakref.WeakKeyDictionary()


def _args_schema(args: type[BaseModel]) -> dict[str, Any]:
    schema = _SCHEMAS.get(args)
    if schema is None:
        schema = args.model_json_schema()
        schema.pop("title", None)
        for prop in schema.get("properties", {}).values():
            prop.pop("title", None)
        _SCHEMAS[args] = schema
    return schema


_SCHEMA_TEXTS: weakref.WeakKeyDictionary[type[BaseModel], str] = weakref.WeakKeyDictionary()


def _args_schema_json(args: type[BaseModel]) -> str:
    text = _SCHEMA_TEXTS.get(args)
    if text is None:
        text = _SCHEMA_TEXTS[args] = json.dumps(_args_schema(args))
    return text


def _call_id(call: ToolCall | dict[str, Any] | str) -> str | None:
    return call.id if isinstance(call, ToolCall) else None


ToolFactory = Callable[..., Tool]
TOOLS: dict[str, type[Tool]] = {}  # register_tool adds classes only
_T = TypeVar("_T", bound=type[Tool])


def register_tool(cls: _T) -> _T:
    """Class decorator: make a tool available by name (``toolgym.make_tool(name)``, ``toolgym list``).

    Third-party packages register theirs the same way, from a module listed under the ``toolgym.tools``
    entry-point group so it is imported on ``import toolgym``. (A function tool registers with
    ``@toolgym.tool(register=True)``.) Registering the same class again, or a class of the same qualified name
    (its module imported twice), is a no-op; another class under a taken name is an error.
    """
    existing = TOOLS.get(cls.name)
    if existing is not None and existing is not cls and _qualname(existing) != _qualname(cls):
        raise ValueError(f"a tool named {cls.name!r} is already registered ({existing!r})")
    TOOLS.setdefault(cls.name, cls)
    return cls


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def make_tool(name: str, **kwargs: Any) -> Tool:
    """Instantiate a registered tool by name."""
    try:
        factory = TOOLS[name] if name in TOOLS else _from_catalogue(name)
    except (KeyError, TypeError):  # TypeError: an unhashable name
        fix = "use one of these names, a Tool instance, or register yours with @register_tool"
        raise unknown_name("tool", name, sorted(TOOLS), fix, "registered tools") from None
    return factory(**kwargs)


def _from_catalogue(name: str) -> type[Tool]:
    """A tool the catalogue tables name but no module has registered yet (a plugin's, imported when first
    used): import the module that registers it."""
    from toolgym.core.registry import TOOL_CATALOGUE

    row = TOOL_CATALOGUE.get(name)
    if row is not None:
        importlib.import_module(row["module"])
    return TOOLS[name]


def first_line(text: str) -> str:
    """The first line of ``text`` without surrounding blank space ("" for blank text)."""
    text = text.strip()
    return text.splitlines()[0] if text else ""
