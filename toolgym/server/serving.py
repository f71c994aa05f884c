"""How every ``toolgym serve SERVICE`` command starts its app once it is built, so that they all do it alike.

The banner (where the service listens, what it serves) goes to stderr at once, so that a launcher waiting
on the output sees it; uvicorn then serves the app on ``--host``/``--port`` at ``--log-level``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def serve_app(app: Any, args: argparse.Namespace, banner: str, **uvicorn_options: Any) -> int:
    """Print ``banner`` and run ``app`` under uvicorn until it stops (``uvicorn_options``: e.g. a ``backlog``
    for a service that takes bursts); returns 0, ``main``'s exit status."""
    import uvicorn

    print(banner, file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, **uvicorn_options)
    return 0
