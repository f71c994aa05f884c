"""``toolgym list``, ``toolgym play`` and ``toolgym check``: the commands about envs themselves."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import TextIO

import gymnasium as gym

from toolgym.util.kwargs import parse_kwargs, positive_int
from toolgym.util.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
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
    play.add_argument("--max-turns", type=positive_int, default=None)
    play.add_argument(
        "-k",
        "--kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="env kwarg (JSON value or str)",
    )
    play.set_defaults(func=cmd_play)

    check = sub.add_parser("check", help="the env check kit: is an env fit for RL training (exit 1 if not)")
    check.add_argument("env_ids", nargs="*", metavar="ENV_ID", help="env ids to check")
    check.add_argument("--all", action="store_true", help="every registered env (built-in and plugins)")
    check.add_argument(
        "--format", dest="formats", action="append", metavar="F", help="only this action format (repeatable)"
    )
    check.add_argument(
        "--episodes", type=positive_int, default=8, help="seeded episodes per check (default 8)"
    )
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


def cmd_list(args: argparse.Namespace) -> int:
    """From the catalogue tables (toolgym's and the plugins'), importing no env module; an env or tool
    registered otherwise (an older-form plugin, imported by ``import toolgym``) is listed from the
    registry."""
    import toolgym  # noqa: F401 - reads the catalogue tables
    from toolgym.core.registry import CATALOGUE, ENVS, TOOL_CATALOGUE

    rows = {env_id: {"id": env_id, **row} for env_id, row in CATALOGUE.items()}
    for env_id, spec in ENVS.recorded().items():
        rows[env_id] = {
            "id": env_id,
            "tools": list(spec.tools),
            "task_source": spec.task_source,
            "description": spec.description,
        }
    envs = [
        {key: row.get(key, "") for key in ("id", "tools", "task_source", "description")}
        for _, row in sorted(rows.items())
    ]
    summaries = {name: row["summary"] for name, row in TOOL_CATALOGUE.items()}
    registered = sys.modules.get("toolgym.tools.base")  # imported already where a plugin registered a tool
    if registered is not None:
        summaries.update({name: cls.summary() for name, cls in registered.TOOLS.items()})
    tools = [{"name": n, "description": d} for n, d in sorted(summaries.items())]
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


def cmd_check(args: argparse.Namespace) -> int:
    """The logic is ``toolgym.testing.check``; this prints its reports."""
    import toolgym
    from toolgym.cli.judge_fallback import NOTE, judging_unset
    from toolgym.testing.check import check_toolenv

    env_ids = sorted(toolgym.ENVS) if args.all else args.env_ids
    if not env_ids:
        raise ValueError("give env ids to check, or --all")
    tokenizer = None if args.tokenizer == "none" else args.tokenizer
    kwargs = parse_kwargs(args.kwarg)
    reports = []
    with contextlib.ExitStack() as stack:
        unjudged = judging_unset(stack, env_ids, kwargs)
        for env_id in env_ids:
            note = NOTE if env_id in unjudged else ""
            report = check_toolenv(
                env_id,
                episodes=args.episodes,
                seed=args.seed,
                tokenizer=tokenizer,
                formats=args.formats,
                env_kwargs=kwargs,
            )
            reports.append(report)
            if args.json:
                if note:
                    print(f"{env_id}: {note}", file=sys.stderr)
                continue
            verdict = "passed" if report.ok else "FAILED"
            print(f"== {report.env}: {verdict} ({', '.join(report.formats)}; {report.duration_s:.1f} s)")
            if note:
                print(note)
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
