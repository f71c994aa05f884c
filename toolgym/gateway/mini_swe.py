"""mini-swe-agent's commands in a toolgym task's sandbox: an environment class for mini-swe-agent (2.x) that
runs each command with the env's ``bash`` tool through the gateway (``POST /sessions/{id}/tools/bash``), so
an unmodified mini-swe-agent solves a ``toolgym/SWE-v0`` task in that task's workspace while its model calls
go to the same session's OpenAI endpoint and are recorded token by token.

mini-swe-agent picks its environment class by import path, so only configuration is needed::

    environment:
      environment_class: toolgym.gateway.mini_swe.GatewayEnvironment
      tools_url: http://127.0.0.1:8000/sessions/SESSION/tools
    model:
      model_name: openai/toolgym            # litellm's OpenAI-compatible provider
      cost_tracking: ignore_errors          # a local model has no price
      model_kwargs: {api_base: http://127.0.0.1:8000/sessions/SESSION/v1, api_key: toolgym}

Each command starts in the task's workspace (``/testbed``, or the session's own directory where the sandbox
cannot show ``/testbed``), with the env's limits (its per-command timeout, memory, no network); the settings
of mini-swe-agent's other environments (``cwd``, ``env``, ``timeout``, ``interpreter`` in its
``swebench.yaml``) are accepted and not used. As with mini-swe-agent's own environments, a command whose
output starts with the line ``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` and that exits 0 submits the rest of
its output: the agent's run ends and that is its final answer (post it to ``/sessions/{id}/finish``).
"""

from __future__ import annotations

import platform
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolgym.util.http import process_client

#: the first output line that ends a mini-swe-agent run (its own environments' rule)
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class GatewayEnvironmentConfig(BaseModel):
    """What :class:`GatewayEnvironment` needs: the session's tools endpoint."""

    #: other environments' settings (cwd, env, timeout, interpreter) are accepted and not used
    model_config = ConfigDict(extra="ignore")

    #: ``{gateway}/sessions/{session_id}/tools`` (``AgentTask.tools_url``)
    tools_url: str
    #: the env's tool that runs a shell command (``{"command": ...}``)
    tool: str = "bash"
    #: seconds to wait for the gateway's answer (the tool's own limit applies to the command)
    http_timeout_s: float = 900.0


class GatewayEnvironment:
    """mini-swe-agent's ``Environment`` protocol over a gateway session's shell tool."""

    def __init__(self, *, config_class: type = GatewayEnvironmentConfig, **kwargs: Any):
        self.config = config_class(**kwargs)

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run ``action["command"]`` in the task's workspace (in ``cwd`` when one is given): mini-swe-agent's
        ``{"output", "returncode", "exception_info"}``. ``timeout`` is not used: the env's tool has its own.
        Raises mini-swe-agent's ``Submitted`` when the command submits."""
        command = str(action.get("command", ""))
        if cwd:
            command = f"cd -- {shlex.quote(cwd)} && {command}"
        url = f"{self.config.tools_url.rstrip('/')}/{self.config.tool}"
        response = process_client().post(
            url, json={"arguments": {"command": command}}, timeout=self.config.http_timeout_s
        )
        if response.status_code != 200:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise RuntimeError(f"the gateway refused the command ({response.status_code}): {message}")
        output = command_result(response.json())
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == SUBMIT and output["returncode"] == 0:
            from minisweagent.exceptions import Submitted

            submission = "".join(lines[1:])
            raise Submitted(
                {
                    "role": "exit",
                    "content": submission,
                    "extra": {"exit_status": "Submitted", "submission": submission},
                }
            )

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The config and the machine's ``uname`` (mini-swe-agent's default templates name ``system``,
        ``release``, ``version`` and ``machine``)."""
        return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                }
            }
        }


def command_result(run: dict[str, Any]) -> dict[str, Any]:
    """The gateway's structured tool result (``ToolRun``: ``exit_code``, ``timed_out``, ``command_output``,
    ``output``) as mini-swe-agent's: the command's own output (ending with a newline, as a shell's does), its
    exit code (negative: killed by that signal; -1 for a timeout, as mini-swe-agent's own environments give,
    with ``exception_info`` saying so). A result without an exit code (the sandbox or the env refused the
    command, the episode's tool calls are used up) is an exception with return code -1 and the observation
    as its ``exception_info``."""
    body = run.get("command_output")
    output = body + "\n" if body else ""
    if run.get("timed_out"):
        return {"output": output, "returncode": -1, "exception_info": "timed out: " + str(run["output"])}
    code = run.get("exit_code")
    if code is None or body is None:
        return {"output": "", "returncode": -1, "exception_info": str(run["output"])}
    return {"output": output, "returncode": int(code), "exception_info": ""}


__all__ = ["SUBMIT", "GatewayEnvironment", "GatewayEnvironmentConfig", "command_result"]
