"""Rollout wall time: toolgym's collector vs the turn-barrier loop peers use vs generation alone.

Same episodes, same seeds, same tiny model on in-process vLLM, in one run:

- ``collect``: every episode is its own asyncio task; a tool call blocks only its own episode.
- ``turn_barrier``: generate for all live episodes, wait for all, step all envs (in parallel threads), wait
  for all, repeat — the loop GEM/verl-tool-style batch rollouts run. Each turn costs its slowest
  generation plus its slowest tool call.
- ``generation_alone``: the exact prompts and generated token counts ``collect`` recorded, replayed with no
  tools at all (the engine is never idle): the lower bound.

Two things vary between episodes, as they do in real RL rollouts: the tool's latency (10-500 ms, like short
and long sandbox runs) and the length of each generated turn (16-256 tokens, long-tailed, as a real policy's
turns are; the random tiny model would otherwise always run to ``max_tokens``). Every turn calls the tool, so
the tiny model's nonsense text still exercises the tool path.
Targets: collect <= 1.15x generation alone, turn-barrier >= 1.5x collect.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest
from pydantic import BaseModel

import toolgym
from toolgym.core.types import ParsedAction, ToolCall, ToolResult
from toolgym.parsers.base import ActionParser
from toolgym.rollout import RolloutConfig, collect
from toolgym.rollout.clients.base import Sampling
from toolgym.rollout.models import make_client, make_renderer

EPISODES = 128
TURNS = 4
TOKENS_PER_TURN = 256
LATENCIES = [0.01, 0.05, 0.1, 0.25, 0.5]
RESULTS: dict[str, float] = {}


def turn_length(request_id: str) -> int:
    """A long-tailed, deterministic length for one turn (log-uniform in 16..256 tokens)."""
    rng = random.Random(zlib.crc32(request_id.encode()))
    return int(16 * 2 ** rng.uniform(0, 4))


class VariableLengthClient:
    """Caps each request's max_tokens at its turn's length: stands in for a policy's varying turn lengths."""

    def __init__(self, client):
        self.client = client

    @property
    def engine(self):
        return self.client.engine

    async def generate(self, prompt_ids, sampling, request_id):
        length = min(sampling.max_tokens, turn_length(request_id))
        return await self.client.generate(
            prompt_ids, sampling.model_copy(update={"max_tokens": length}), request_id
        )

    async def close(self):
        await self.client.close()


class WorkArgs(BaseModel):
    text: str = ""


class SlowTool(toolgym.Tool):
    """Sleeps for the latency the episode's task prescribes (set by the env on reset)."""

    name = "work"
    description = "Does slow work."
    Args = WorkArgs
    primary_arg = "text"

    def __init__(self):
        self.latency = 0.0

    def run(self, args):
        time.sleep(self.latency)
        return ToolResult(name=self.name, output="done")


class EveryTurnCalls(ActionParser):
    """Any text is a call to the work tool, so the random model always exercises the tool path."""

    name = "bench-every-turn"

    @property
    def stop_sequences(self):
        return []

    def instructions(self):
        return ""

    def _parse(self, text):
        return ParsedAction.calls(ToolCall(name="work", arguments={"text": text[:20]}))

    def format_call(self, call):
        return call.arguments.get("text", "")

    def format_answer(self, answer):
        return answer


class SlowEnv(toolgym.ToolEnv):
    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        self.tools["work"].latency = self.task.data["latency"]
        return obs, info


@toolgym.register_env("bench/SlowTools-v0", tools=["work"], description="benchmark env")
def make_slow_env(**kwargs):
    tasks = toolgym.ListSource(
        toolgym.Task(
            id=f"t{i}", prompt=f"Task {i}: do the work.", data={"latency": LATENCIES[i % len(LATENCIES)]}
        )
        for i in range(EPISODES)
    )
    tool = SlowTool()
    return SlowEnv(
        tasks,
        [tool],
        toolgym.rewards.base.FunctionVerifier(lambda t, a: 0.0),
        EveryTurnCalls([tool]),
        max_turns=TURNS,
    )


CONFIG = RolloutConfig(
    max_response_tokens=TURNS * (TOKENS_PER_TURN + 64),
    max_tokens_per_turn=TOKENS_PER_TURN,
    sampling=Sampling(),
)
TASKS = {"bench/SlowTools-v0": [make_slow_env().tasks.get(f"t{i}") for i in range(EPISODES)]}


@pytest.fixture(scope="module")
def engine():
    loop = asyncio.new_event_loop()
    client = VariableLengthClient(make_client("tiny"))
    renderer = make_renderer("tiny")
    yield loop, client, renderer
    loop.run_until_complete(client.close())
    loop.close()


def _collect(engine):
    loop, client, renderer = engine
    return loop.run_until_complete(
        collect(
            ["bench/SlowTools-v0"],
            client,
            renderer,
            CONFIG,
            tasks=TASKS,
            concurrency=EPISODES,
            progress=False,
        )
    )


