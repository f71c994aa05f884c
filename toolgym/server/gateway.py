"""``toolgym serve gateway``: the OpenAI-compatible gateway that records every sampled token per session
(``toolgym.gateway``; ``docs/gateway.md``), in front of an in-process vLLM engine or running servers."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from toolgym.gateway.app import create_app
from toolgym.gateway.core import GatewayConfig
from toolgym.gateway.inprocess import KEEP_ALIVE_S
from toolgym.server.serving import add_listen_options, add_model_options, quiet_model_engine, serve_app
from toolgym.util.kwargs import positive_float, positive_int


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym serve gateway",
        description="Serve a model as an OpenAI-compatible endpoint per session, recording every sampled "
        "token (POST /sessions, /sessions/{id}/v1/chat/completions, /sessions/{id}/trajectory). "
        "See docs/gateway.md.",
    )
    add_model_options(p, served_name_help="the name /v1/models lists (default --model)")
    p.add_argument(
        "--max-tokens", type=positive_int, default=1024, help="a call's max_tokens when it sends none (1024)"
    )
    p.add_argument("--max-sessions", type=positive_int, default=1024, help="sessions open at once (1024)")
    p.add_argument(
        "--idle-timeout",
        type=positive_float,
        default=600.0,
        help="seconds before an unused session expires (600)",
    )
    p.add_argument("--tool-format", default="hermes", help="the action format read for tool calls (hermes)")
    add_listen_options(p)
    return p


def config_from_args(args: argparse.Namespace) -> GatewayConfig:
    return GatewayConfig(
        model=args.model,
        servers=args.server,
        served_model_name=args.served_model_name,
        max_model_len=args.max_model_len,
        default_max_tokens=args.max_tokens,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout,
        tool_format=args.tool_format,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    quiet_model_engine(args)
    config = config_from_args(args)
    banner = (
        f"toolgym gateway: POST http://{args.host}:{args.port}/sessions, then "
        f"/sessions/{{id}}/v1/chat/completions (model {config.name!r})"
    )
    return serve_app(create_app(config), args, banner, backlog=4096, timeout_keep_alive=KEEP_ALIVE_S)


if __name__ == "__main__":
    raise SystemExit(main())
