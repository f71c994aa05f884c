"""The viewer as a small local HTTP server, for files too large for one self-contained page.

The index (list, filters, plots) is rendered once; an episode's detail, the heavy part (every token), is
rendered when the page asks for ``episode/<n>``. Standard library only (``http.server``), bound to
127.0.0.1 by default: it serves one file read-only to the person who started it.
"""

from __future__ import annotations

import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from toolgym.viewer.load import Loaded
from toolgym.viewer.page import Decode, episode_page, index_page


def make_server(
    loaded: Loaded, decode: Decode | None, port: int, host: str = "127.0.0.1"
) -> ThreadingHTTPServer:
    index = index_page(loaded, decoded=decode is not None).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            found = re.fullmatch(r"/episode/(\d+)", path)
            if path in ("/", "/index.html"):
                self._send(index)
            elif found and int(found.group(1)) < len(loaded.episodes):
                self._send(episode_page(loaded, int(found.group(1)), decode).encode())
            else:
                self.send_error(HTTPStatus.NOT_FOUND)

        def _send(self, body: bytes) -> None:
            self.send_response(HTTPStatus.OK)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return ThreadingHTTPServer((host, port), Handler)


__all__ = ["make_server"]
