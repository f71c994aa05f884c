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
import re
import shlex
from typing import Any

from pydantic import BaseModel, ConfigDict

from toolgym.parsers.base import ERROR_MARKER

#: the first output line that ends a mini-swe-agent run (its own environments' rule)
SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
#: the status line toolgym's bash tool ends its output with
_EXIT = re.compile(r"^\[exit code (-?\d+)\]$")
_SIGNAL = re.compile(r"^\[killed by signal (\d+)\]$")
_TIMEOUT = "[timed out after "


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
        import httpx

        command = str(action.get("command", ""))
        if cwd:
            command = f"cd -- {shlex.quote(cwd)} && {command}"
        url = f"{self.config.tools_url.rstrip('/')}/{self.config.tool}"
        response = httpx.post(
            url, json={"arguments": {"command": command}}, timeout=self.config.http_timeout_s
        )
        if response.status_code != 200:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text
            raise RuntimeError(f"the gateway refused the command ({response.status_code}): {message}")
        output = read_output(str(response.json()["output"]))
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


def read_output(text: str) -> dict[str, Any]:
    """toolgym's bash-tool observation as mini-swe-agent's result: the output (ending with a newline, as a
    shell's does) without the status line the tool ends it with (``[exit code N]``, ``[killed by signal N]``,
    ``[timed out after …]``) nor the error marker toolgym puts before a failed command's output, and the
    exit code (-1 for a timeout, as mini-swe-agent's own environments give, with ``exception_info`` saying
    so). An observation with no status line (the sandbox or the env refused the command, the episode's tool
    calls are used up) is an exception with return code -1."""
    body, last = _split(text)
    succeeded = (match := _EXIT.match(last)) is not None and int(match.group(1)) == 0
    if not succeeded and text.startswith(ERROR_MARKER):  # toolgym's mark of a failed command, not its output
        body, last = _split(text[len(ERROR_MARKER) :].removeprefix(" "))
    output = body + "\n" if body else ""
    if (match := _EXIT.match(last)) is not None:
        return {"output": output, "returncode": int(match.group(1)), "exception_info": ""}
    if (match := _SIGNAL.match(last)) is not None:
        return {"output": output, "returncode": -int(match.group(1)), "exception_info": ""}
    if last.startswith(_TIMEOUT):
        return {"output": output, "returncode": -1, "exception_info": last.strip("[]")}
    why = text.removeprefix(ERROR_MARKER).strip()
    return {"output": "", "returncode": -1, "exception_info": why}


def _split(text: str) -> tuple[str, str]:
    """The text before its last line, and the last line."""
    body, newline, last = text.rpartition("\n")
    return (body, last) if newline else ("", text)


__all__ = ["SUBMIT", "GatewayEnvironment", "GatewayEnvironmentConfig", "read_output"]
