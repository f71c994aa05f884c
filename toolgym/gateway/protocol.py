"""What the gateway reads and writes at its boundary: the OpenAI chat-completions fields it honours, the
session requests, and OpenAI's error body (so the ``openai`` client raises its usual exceptions).

Unknown OpenAI fields are accepted and ignored (agent frameworks send many); fields the gateway cannot honour
are refused with a message rather than ignored (``n > 1``).
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator

from toolgym.parsers.openai_calls import check_tool_schema

ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ChatRequest(BaseModel):
    """The body of ``POST .../v1/chat/completions``: the fields the gateway reads."""

    model_config = ConfigDict(extra="allow")

    model: str = ""
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    max_completion_tokens: int | None = Field(None, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    n: int = Field(1, ge=1)
    logprobs: bool = False
    #: vLLM's extension: ``prompt_token_ids`` on the response, ``token_ids`` on each choice
    return_token_ids: bool = False

    @field_validator("messages")
    @classmethod
    def _messages(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not messages:
            raise ValueError("messages is empty: send at least one message")
        for i, message in enumerate(messages):
            role = message.get("role")
            if role not in ROLES:
                raise ValueError(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {role!r}")
        return messages

    @field_validator("tools")
    @classmethod
    def _tools(cls, tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if tools is None:
            return None
        names = set()
        for i, schema in enumerate(tools):
            check_tool_schema(schema, i)
            name = schema["function"]["name"]
            if name in names:
                raise ValueError(f"tools[{i}]: the function name {name!r} is declared twice")
            names.add(name)
        return [{"type": "function", **s} if "type" not in s else s for s in tools] or None

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    def choice_mode(self) -> tuple[Literal["auto", "none", "required", "function"], str | None]:
        """``tool_choice`` read: ``auto`` (the default), ``none``, ``required`` or one named function."""
        choice = self.tool_choice
        if choice in (None, "auto"):
            return "auto", None
        if choice in ("none", "required"):
            return choice, None
        if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            name = choice["function"].get("name")
            declared = {t["function"]["name"] for t in self.tools or []}
            if name not in declared:
                raise ValueError(f"tool_choice names the function {name!r}, which tools does not declare")
            return "function", name
        raise ValueError(f"tool_choice must be 'auto', 'none', 'required' or a function, got {choice!r}")


class OpenSession(BaseModel):
    """The body of ``POST /sessions``: a free session (no body or no ``env_id``), or one on a toolgym task."""

    model_config = ConfigDict(extra="forbid")

    env_id: str | None = None
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    #: pins the env's task by id; else ``seed`` draws one (and seeds ``env.reset``)
    task_id: str | None = None
    seed: int | None = Field(None, ge=0)
    #: choose the id (letters, digits, ``-_.:``); default a new uuid
    session_id: str | None = Field(None, pattern=r"^[A-Za-z0-9_.:-]{1,128}$")
    metadata: dict[str, Any] = Field(default_factory=dict)
    #: a task object to play (in process only: trainers pass the episode key's task)
    task: Any = Field(None, exclude=True)


class ToolCallBody(BaseModel):
    """``POST /sessions/{id}/tools/{name}``: one call of the env's tool."""

    model_config = ConfigDict(extra="forbid")

    arguments: dict[str, Any] = Field(default_factory=dict)


class FinishBody(BaseModel):
    """``POST /sessions/{id}/finish``: judge a final answer with the env's verifier, or post a reward."""

    model_config = ConfigDict(extra="forbid")

    #: the final answer (default: the text of the session's last reply); ``null`` with ``no_answer``
    answer: str | None = None
    #: the episode ended without an answer: the verifier's 0, said so
    no_answer: bool = False
    #: the client's own reward (free sessions, or instead of the env's verifier)
    reward: float | None = None
    details: dict[str, Any] = Field(default_factory=dict)


def error(status: int, message: str, kind: str = "invalid_request_error", **headers: str) -> JSONResponse:
    """OpenAI's error body: the ``openai`` client raises its exception for ``status`` with this message."""
    body = {"error": {"message": message, "type": kind, "code": status, "param": None}}
    return JSONResponse(body, status_code=status, headers=headers or None)


__all__ = ["ROLES", "ChatRequest", "FinishBody", "OpenSession", "ToolCallBody", "error"]
