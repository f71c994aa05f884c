"""``toolgym rollout`` and ``toolgym eval``: argument parsing and wiring; the work is in rollout/collect.py
and rollout/evaluate.py."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from toolgym.util.kwargs import MODEL_DTYPES, env_kwargs_from_args, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    rollout = sub.add_parser("rollout", help="batched multi-turn rollouts with a model, to JSONL")
    add_rollout_arguments(rollout)
    rollout.set_defaults(func=cmd_rollout)

    evaluate = sub.add_parser("eval", help="score a model on an env's evaluation split (pass@1, pass@k)")
    add_eval_arguments(evaluate)
    evaluate.set_defaults(func=cmd_eval)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", default=None, help="model path or HF id, or 'tiny' (the embedded offline model)"
    )
    p.add_argument(
        "--server",
        action="append",
        default=[],
        metavar="URL",
        help="URL of an OpenAI-compatible server (vLLM, SGLang); repeat to spread episodes over several",
    )
    p.add_argument(
        "--ray",
        type=positive_int,
        default=None,
        metavar="N",
        help="N vLLM engines in Ray actors (the cluster at RAY_ADDRESS, else a local Ray), episodes spread",
    )
    p.add_argument(
        "--backend", default="vllm", choices=["vllm", "hf"], help="in-process engine (default vllm)"
    )
    p.add_argument(
        "--device",
        default="auto",
        metavar="auto|cpu|cuda[:N]",
        help="where --backend hf runs the model (default auto: a GPU when there is one)",
    )
    p.add_argument(
        "--dtype",
        default="auto",
        choices=MODEL_DTYPES,
        help="model dtype (default auto: vLLM's choice; for hf bfloat16 on a GPU, float32 on the CPU)",
    )
    p.add_argument("--max-model-len", type=positive_int, default=4096)
    p.add_argument("--format", dest="action_format", default=None, help="action format for every env")
    p.add_argument("--max-turns", type=positive_int, default=None)
    p.add_argument("--env-kwarg", action="append", default=[], metavar="KEY=VALUE", help="extra env kwarg")
    p.add_argument(
        "--max-response-tokens", type=positive_int, default=1024, help="token budget after the prompt"
    )
    p.add_argument("--max-tokens-per-turn", type=positive_int, default=256)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--concurrency", type=positive_int, default=64, help="episodes in flight")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--verbose", action="store_true", help="show the in-process engine's INFO log (default WARNING)"
    )


def add_rollout_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", action="append", required=True, help="env id (repeat for several)")
    p.add_argument("--episodes", type=positive_int, default=8, help="tasks per env (default 8)")
    p.add_argument(
        "--group-size", type=positive_int, default=1, help="samples per task, a GRPO group (default 1)"
    )
    p.add_argument("--out", default=None, help="append trajectories to this JSONL file")
    add_model_arguments(p)


def add_eval_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", required=True, help="env id")
    p.add_argument("-k", type=positive_int, default=1, help="samples per task (pass@k)")
    p.add_argument(
        "--tasks", type=positive_int, default=None, help="first N tasks of the evaluation split (default all)"
    )
    p.add_argument("--out", default=None, help="write the JSON report here")
    p.add_argument("--trajectories", default=None, help="also append trajectories to this JSONL file")
    add_model_arguments(p)


def cmd_rollout(args: argparse.Namespace) -> int:
    from toolgym.rollout.collect import collect
    from toolgym.rollout.keys import EnvRequest

    requests = [EnvRequest(id=e, kwargs=env_kwargs_from_args(args)) for e in args.env]

    trajectories, summary = _run_with_client(
        args,
        lambda client, renderer: collect(
            requests,
            client,
            renderer,
            _rollout_config(args),
            tasks_per_env=args.episodes,
            group_size=args.group_size,
            concurrency=args.concurrency,
            seed=args.seed,
            out=args.out,
            progress=not args.no_progress,
        ),
    )
    print(summary.table())
    if args.out:
        print(f"{len(trajectories)} trajectories appended to {args.out}")
    failed = sum(t.error is not None for t in trajectories)
    if failed:
        first = next(t.error for t in trajectories if t.error)
        print(f"{failed} episode(s) failed; first error: {first}", file=sys.stderr)
    return 1 if failed == len(trajectories) else 0


def cmd_eval(args: argparse.Namespace) -> int:
    from toolgym.rollout.evaluate import evaluate
    from toolgym.rollout.keys import EnvRequest

    report = _run_with_client(
        args,
        lambda client, renderer: evaluate(
            EnvRequest(id=args.env, kwargs=env_kwargs_from_args(args)),
            client,
            renderer,
            _rollout_config(args),
            k=args.k,
            num_tasks=args.tasks,
            concurrency=args.concurrency,
            out=args.trajectories,
            progress=not args.no_progress,
        ),
    )
    print(
        f"{report.env_id}: {report.tasks} tasks x {report.k} samples  pass@1 {report.pass_at_1:.3f}  "
        f"pass@{report.k} {report.pass_at_k:.3f}  reward {report.reward_mean:.3f}  "
        f"turns {report.turns_mean:.2f}  errors {report.errors}"
    )
    if args.out:
        if args.trajectories:
            report.trajectories = str(Path(args.trajectories).resolve())
        Path(args.out).write_text(report.model_dump_json(indent=2))
        print(f"report written to {args.out}")
    return 0


def _run_with_client(args: argparse.Namespace, work: Callable[[Any, Any], Awaitable[Any]]) -> Any:
    """Start the client the arguments ask for, run ``work(client, renderer)``, always close the client."""
    import asyncio  # here, not at the top: building the parser (every command) need not import asyncio

    async def run() -> Any:
        client, renderer = _client_and_renderer(args)
        try:
            result = await work(client, renderer)
            spread = getattr(client, "episodes_per_engine", None)  # several engines (MultiClient)
            if spread is not None:
                print(f"episodes per engine: {', '.join(map(str, spread))}", file=sys.stderr)
            return result
        finally:
            await client.close()

    return asyncio.run(run())


def _client_and_renderer(args: argparse.Namespace):
    from toolgym.rollout.clients.vllm_inproc import quiet_engine_logs
    from toolgym.rollout.models import make_client, make_renderer

    quiet_engine_logs(args.verbose)  # before vLLM is imported: the summary, not the engine's log
    if args.server and not args.model:
        raise ValueError("--server needs --model too (the tokenizer and chat template come from it)")
    if not args.server and not args.model:
        raise ValueError("give --model PATH|tiny or --server URL")
    renderer = make_renderer(args.model)
    engine = {"max_model_len": args.max_model_len} if not args.server and args.backend == "vllm" else {}
    client = make_client(
        args.model,
        server=args.server,
        backend=args.backend,
        device=args.device,
        dtype=args.dtype,
        ray_actors=args.ray,
        **engine,
    )
    return client, renderer


def _rollout_config(args: argparse.Namespace):
    from toolgym.rollout.clients.base import Sampling
    from toolgym.rollout.episode import RolloutConfig

    return RolloutConfig(
        max_response_tokens=args.max_response_tokens,
        max_tokens_per_turn=args.max_tokens_per_turn,
        sampling=Sampling(temperature=args.temperature, top_p=args.top_p),
    )


__all__ = ["add_eval_arguments", "add_rollout_arguments", "cmd_eval", "cmd_rollout", "register"]
