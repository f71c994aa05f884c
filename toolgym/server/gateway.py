"""``toolgym serve gateway``: the OpenAI-compatible gateway that records every sampled token per session
(``toolgym.gateway``; ``docs/gateway.md``), in front of an in-process vLLM engine or running servers."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from toolgym.gateway.app import create_app
from toolgym.gateway.core import GatewayConfig
from toolgym.gateway.inprocess import KEEP_ALIVE_S
from toolgym.util.kwargs import positive_float, positive_int


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym serve gateway",
        description="Serve a model as an OpenAI-compatible endpoint per session, recording every sampled "
        "token (POST /sessions, /sessions/{id}/v1/chat/completions, /sessions/{id}/trajectory). "
        "See docs/gateway.md.",
    )
    p.add_argument(
        "--model", required=True, help="model path or HF id, or 'tiny' (its tokenizer and chat template)"
    )
    p.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="URL",
        help="OpenAI-compatible server running the model (repeat for several; default in-process vLLM)",
    )
    p.add_argument("--served-model-name", default=None, help="the name /v1/models lists (default --model)")
    p.add_argument(
        "--max-model-len", type=positive_int, default=4096, help="the engine's context (default 4096)"
    )
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
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--log-level", default="info", help="uvicorn log level (default info)")
    p.add_argument("--verbose", action="store_true", help="show the in-process engine's INFO log")
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
    from toolgym.server.serving import serve_app

    args = _build_parser().parse_args(argv)
    if not args.server:
        from toolgym.rollout.clients.vllm_inproc import quiet_engine_logs

        quiet_engine_logs(args.verbose)
    config = config_from_args(args)
    banner = (
        f"toolgym gateway: POST http://{args.host}:{args.port}/sessions, then "
        f"/sessions/{{id}}/v1/chat/completions (model {config.name!r})"
    )
    return serve_app(create_app(config), args, banner, backlog=4096, timeout_keep_alive=KEEP_ALIVE_S)


if __name__ == "__main__":
    raise SystemExit(main())
