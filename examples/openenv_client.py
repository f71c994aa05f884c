"""Serve a toolgym env over OpenEnv and play one episode with OpenEnv's own generic client.

    python examples/openenv_client.py                       # serves toolgym/Calculator-v0 in this process
    python examples/openenv_client.py --env toolgym/Math-v0 --seed 3
    python examples/openenv_client.py --url http://127.0.0.1:8000   # a running `toolgym serve openenv`

The client is OpenEnv's ``GenericEnvClient`` (plain dicts, no toolgym code). The policy is the env's scripted
oracle, standing in for an LLM: a model would read ``result.observation["messages"]`` (the chat so far, in
pieces) and write the next turn as ``{"message": ...}``.
"""

from __future__ import annotations

import argparse
import contextlib

import gymnasium as gym
from openenv.core.generic_client import GenericEnvClient

import toolgym  # noqa: F401  (registers the envs)
from toolgym.server.openenv import create_app
from toolgym.testing.scripted import oracle_script, script_texts
from toolgym.testing.servers import serve_in_thread


def oracle_turns(env_id: str, seed: int) -> list[str]:
    """The oracle's turns for the task ``reset(seed=seed)`` draws (a stand-in for the model)."""
    env = gym.make(env_id)
    env.reset(seed=seed)
    return script_texts(env, oracle_script(env_id, env.unwrapped.task))


def main(argv: list[str] | None = None) -> float:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="toolgym/Calculator-v0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--url", help="a running OpenEnv server (default: serve --env in this process)")
    args = p.parse_args(argv)

    with contextlib.ExitStack() as stack:
        url = args.url or stack.enter_context(serve_in_thread(create_app(args.env, max_sessions=4)))
        env = stack.enter_context(GenericEnvClient(base_url=url).sync())
        result = env.reset(seed=args.seed)
        print(f"[task {result.observation['task_id']}] {result.observation['text']}")
        for turn in oracle_turns(args.env, args.seed):
            result = env.step({"message": turn})
            print(f"[model] {turn}\n[env] {result.observation['text'] or '(done)'}")
            if result.done:
                break
        verdict = result.observation["verdict"]
        print(
            f"reward {result.reward} (passed: {verdict['passed']}) after {result.observation['turn']} turns"
        )
    return float(result.reward)


if __name__ == "__main__":
    main()
