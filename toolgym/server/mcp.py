"""``toolgym serve mcp``: toolgym's tools (sandboxed Python, search, calculator, ...) for any MCP client.

    toolgym serve mcp --tools calculator,python,search --port 8003     # streamable HTTP at /mcp
    toolgym serve mcp --env toolgym/SQL-v0 --stdio                     # an env's tools over stdio

The tools, their sandbox and their per-client state are the tool server's (``ToolRuntime``, the same one
``toolgym serve tools`` runs): a stateful tool (``python``) keeps one interpreter per MCP session, freed
after ``--session-idle-timeout`` seconds without a call; stateless tools are shared. A failed call
(invalid arguments, a Python exception, a tool error) is an MCP result with ``isError`` and the tool's
message; the MCP layer is FastMCP's (the ``mcp`` extra), the same server class the OpenEnv route uses.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from toolgym.core.types import ToolCall
from toolgym.server.serving import serve_app
from toolgym.server.tools_api import ToolServerConfig

#: the session key of a stdio server: it has one client
STDIO_SESSION = "stdio"


def create_server(config: ToolServerConfig, *, name: str = "toolgym", sandbox: Any = None) -> tuple[Any, Any]:
    """``(FastMCP server, ToolRuntime)`` serving ``config.tools``."""
    from fastmcp import FastMCP
    from fastmcp.tools import FunctionTool

    from toolgym.server.tools_app import ToolRuntime

    runtime = ToolRuntime(config, sandbox=sandbox)
    server = FastMCP(name)
    for tool in runtime.templates.values():
        server.add_tool(
            FunctionTool(
                name=tool.name,
                description=tool.description,
                parameters=tool.parameters,
                fn=_caller(runtime, tool.name),
            )
        )
    return server, runtime


def _caller(runtime: Any, name: str) -> Any:
    """``fn(**arguments)`` for one tool: runs it with the calling MCP session's state; a failed result is
    raised as FastMCP's ``ToolError`` (an ``isError`` result carrying the message)."""

    async def call(**arguments: Any) -> str:
        from fastmcp.exceptions import ToolError
        from fastmcp.server.dependencies import get_context

        session_id = getattr(get_context(), "session_id", None) or STDIO_SESSION
        await runtime.maybe_sweep()
        result = await runtime.call(ToolCall(name=name, arguments=arguments), session_id)
        if not result.ok:
            raise ToolError(result.output or f"{name} failed ({result.status})")
        return result.output

    call.__name__ = name
    return call


def tool_names(tools: str | None, env_id: str | None) -> list[str]:
    """``--tools a,b`` or the tools of ``--env ID`` (both: their union, the env's first)."""
    names: list[str] = []
    if env_id:
        import gymnasium as gym

        import toolgym  # registers the envs

        env = gym.make(env_id)
        try:
            inner = env.unwrapped
            assert isinstance(inner, toolgym.ToolEnv), env_id
            names += list(inner.tools)
        finally:
            env.close()
    names += [t.strip() for t in (tools or "").split(",") if t.strip() and t.strip() not in names]
    if not names:
        raise ValueError("name the tools to serve: --tools calculator,python or --env ID")
    return names


def _build_parser() -> argparse.ArgumentParser:
    from toolgym.server.tools import add_runtime_arguments

    d = ToolServerConfig()
    p = argparse.ArgumentParser(
        prog="toolgym serve mcp",
        description="Serve toolgym's tools over MCP: streamable HTTP at /mcp, or stdio (--stdio).",
    )
    p.add_argument("--tools", default=None, help="comma-separated tool names (e.g. calculator,python,search)")
    p.add_argument("--env", default=None, help="serve this env's tools (with --tools: both)")
    p.add_argument("--stdio", action="store_true", help="speak MCP over stdin/stdout instead of HTTP")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8003, help="port (default 8003)")
    add_runtime_arguments(p, d)
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    return p


def config_from_args(args: argparse.Namespace) -> ToolServerConfig:
    from toolgym.server.tools import runtime_options_from_args

    return ToolServerConfig(tools=tool_names(args.tools, args.env), **runtime_options_from_args(args))


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    config = config_from_args(args)
    server, _runtime = create_server(config, name=args.env or "toolgym")
    if args.stdio:
        server.run(transport="stdio", show_banner=False)
        return 0
    banner = f"toolgym mcp: {', '.join(config.tools)} at http://{args.host}:{args.port}/mcp"
    return serve_app(server.http_app(path="/mcp"), args, banner)


__all__ = ["create_server", "main", "tool_names"]
