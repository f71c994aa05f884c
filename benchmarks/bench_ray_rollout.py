"""Rollout wall time over Ray engine actors: two actors vs one, same episodes, in one run.

``toolgym rollout --ray N`` hosts N in-process vLLM engines in Ray actors and spreads whole episodes over them
(``MultiClient``: least requests in flight, sessions kept on one engine). Both cases here play the same
Calculator episodes with the same seeds on the tiny model, through the same ``collect`` and the same client
classes; only the number of actors differs. Engine start-up is outside the timed part.

What to expect: on a GPU node, each actor owns a GPU and two actors approach 2x. On a CPU-only machine the
engines share the same cores (each vLLM-CPU engine already uses every core it is given), so the ratio says
what the routing and the Ray hop cost rather than what a second engine adds; with 2 cores no speedup is
expected. The printed table reports what was measured, whatever it is.
"""

from __future__ import annotations

import asyncio

import pytest
import ray

from toolgym.rollout import RolloutConfig, collect
from toolgym.rollout.models import make_client, make_renderer

ENV = "toolgym/Calculator-v0"
EPISODES = 32
CONFIG = RolloutConfig(max_response_tokens=192, max_tokens_per_turn=64)
RESULTS: dict[str, dict[str, float]] = {}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def renderer():
    return make_renderer("tiny")


def _bench(benchmark, actors: int, renderer) -> None:
    client = make_client("tiny", ray_actors=actors, max_model_len=4096)
    try:

        def run():
            return asyncio.run(
                collect([ENV], client, renderer, CONFIG, tasks_per_env=EPISODES, seed=0, progress=False)
            )

        run()  # warm-up: first-request compilation and allocation on each engine
        trajectories, summary = benchmark.pedantic(run, rounds=2, iterations=1)
        assert all(t.error is None for t in trajectories)
        RESULTS[f"{actors}"] = {
            "wall_s": benchmark.stats.stats.median,
            "tokens": float(summary.generated_tokens),
            "spread": float(max(client.episodes_per_engine) - min(client.episodes_per_engine)),
        }
    finally:
        asyncio.run(client.close())


def test_one_actor(benchmark, local_ray, renderer):
    _bench(benchmark, 1, renderer)


def test_two_actors(benchmark, local_ray, renderer):
    _bench(benchmark, 2, renderer)


def test_report_ratio():
    one, two = RESULTS["1"], RESULTS["2"]
    print(
        f"\nRay rollout, {EPISODES} {ENV} episodes on the tiny model (median of 2 rounds):\n"
        f"  1 actor : {one['wall_s']:.2f}s  {one['tokens'] / one['wall_s']:.0f} tok/s\n"
        f"  2 actors: {two['wall_s']:.2f}s  {two['tokens'] / two['wall_s']:.0f} tok/s  "
        f"(episodes per engine differ by {two['spread']:.0f} over all rounds)\n"
        f"  speedup 2 vs 1 actor: {one['wall_s'] / two['wall_s']:.2f}x "
        f"(same episodes and seeds: {one['tokens']:.0f} vs {two['tokens']:.0f} tokens per round)"
    )
