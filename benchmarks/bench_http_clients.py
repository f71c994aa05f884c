"""Which HTTP client for which of toolgym's calls: the client's own CPU per request, against a local server.

toolgym makes HTTP calls in two shapes:

- **from an event loop, many in flight** (the gateway's and the ``--server`` rollouts' engine calls, TRL's
  async rollout process: ``OpenAICompletionsClient``): here httpx's ``AsyncClient`` against aiohttp's
  ``ClientSession``, at 1 and 64 requests in flight on one loop (uvloop, as under uvicorn);
- **from worker threads, one each** (the judge's endpoint, the remote tools, the reward client, the
  retriever: ``env.step`` runs them on the episode host's threads): here httpx's sync ``Client``, shared by
  the threads as toolgym pools it, against urllib3's ``PoolManager`` (what ``requests`` runs on), at 1 and 16
  threads.

The server (a subprocess, aiohttp) answers every ``POST`` with the same 2 KB JSON body, about a completion's
size. Reported per client: its process's CPU time per request (user + system, every thread: what the
client costs its process, whose cores the engine shares) and requests per second; each the median of
``ROUNDS`` rounds, alternating the clients, with the range.

Run (about a minute)::

    .venv/bin/pytest benchmarks/bench_http_clients.py -q -s
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from toolgym.testing.servers import free_port
from toolgym.util.table import format_table

ROUNDS = 3
#: requests per round and client: every in-flight slot sends its share one after the other
REQUESTS = {1: 300, 16: 640, 64: 1280}
BODY = {"prompt": list(range(300)), "max_tokens": 32, "logprobs": 0}

SERVER = """
import json, sys
from aiohttp import web
reply = json.dumps({"choices": [{"token_ids": list(range(32)), "logprobs": {"token_logprobs": [-0.5] * 32},
                    "text": "x" * 1200, "finish_reason": "length"}]}).encode()
async def answer(request):
    await request.read()
    return web.Response(body=reply, content_type="application/json")
app = web.Application()
app.router.add_post("/v1/completions", answer)
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
"""


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)])
    url = f"http://127.0.0.1:{port}/v1/completions"
    import httpx

    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.post(url, json={})
            break
        except httpx.TransportError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the echo server did not start") from None
            time.sleep(0.1)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


class Clock:
    """CPU time (the whole process: every thread) and wall time over a stretch."""

    def __enter__(self) -> Clock:
        self.cpu, self.wall = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu, self.wall = time.process_time() - self.cpu, time.perf_counter() - self.wall

    def per_request(self, requests: int) -> tuple[float, float]:
        """(CPU ms per request, requests per second)."""
        return self.cpu / requests * 1e3, requests / self.wall


def _async_run(
    make: Callable[[], object], send: Callable, close: Callable, url: str, flight: int
) -> Callable[[], tuple[float, float]]:
    """Each of ``flight`` slots on one loop sends its share in turn; timed after one warm-up request per
    slot (the pool's connections are open, the imports and the TLS context made)."""
    per_slot = REQUESTS[flight] // flight

    async def main() -> tuple[float, float]:
        client = make()
        try:

            async def slot(count: int) -> None:
                for _ in range(count):
                    await send(client, url)

            await asyncio.gather(*(slot(1) for _ in range(flight)))
            with Clock() as clock:
                await asyncio.gather(*(slot(per_slot) for _ in range(flight)))
            return clock.per_request(per_slot * flight)
        finally:
            await close(client)

    def run() -> tuple[float, float]:
        import uvloop

        return uvloop.run(main())

    return run


def _httpx_async(url: str, flight: int) -> Callable:
    import httpx

    def make() -> object:
        limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
        return httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(120.0, pool=None))

    async def send(client, url: str) -> None:
        (await client.post(url, json=BODY)).json()

    async def close(client) -> None:
        await client.aclose()

    return _async_run(make, send, close, url, flight)


def _aiohttp(url: str, flight: int) -> Callable:
    from toolgym.util.http import async_session

    async def send(session, url: str) -> None:
        data = json.dumps(BODY, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json"}
        async with session.post(url, data=data, headers=headers) as resp:
            json.loads(await resp.read())

    async def close(session) -> None:
        await session.close()

    return _async_run(lambda: async_session(timeout=120.0, max_connections=256), send, close, url, flight)


def _threads_run(send: Callable[[], None], threads: int) -> Callable[[], tuple[float, float]]:
    """Each of ``threads`` threads sends its share in turn; timed after one warm-up request per thread."""
    per_thread = REQUESTS[threads] // threads

    def worker(count: int) -> None:
        for _ in range(count):
            send()

    def run() -> tuple[float, float]:
        with ThreadPoolExecutor(threads) as pool:
            for future in [pool.submit(worker, 1) for _ in range(threads)]:
                future.result()
            with Clock() as clock:
                for future in [pool.submit(worker, per_thread) for _ in range(threads)]:
                    future.result()
        return clock.per_request(per_thread * threads)

    return run


def _httpx_sync(url: str, threads: int) -> Callable:
    from toolgym.util.http import pooled_client

    client = pooled_client("", timeout=120.0, max_workers=max(threads, 16))
    return _threads_run(lambda: client.post(url, json=BODY).json(), threads)


def _urllib3(url: str, threads: int) -> Callable:
    import urllib3

    pool = urllib3.PoolManager(maxsize=max(threads, 16))

    def send() -> None:
        reply = pool.request(
            "POST", url, body=json.dumps(BODY).encode(), headers={"Content-Type": "application/json"}
        )
        json.loads(reply.data)

    return _threads_run(send, threads)


CASES = {
    "event loop": ({"httpx AsyncClient": _httpx_async, "aiohttp ClientSession": _aiohttp}, (1, 64)),
    "threads": ({"httpx Client (shared)": _httpx_sync, "urllib3 PoolManager": _urllib3}, (1, 16)),
}


def test_http_clients(server):
    rows = []
    for shape, (clients, flights) in CASES.items():
        for flight in flights:
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
            for number in range(ROUNDS):
                names = list(clients)
                if number % 2:
                    names.reverse()
                for name in names:
                    results[name].append(clients[name](server, flight)())
            for name, measured in results.items():
                cpu = [m[0] for m in measured]
                rate = [m[1] for m in measured]
                rows.append(
                    (
                        shape,
                        str(flight),
                        name,
                        f"{np.median(cpu):.2f} ({min(cpu):.2f}-{max(cpu):.2f})",
                        f"{np.median(rate):,.0f} ({min(rate):,.0f}-{max(rate):,.0f})",
                    )
                )
    header = (
        f"HTTP clients against a local aiohttp server, {os.cpu_count()} CPU(s): client process CPU per "
        f"request and requests/s, median (range) of {ROUNDS} rounds"
    )
    table = format_table(("calls from", "in flight", "client", "CPU ms/request", "requests/s"), rows)
    print("\n" + header + "\n" + table)
