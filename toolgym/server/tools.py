"""``toolgym serve tools``: the tool server's command line (its app is ``toolgym.server.tools_app``).

One process runs the app under uvicorn; ``--ray`` deploys the same app as Ray Serve replicas
(``toolgym.server.ray_serve``). ``--tool-option TOOL.KEY=VALUE`` items configure the tools
(``tool_options_from_args``); those and the session and sandbox options are ``add_runtime_arguments``, which
``toolgym serve mcp`` shares.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from toolgym.server.ray_serve import add_ray_arguments, options_from_args
from toolgym.server.serving import serve_app
from toolgym.server.tools_api import ToolServerConfig
from toolgym.server.tools_app import create_app


def _build_parser() -> argparse.ArgumentParser:
    d = ToolServerConfig()
    p = argparse.ArgumentParser(
        prog="toolgym serve tools",
        description="Serve toolgym's tools: verl-tool's POST /get_observation and a typed API "
        "(POST /tools/{name}, /batch). See docs/tool-server.md.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8002, help="port (default 8002)")
    p.add_argument("--tools", default=",".join(d.tools), help="comma-separated tool names (default python)")
    p.add_argument("--action-format", default=d.action_format, help="parser of /get_observation actions")
    p.add_argument(
        "--parser-option", action="append", default=[], metavar="KEY=VALUE", help="e.g. result_tag=result"
    )
    p.add_argument("--max-observation-chars", type=int, default=d.max_observation_chars)
    p.add_argument("--max-action-chars", type=int, default=d.max_action_chars)
    p.add_argument("--done-if-invalid", action="store_true", help="an unparsable action ends its trajectory")
    p.add_argument(
        "--no-code-fences",
        dest="code_fences",
        action="store_false",
        help="do not read ```python fences as python calls where the action format finds no call",
    )
    p.add_argument("--max-concurrency", type=int, default=d.max_concurrency, help="requests at once")
    p.add_argument("--max-queue", type=int, default=d.max_queue, help="requests waiting; beyond: 503")
    p.add_argument("--queue-timeout", type=float, default=d.queue_timeout, help="seconds a request may wait")
    p.add_argument("--max-request-bytes", type=int, default=d.max_request_bytes)
    p.add_argument("--max-batch", type=int, default=d.max_batch, help="trajectories or calls per request")
    add_runtime_arguments(p, d)
    p.add_argument("--sandbox-sessions", type=int, default=d.sandbox_sessions, help="live interpreters")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    add_ray_arguments(p)
    return p


def add_runtime_arguments(p: argparse.ArgumentParser, d: ToolServerConfig) -> None:
    """The options of the tools' runtime that ``toolgym serve tools`` and ``toolgym serve mcp`` share (one
    ``ToolRuntime`` serves both): each tool's options, its sessions and the sandbox's workers. They are read
    back by ``runtime_options_from_args``."""
    p.add_argument(
        "--tool-option",
        action="append",
        default=[],
        metavar="TOOL.KEY=VALUE",
        help="an option of one tool, e.g. python.timeout=5 (repeatable; values read as JSON)",
    )
    p.add_argument("--session-idle-timeout", type=float, default=d.session_idle_timeout)
    p.add_argument("--max-sessions", type=int, default=d.max_sessions)
    p.add_argument("--sandbox-workers", type=int, default=d.sandbox_workers, help="programs at once")


def runtime_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The ``ToolServerConfig`` fields of the options ``add_runtime_arguments`` adds."""
    return {
        "tool_options": tool_options_from_args(args.tool_option),
        "session_idle_timeout": args.session_idle_timeout,
        "max_sessions": args.max_sessions,
        "sandbox_workers": args.sandbox_workers,
    }


def tool_options_from_args(items: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``--tool-option TOOL.KEY=VALUE`` items as ``{tool: {key: value}}`` (values read as JSON)."""
    from toolgym.util.kwargs import parse_kwargs

    tool_options: dict[str, dict[str, Any]] = {}
    for item in items:
        name, dot, rest = item.partition(".")
        if not dot:
            raise ValueError(f"--tool-option takes TOOL.KEY=VALUE (e.g. python.timeout=5), got {item!r}")
        tool_options.setdefault(name, {}).update(parse_kwargs([rest]))
    return tool_options


def config_from_args(args: argparse.Namespace) -> ToolServerConfig:
    from toolgym.util.kwargs import parse_kwargs

    return ToolServerConfig(
        tools=[t.strip() for t in args.tools.split(",") if t.strip()],
        action_format=args.action_format,
        parser_options=parse_kwargs(args.parser_option),
        max_action_chars=args.max_action_chars,
        max_observation_chars=args.max_observation_chars,
        done_if_invalid=args.done_if_invalid,
        code_fences=args.code_fences,
        max_concurrency=args.max_concurrency,
        max_queue=args.max_queue,
        queue_timeout=args.queue_timeout,
        max_request_bytes=args.max_request_bytes,
        max_batch=args.max_batch,
        sandbox_sessions=args.sandbox_sessions,
        **runtime_options_from_args(args),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    config = config_from_args(args)
    ray_options = options_from_args(args)
    if ray_options is not None:  # Ray Serve replicas of this same app
        from toolgym.server.ray_serve import serve_tools

        serve_tools(config, ray_options, host=args.host, port=args.port)
        return 0
    banner = (
        f"toolgym tools: {', '.join(config.tools)} ({config.action_format} actions); "
        f"verl-tool: tool_server_url=http://{args.host}:{args.port}/get_observation"
    )
    return serve_app(create_app(config), args, banner, backlog=4096, access_log=False)


if __name__ == "__main__":
    raise SystemExit(main())
