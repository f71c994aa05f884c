"""A real vLLM-CPU engine with the tiny model, shared by every test that needs one (the rollout and trainer
adapter tests): it takes ~15-30 s to start, so one test session starts it once.

vLLM binds its output handler to the event loop that first uses it, so the engine and every test that drives
it share one loop (``engine.run(coro)``), created here.
"""

import asyncio

import pytest

from toolgym.rollout.models import make_client, make_renderer


class Engine:
    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.client = make_client("tiny", max_model_len=4096)
        self.renderer = make_renderer("tiny")

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self):
        self.run(self.client.close())
        self.loop.close()


@pytest.fixture(scope="session")
def engine():
    eng = Engine()
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def renderer():
    return make_renderer("tiny")