async def _turn_barrier(client, renderer):
    """Peers' loop: all episodes generate, then all step, turn by turn."""
    envs = [gym.make("bench/SlowTools-v0") for _ in range(EPISODES)]
    pool = ThreadPoolExecutor(EPISODES)
    loop = asyncio.get_running_loop()
    infos = [
        env.reset(seed=i, options={"task": TASKS["bench/SlowTools-v0"][i]})[1] for i, env in enumerate(envs)
    ]
    prompts = [renderer.prompt_ids(info["messages"]) for info in infos]
    responses: list[list[int]] = [[] for _ in envs]
    live = list(range(EPISODES))
    for turn in range(TURNS):
        gens = await asyncio.gather(
            *(
                client.generate(
                    prompts[i] + responses[i],
                    CONFIG.sampling.model_copy(
                        update={"max_tokens": TOKENS_PER_TURN, "seed": i * 1000 + turn}
                    ),
                    f"bench/SlowTools-v0#{i}-s0-t{turn}",  # as collect names it: same turn lengths
                )
                for i in live
            )
        )
        for i, gen in zip(live, gens, strict=True):
            responses[i] += gen.token_ids
        steps = await asyncio.gather(
            *(
                loop.run_in_executor(pool, envs[i].step, renderer.action_text(g.token_ids))
                for i, g in zip(live, gens)
            )
        )
        still = []
        for i, (gen, (_, _, term, trunc, info)) in enumerate(zip(gens, steps, strict=True)):
            episode = live[i]
            if term or trunc:
                continue
            before = info["messages"][:-1]
            responses[episode] += renderer.turn_close_ids(gen.token_ids) + renderer.observation_ids(
                before, info["messages"][-1:]
            )
            still.append(episode)
        live = still
    pool.shutdown()


async def _generation_alone(client, trajectories):
    """Replay each episode's turns — same prompts, same generated token counts — with no tool time."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.sampling_params import RequestOutputKind

    async def replay(traj):
        ids, mask = traj.response_ids, traj.response_mask
        start = 0
        turn = 0
        while start < len(ids):
            if mask[start] == 0:
                start += 1
                continue
            end = start
            while end < len(ids) and mask[end] == 1:
                end += 1
            params = SamplingParams(
                min_tokens=end - start,
                max_tokens=end - start,
                ignore_eos=True,
                logprobs=0,
                output_kind=RequestOutputKind.FINAL_ONLY,
            )
            prompt = TokensPrompt(prompt_token_ids=traj.prompt_ids + ids[:start])
            async for _ in client.engine.generate(prompt, params, request_id=f"alone-{traj.task_id}-{turn}"):
                pass
            start, turn = end, turn + 1

    await asyncio.gather(*(replay(t) for t in trajectories))


def test_collect(benchmark, engine):
    _collect(engine)  # warm-up: engine caches, env construction
    trajs, summary = benchmark.pedantic(lambda: _collect(engine), rounds=3, iterations=1)
    assert summary.episodes == EPISODES and all(t.error is None for t in trajs)
    assert all(t.num_turns == TURNS for t in trajs)
    RESULTS["collect"] = benchmark.stats.stats.median
    RESULTS["_trajectories"] = trajs  # type: ignore[assignment]
    RESULTS["idle"] = summary.engine_idle_fraction


def test_turn_barrier(benchmark, engine):
    loop, client, renderer = engine
    benchmark.pedantic(
        lambda: loop.run_until_complete(_turn_barrier(client, renderer)), rounds=3, iterations=1
    )
    RESULTS["turn_barrier"] = benchmark.stats.stats.median


def test_generation_alone(benchmark, engine):
    loop, client, _ = engine
    trajs = RESULTS.get("_trajectories") or _collect(engine)[0]
    benchmark.pedantic(
        lambda: loop.run_until_complete(_generation_alone(client, trajs)), rounds=3, iterations=1
    )
    RESULTS["generation_alone"] = benchmark.stats.stats.median


def test_report_ratios():
    collect_s, barrier_s, alone_s = RESULTS["collect"], RESULTS["turn_barrier"], RESULTS["generation_alone"]
    print(
        f"\n\nrollout of {EPISODES} episodes x {TURNS} turns, tool latency {LATENCIES[0]}-{LATENCIES[-1]} s "
        "(medians of 3 rounds)\n"
        f"  generation alone : {alone_s:7.3f} s   1.00x\n"
        f"  toolgym collect  : {collect_s:7.3f} s   {collect_s / alone_s:.2f}x generation alone "
        f"(engine idle {RESULTS['idle']:.1%})\n"
        f"  turn barrier     : {barrier_s:7.3f} s   {barrier_s / alone_s:.2f}x generation alone, "
        f"{barrier_s / collect_s:.2f}x collect\n"
    )
    assert barrier_s > collect_s
