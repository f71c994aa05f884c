"""The bodies of ``toolgym serve tools``: its configuration and verl-tool's ``POST /get_observation``.

The typed per-tool API (``POST /tools/{name}``, ``POST /batch``) speaks the models in
``toolgym.tools.remote``, where its client lives, so that envs using a tool server import nothing from the
server layer.

verl-tool's protocol (``verl_tool/servers/serve.py`` and its agent loop) is a batch of trajectories::

    {"trajectory_ids": [...], "actions": [...], "finish": [...], "is_last_step": [...], "extra_fields": [...]}

and the reply ``{"observations": [...], "dones": [...], "valids": [...]}``, one entry per trajectory in
order. Any other top-level key must be a per-trajectory list (verl-tool folds those into ``extra_fields``).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class ToolServerConfig(BaseModel):
    """Everything ``create_app`` needs; the CLI flags and the Ray Serve wrapper build one of these."""

    model_config = ConfigDict(extra="forbid")

    tools: list[str] = Field(
        default_factory=lambda: ["python"],
        description="registered tool names; the first is the primary tool (the generic <tool> tag)",
    )
    tool_options: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="keyword arguments per tool name (e.g. python: {timeout: 5})"
    )
    action_format: str = Field(default="xml", description="the parser that reads /get_observation actions")
    parser_options: dict[str, Any] = Field(default_factory=dict, description="e.g. {result_tag: information}")
    max_action_chars: int = Field(
        default=100_000, ge=1, description="longer actions are invalid (as ToolEnv)"
    )
    max_observation_chars: int = Field(
        default=8_000, ge=1, description="tool output beyond this is cut in the middle (as ToolEnv)"
    )
    done_if_invalid: bool = Field(default=False, description="an unparsable action ends its trajectory")
    code_fences: bool = Field(
        default=True,
        description="a ```python fence is a python call when the action format finds none (as verl-tool's "
        "python tool reads <python> tags and fences)",
    )
    # overload
    max_concurrency: int = Field(default=64, ge=1, description="requests processed at once")
    max_queue: int = Field(default=1024, ge=0, description="requests waiting for a slot; beyond it: 503")
    queue_timeout: float = Field(default=30.0, gt=0, description="seconds a request may wait for a slot")
    retry_after: int = Field(default=1, ge=0, description="the Retry-After seconds of a refused request")
    max_request_bytes: int = Field(default=8 * 2**20, ge=1, description="a larger body is refused (413)")
    max_batch: int = Field(default=1024, ge=1, description="trajectories or calls in one request")
    # per-trajectory state
    session_idle_timeout: float = Field(default=600.0, gt=0, description="free a trajectory idle this long")
    max_sessions: int = Field(
        default=1024, ge=1, description="live trajectories; a new one beyond it: 503 (python: at most 1024)"
    )
    # the sandbox the python tool runs in (started on the first call that needs it)
    sandbox_workers: int = Field(default=2, ge=1, description="programs running at once")
    sandbox_sessions: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="live interpreters (default: max_sessions, so no live trajectory waits for one)",
    )

    @field_validator("tools")
    @classmethod
    def _unique(cls, tools: list[str]) -> list[str]:
        if not tools:
            raise ValueError("serve at least one tool")
        if len(set(tools)) != len(tools):
            raise ValueError(f"tool names must be unique, got {tools}")
        return tools


class ObservationRequest(BaseModel):
    """verl-tool's request. ``finish[i]`` ends trajectory i without running its action (its state is
    freed); ``is_last_step[i]`` runs the action, then frees the state."""

    model_config = ConfigDict(extra="allow")

    trajectory_ids: list[str]
    actions: list[str]
    finish: list[bool] | None = None
    is_last_step: list[bool] | None = None
    extra_fields: list[dict[str, Any]] | None = None

    @field_validator("trajectory_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, ids: Any) -> Any:
        """verl-tool sends ``str(request_id)``; numbers are taken as their text too."""
        if isinstance(ids, list):
            return [str(i) if isinstance(i, int) and not isinstance(i, bool) else i for i in ids]
        return ids

    @model_validator(mode="after")
    def _same_lengths(self) -> ObservationRequest:
        n = len(self.trajectory_ids)
        lists: dict[str, Any] = {
            "actions": self.actions,
            "finish": self.finish,
            "is_last_step": self.is_last_step,
            "extra_fields": self.extra_fields,
            **(self.model_extra or {}),
        }
        for key, value in lists.items():
            if value is None:
                continue
            if not isinstance(value, list):
                raise ValueError(f"{key!r} must be a list with one entry per trajectory")
            if len(value) != n:
                raise ValueError(f"{len(value)} entries in {key!r} for {n} trajectory_ids")
        return self

    def flag(self, name: str, i: int) -> bool:
        values = getattr(self, name)
        return bool(values[i]) if values is not None else False


class ObservationResponse(BaseModel):
    """verl-tool's reply: one observation, done flag and valid flag per trajectory, in request order."""

    observations: list[str]
    dones: list[bool]
    valids: list[bool]
    #: verl-tool's agent loop logs this key when present
    processing_time_ms: float = 0.0


__all__ = ["ObservationRequest", "ObservationResponse", "ToolServerConfig"]
