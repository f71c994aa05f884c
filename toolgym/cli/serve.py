"""``toolgym serve SERVICE``: each service module under ``toolgym.server`` owns its options."""

from __future__ import annotations

import argparse

#: service name -> the module whose ``main(argv) -> int`` runs it (add a service with one line here)
SERVICES = {
    "retriever": "toolgym.server.retriever",
    "rewards": "toolgym.server.rewards",
    "tools": "toolgym.server.tools",
    "openenv": "toolgym.server.openenv",
    "agent": "toolgym.server.agent",
    "mcp": "toolgym.server.mcp",
    "gateway": "toolgym.server.gateway",
}


def register(sub: argparse._SubParsersAction) -> None:
    names = ", ".join(SERVICES)
    serve = sub.add_parser("serve", help=f"run a service: {names} (each has its own --help)")
    serve.add_argument("service", help=f"one of {names} (`toolgym serve SERVICE --help` for its options)")
    serve.add_argument("service_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    """Each service module owns its options: ``main(argv) -> int``."""
    import importlib

    if args.service not in SERVICES:
        raise ValueError(f"unknown service {args.service!r}; services: {', '.join(SERVICES)}")
    try:
        module = importlib.import_module(SERVICES[args.service])
    except ModuleNotFoundError as exc:
        raise ValueError(f"the {args.service} service needs a missing package: {exc.name}") from None
    return module.main(args.service_args)
