"""Rollout wall time: toolgym's collector vs the verl adapter vs the turn-barrier loop peers use, against
two lower bounds.

Same episodes, same seeds, same tiny model on in-process vLLM, in one run:

- ``collect``: every episode is its own asyncio task; a tool call blocks only its own episode.
- ``verl_adapter``: the same episodes exported to Parquet and played by verl's real ``AgentLoopWorker``
  running toolgym's agent loop (one instance per sample, verl's padding and batching), through a stand-in
  for verl's vLLM server over the same engine: the adapter's overhead over ``collect``.
- ``turn_barrier``: generate for all live episodes, wait for all, step all envs (in parallel threads), wait
  for all, repeat — the loop GEM/verl-tool-style batch rollouts run. Each turn costs its slowest
  generation plus its slowest tool call.
- ``generation_alone``: the exact prompts and generated token counts ``collect`` recorded, replayed with no
  tools at all (the engine is never idle). It ignores that an episode's tool calls sit between its turns.
- ``slowest chain``: the true lower bound of a rollout, the largest over episodes of that episode's own
  generation time plus its own tool time, as measured inside the ``collect`` run: no schedule can finish
  before its slowest episode has generated its turns and waited for its tools.

Two things vary between episodes, as they do in real RL rollouts: the tool's latency (10-500 ms, like short
and long sandbox runs) and the length of each generated turn (16-256 tokens, long-tailed, as a real policy's
turns are; the random tiny model would otherwise always run to ``max_tokens``). Every turn calls the tool, so
the tiny model's nonsense text still exercises the tool path.
Targets: collect <= 1.15x generation alone, verl adapter <= 1.05x collect, turn-barrier >= 1.5x collect.
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
    """Caps each request's max_tokens at its turn's length: stands in for a policy's varying turn lengths.

    A turn's length depends on the episode's first prompt (its task) and the turn number, not on the request
    id, so every loop measured here — whatever ids it gives its episodes — generates the same turns.
    """

    def __init__(self, client):
        self.client = client
        self.reset()

    def reset(self):
        self.first_prompt: dict[str, int] = {}
        self.turns: dict[str, int] = {}

    @property
    def engine(self):
        return self.client.engine

    async def generate(self, prompt_ids, sampling, request_id):
        task = self.first_prompt.setdefault(request_id, zlib.crc32(str(prompt_ids).encode()))
        turn = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        length = min(sampling.max_tokens, turn_length(f"{task}-t{turn}"))
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
                    f"barrier-{i}",
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
    _, client, _ = engine
    _collect(engine)  # warm-up: engine caches, env construction
    runs = []

    def run():
        runs.append(_collect(engine))
        return runs[-1]

    trajs, summary = benchmark.pedantic(run, setup=client.reset, rounds=3, iterations=1)
    assert summary.episodes == EPISODES and all(t.error is None for t in trajs)
    assert all(t.num_turns == TURNS for t in trajs)
    RESULTS["collect"] = benchmark.stats.stats.median
    RESULTS["_trajectories"] = trajs  # type: ignore[assignment]
    RESULTS["idle"] = summary.engine_idle_fraction
    # the slowest episode's own chain (its generation plus its tools), in each run; the median over runs
    chains = sorted(max(t.generation_s + t.env_s for t in r[0]) for r in runs)
    RESULTS["slowest_chain"] = chains[len(chains) // 2]


def _verl_batch(tmp_path_factory):
    from toolgym.testing.verl import verl_config
    from toolgym.trainers.verl_adapter.export import export_verl

    out = tmp_path_factory.mktemp("verl")
    path = export_verl(["bench/SlowTools-v0"], n=EPISODES, out=out)
    config = verl_config(
        prompt_length=512,
        response_length=CONFIG.max_response_tokens,
        overrides=["actor_rollout_ref.rollout.temperature=1.0"],
    )
    return path, config


def test_verl_adapter(benchmark, engine, tmp_path_factory):
    from toolgym.testing.verl import ClientServerStandIn, agent_loop_worker, dataset_batch

    loop, client, _ = engine
    path, config = _verl_batch(tmp_path_factory)
    loops = tmp_path_factory.mktemp("loops") / "loops.yaml"
    loops.write_text(  # collect's per-turn budget, for the same turns
        "- name: toolgym\n  _target_: toolgym.trainers.verl_adapter.agent_loop.ToolgymAgentLoop\n"
        f"  max_tokens_per_turn: {CONFIG.max_tokens_per_turn}\n"
    )
    config.actor_rollout_ref.rollout.agent.agent_loop_config_path = str(loops)
    worker = agent_loop_worker(ClientServerStandIn(client), config)

    def fresh_batch():  # the trainer's data loader, outside the timed rollout
        client.reset()
        return (dataset_batch(path, config, worker.tokenizer),), {}

    def run(batch):
        return loop.run_until_complete(worker.generate_sequences(batch))

    run(*fresh_batch()[0])  # warm-up: env construction in the worker's pool
    out = benchmark.pedantic(run, setup=fresh_batch, rounds=3, iterations=1)
    assert len(out) == EPISODES and not any(out.non_tensor_batch["toolgym_error"])
    assert set(out.non_tensor_batch["turns"]) == {float(TURNS)}
    # the same turn lengths as collect's (the random model may end a turn early with EOS in either run)
    generated = int(out.batch["response_mask"].sum())
    collected = sum(t.generated_tokens for t in RESULTS.get("_trajectories") or [])
    assert not collected or abs(generated - collected) <= 0.05 * collected
    RESULTS["verl_adapter"] = benchmark.stats.stats.median
    RESULTS["verl_tokens"], RESULTS["collect_tokens"] = generated, collected


def test_turn_barrier(benchmark, engine):
    loop, client, renderer = engine
    benchmark.pedantic(
        lambda: loop.run_until_complete(_turn_barrier(client, renderer)),
        setup=client.reset,
        rounds=3,
        iterations=1,
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
    verl_s, chain_s = RESULTS["verl_adapter"], RESULTS["slowest_chain"]
    print(
        f"\n\nrollout of {EPISODES} episodes x {TURNS} turns, tool latency {LATENCIES[0]}-{LATENCIES[-1]} s "
        "(medians of 3 rounds)\n"
        f"  generation alone : {alone_s:7.3f} s   1.00x\n"
        f"  slowest chain    : {chain_s:7.3f} s   {chain_s / alone_s:.2f}x generation alone "
        "(the slowest episode's own generation + tools: the true lower bound)\n"
        f"  toolgym collect  : {collect_s:7.3f} s   {collect_s / alone_s:.2f}x generation alone, "
        f"{collect_s / chain_s:.2f}x the slowest chain (engine idle {RESULTS['idle']:.1%})\n"
        f"  verl adapter     : {verl_s:7.3f} s   {verl_s / collect_s:.2f}x collect "
        f"(verl's AgentLoopWorker + toolgym's agent loop, same episodes; {RESULTS['verl_tokens']} vs "
        f"{RESULTS['collect_tokens']} tokens generated)\n"
        f"  turn barrier     : {barrier_s:7.3f} s   {barrier_s / alone_s:.2f}x generation alone, "
        f"{barrier_s / collect_s:.2f}x collect\n"
    )
    assert barrier_s > collect_s
