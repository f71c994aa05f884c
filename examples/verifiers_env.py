"""Evaluate a toolgym env with verifiers (>= 0.4): verifiers' own rollout, interception server and rubric.

Without --base-url the "model" is a scripted OpenAI-compatible server that writes the env's oracle, so
every episode should score 1.0. With --base-url (any OpenAI-compatible server, e.g. `vllm serve MODEL`)
a real model plays; add --vllm-stops there so each turn stops after its first tool call.
The same env from the command line:  vf-eval toolgym-verifiers --env.taskset.env toolgym/Calculator-v0 ...

    python examples/verifiers_env.py [--env toolgym/Calculator-v0] [--n 3] [--base-url URL --model NAME]
"""

import argparse
import asyncio
import contextlib

import verifiers.v1 as vf

from toolgym.rollout.keys import EpisodeKey
from toolgym.testing.openai_scripted import scripted_chat_app
from toolgym.testing.scripted import oracle_policy
from toolgym.testing.servers import serve_in_thread
from toolgym.trainers.verifiers_adapter import load_environment

parser = argparse.ArgumentParser()
parser.add_argument("--env", default="toolgym/Calculator-v0")
parser.add_argument("--n", type=int, default=3)
parser.add_argument(
    "--base-url", help="an OpenAI-compatible server's URL ending in /v1 (default: the oracle)"
)
parser.add_argument("--model", default="scripted")
parser.add_argument("--vllm-stops", action="store_true")
args = parser.parse_args()

# a verifiers.v1.Env: n episodes of the env (tasks pinned per row), our tools, parser and verifier
env = load_environment(args.env, n=args.n, vllm_stops=args.vllm_stops)


async def main(base_url: str) -> None:
    ctx = vf.ModelContext(model=args.model, client=vf.EvalClientConfig(base_url=base_url))
    async with env.serving():  # verifiers' interception server (and shared tools) for the run
        episodes = await asyncio.gather(*(env.run_episode(task, ctx) for task in env.taskset))
    for episode in episodes:
        trace = episode.traces[0]
        print(
            f"{trace.task.data.name}: reward={trace.reward} rewards={trace.rewards} metrics={trace.metrics}"
        )


if args.base_url:
    server = contextlib.nullcontext(args.base_url)
else:  # the oracle behind the OpenAI API
    tasks = [EpisodeKey.from_json(task.data.key).task for task in env.taskset]
    server = serve_in_thread(scripted_chat_app(oracle_policy(args.env, tasks)))
with server as url:
    asyncio.run(main(url if args.base_url else f"{url}/v1"))
