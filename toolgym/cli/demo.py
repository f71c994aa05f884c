"""``toolgym demo``: scripted episodes of every env, then tiny-model vLLM rollouts (``make demo``)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Sequence

import gymnasium as gym

from toolgym.util.kwargs import positive_int
from toolgym.util.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
    demo = sub.add_parser("demo", help="scripted episodes and tiny-model vLLM rollouts of every env")
    demo.add_argument(
        "--episodes", type=positive_int, default=3, help="scripted tasks per env and format (default 3)"
    )
    demo.add_argument("--env", action="append", default=None, help="only these env ids")
    demo.add_argument(
        "--llm-tasks", type=positive_int, default=8, help="tasks per env rolled out by the model"
    )
    demo.add_argument(
        "--group-size", type=positive_int, default=4, help="samples per task in the model rollouts"
    )
    demo.add_argument("--no-llm", action="store_true", help="scripted episodes only (no vLLM)")
    demo.add_argument("--verbose", action="store_true", help="show the engine's INFO log (default WARNING)")
    demo.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """Judged envs (toolgym/Report-v0) with no judge endpoint set play against toolgym's scripted judge on
    loopback, for the scripted episodes and the model rollouts both, as ``toolgym check`` does."""
    import toolgym
    from toolgym.cli.judge_fallback import NOTE, judging_unset

    env_ids = args.env or sorted(toolgym.ENVS)
    unknown = sorted(set(env_ids) - set(toolgym.ENVS))
    if unknown:
        raise ValueError(f"unknown env id(s): {', '.join(unknown)} (toolgym list shows them)")
    with contextlib.ExitStack() as stack:
        for env_id in judging_unset(stack, env_ids):
            print(f"{env_id}: {NOTE}")
        code = _demo_scripted(env_ids, args.episodes)
        if code or args.no_llm:
            return code
        return _demo_rollouts(env_ids, args.llm_tasks, args.group_size, verbose=args.verbose)


def _demo_scripted(env_ids: Sequence[str], episodes: int) -> int:
    """Each env's oracle and a wrong answer, scripted, in every action format: 1.0 and 0.0 expected."""
    import toolgym
    from toolgym.parsers import PARSERS
    from toolgym.testing.scripted import oracle_script, play_script, wrong_script

    rows, failures = [], 0
    for env_id in env_ids:
        if toolgym.ENVS[env_id].oracle is None:
            rows.append([env_id, "-", "(no oracle registered)", "", "", "", ""])
            continue
        for fmt in sorted(PARSERS):
            env = gym.make(env_id, action_format=fmt)
            inner = env.unwrapped
            assert isinstance(inner, toolgym.ToolEnv), env_id
            for policy, script_for in (("oracle", oracle_script), ("wrong answer", wrong_script)):
                summaries = []
                for seed in range(episodes):
                    env.reset(seed=seed)
                    task = inner.task
                    assert task is not None  # reset drew it
                    summaries.append(play_script(env, script_for(env_id, task), options={"task": task}))
                mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
                reward = mean([s.reward for s in summaries])
                expected = 1.0 if policy == "oracle" else 0.0
                failures += reward != expected
                rows.append(
                    [
                        env_id,
                        fmt,
                        policy,
                        str(len(summaries)),
                        f"{reward:.2f}",
                        f"{mean([s.turns for s in summaries]):.1f}",
                        f"{mean([s.tool_calls for s in summaries]):.1f}",
                    ]
                )
            env.close()
    print("== scripted episodes: each verifier's reward paths, in every action format")
    print(format_table(["env", "format", "policy", "episodes", "reward", "turns", "tool calls"], rows))
    if failures:
        print(f"\n{failures} row(s) did not get the expected reward (oracle 1.0, wrong answer 0.0)")
        return 1
    print("\nevery oracle row scored 1.0 and every wrong-answer row 0.0")
    return 0


def _demo_rollouts(env_ids: Sequence[str], tasks: int, group_size: int, verbose: bool = False) -> int:
    """Real batched multi-turn rollouts on the embedded tiny model with in-process vLLM (CPU here)."""
    import asyncio

    from toolgym.rollout.clients.vllm_inproc import quiet_engine_logs

    quiet_engine_logs(verbose)  # the demo's tables, not the engine's start-up and shutdown log

    from toolgym.rollout import RolloutConfig, check_prefix_property, collect
    from toolgym.rollout.models import make_client, make_renderer

    print(f"\n== model rollouts: tiny random Qwen2 on in-process vLLM, {tasks} tasks x {group_size} per env")
    print(
        "   (random weights: expect nonsense actions and reward 0; this shows the engine and token plumbing)"
    )
    renderer = make_renderer("tiny")
    problems = check_prefix_property(renderer)
    if problems:
        print("chat template problems: " + "; ".join(problems))
        return 1

    async def run():
        client = make_client("tiny")
        try:
            return await collect(
                env_ids,
                client,
                renderer,
                RolloutConfig(max_response_tokens=512, max_tokens_per_turn=96),
                tasks_per_env=tasks,
                group_size=group_size,
                progress=sys.stderr.isatty(),
            )
        finally:
            await client.close()

    trajectories, summary = asyncio.run(run())
    print(summary.table())
    errors = [t.error for t in trajectories if t.error]
    if errors:
        print(f"{len(errors)} episode(s) failed; first: {errors[0]}")
        return 1
    masked = sum(t.generated_tokens for t in trajectories)
    total = sum(len(t.response_ids) for t in trajectories)
    print(
        f"response tokens: {total}, of which generated (mask 1): {masked}, observation/template (mask 0): "
        f"{total - masked}"
    )
    return 0
