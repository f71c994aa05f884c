"""Shared fixtures: a generated world with its BM25 index, and local HTTP services that serve it.

The services run in a thread on a free loopback port (``serve_in_thread``) and stop when the test ends. The
flaky one fails its first requests (or answers slowly), to exercise the remote client's retries.
"""

from __future__ import annotations

import asyncio

import pytest
from fastapi import Request
from fastapi.responses import JSONResponse

from toolgym.search.bm25 import BM25Index
from toolgym.search.world import KnowledgeWorld
from toolgym.server.retriever import create_app
from toolgym.testing.servers import free_port, serve_in_thread

WORLD_SIZE, WORLD_SEED = 3_000, 7


@pytest.fixture(scope="session")
def world() -> KnowledgeWorld:
    return KnowledgeWorld(WORLD_SIZE, WORLD_SEED)


@pytest.fixture(scope="session")
def index(world) -> BM25Index:
    return BM25Index.build(world.documents())


@pytest.fixture(scope="session")
def service_url(index):
    """The real retriever service over ``index``."""
    with serve_in_thread(create_app(index, topk_max=20)) as url:
        yield url


class FlakyService:
    """The real service behind a switch: the first ``failures`` requests get ``status``; every request waits
    ``delay`` seconds first. ``requests`` counts what arrived."""

    def __init__(self, index: BM25Index, failures: int = 0, status: int = 503, delay: float = 0.0):
        self.failures, self.status, self.delay, self.requests = failures, status, delay, 0
        self.app = create_app(index)
        self.app.middleware("http")(self._gate)

    async def _gate(self, request: Request, call_next):
        self.requests += 1
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.requests <= self.failures:
            return JSONResponse({"detail": "warming up"}, status_code=self.status)
        return await call_next(request)


@pytest.fixture
def flaky_service(index):
    """``flaky_service(failures=2, status=503, delay=0.0) -> (url, FlakyService)``, stopped after the test."""
    started = []

    def start(**kwargs):
        service = FlakyService(index, **kwargs)
        context = serve_in_thread(service.app)
        started.append(context)
        return context.__enter__(), service

    yield start
    for context in started:
        context.__exit__(None, None, None)


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL nobody listens on (the port was free a moment ago)."""
    port = free_port()
    return f"http://127.0.0.1:{port}/retrieve"
