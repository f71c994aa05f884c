"""``toolgym view FILE``: argument parsing and printing for the trajectory viewer (toolgym/viewer)."""

from __future__ import annotations

import argparse
from pathlib import Path

from toolgym.util.kwargs import positive_int

#: a self-contained page past this size is slow to open: the command suggests the server
LARGE_PAGE_MB = 50


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "view",
        help="see episodes: conversation, tokens by loss mask, rewards, plots (HTML report or local server)",
    )
    p.add_argument(
        "file",
        metavar="FILE",
        help="rollout JSONL (toolgym rollout --out), an eval report (toolgym eval --out) or a training run's "
        "episode dump (a file or its directory)",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", default=None, help="write a self-contained HTML report (default: FILE.html)")
    where.add_argument(
        "--port", type=positive_int, default=None, help="serve the viewer on 127.0.0.1:PORT (large files)"
    )
    p.add_argument(
        "--model",
        default=None,
        help="tokenizer to decode the tokens with (default: the one the episodes recorded; 'tiny' works)",
    )
    p.set_defaults(func=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    from toolgym.viewer import load, token_decoder, write_report

    if args.port is None:
        source = Path(args.file)
        out = Path(args.out) if args.out else source.with_name(source.name + ".html")
        loaded = write_report(source, out, model=args.model)
        for note in loaded.notes:
            print(f"note: {note}")
        print(f"{len(loaded.episodes)} episodes ({loaded.kind}) -> {out}")
        megabytes = out.stat().st_size / 2**20
        if megabytes > LARGE_PAGE_MB:
            print(f"note: the page is {megabytes:.0f} MB; --port serves the file one episode at a time")
        return 0

    from toolgym.viewer.serve import make_server

    loaded = load(args.file)
    decode, why = token_decoder(loaded, args.model)
    if why:
        loaded.notes.append(why)
    server = make_server(loaded, decode, args.port)
    print(f"{len(loaded.episodes)} episodes ({loaded.kind}) at http://127.0.0.1:{args.port}/ (Ctrl-C stops)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


__all__ = ["cmd_view", "register"]
