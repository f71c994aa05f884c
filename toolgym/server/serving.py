"""How every ``toolgym serve SERVICE`` command starts its app once it is built, so that they all do it alike.

The banner (where the service listens, what it serves) goes to stderr at once, so that a launcher waiting
on the output sees it; uvicorn then serves the app on ``--host``/``--port`` at ``--log-level``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def add_model_options(p: argparse.ArgumentParser, served_name_help: str) -> None:
    """The options of a service that answers with a model (``serve agent``, ``serve gateway``): the model
    whose tokenizer and chat template render every call, the servers that run it (none: in-process vLLM),
    the served name, the context, and the engine's log."""
    from toolgym.util.kwargs import positive_int

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
    p.add_argument("--served-model-name", default=None, help=served_name_help)
    p.add_argument(
        "--max-model-len", type=positive_int, default=4096, help="the engine's context length (default 4096)"
    )
    p.add_argument(
        "--verbose", action="store_true", help="show the in-process engine's INFO log (default WARNING)"
    )


def add_listen_options(p: argparse.ArgumentParser, port: int = 8000) -> None:
    """``--host``, ``--port``, ``--log-level``: where every ``toolgym serve`` service listens."""
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=port, help=f"port (default {port})")
    p.add_argument("--log-level", default="info", help="uvicorn log level (default info)")


def quiet_model_engine(args: argparse.Namespace) -> None:
    """Without ``--server`` the model runs in this process: keep vLLM's log at WARNING unless ``--verbose``
    (before the engine imports vLLM)."""
    if not args.server:
        from toolgym.rollout.clients.vllm_inproc import quiet_engine_logs

        quiet_engine_logs(args.verbose)


def serve_app(app: Any, args: argparse.Namespace, banner: str, **uvicorn_options: Any) -> int:
    """Print ``banner`` and run ``app`` under uvicorn until it stops (``uvicorn_options``: e.g. a ``backlog``
    for a service that takes bursts); returns 0, ``main``'s exit status."""
    import uvicorn

    print(banner, file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, **uvicorn_options)
    return 0
