"""``toolgym export TRAINER``: training data a trainer loads as is."""

from __future__ import annotations

import argparse

from toolgym.util.kwargs import parse_kwargs, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    export = sub.add_parser(
        "export",
        help="training data for a trainer, or an OpenEnv package (`toolgym export verl|openenv --help`)",
    )
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
    verl.add_argument(
        "--n", type=positive_int, required=True, help="rows in all, shared equally among the envs"
    )
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

    openenv = targets.add_parser(
        "openenv", help="an OpenEnv environment directory (openenv.yaml, server/app.py, server/Dockerfile)"
    )
    openenv.add_argument("--env", required=True, metavar="ID", help="env id, e.g. toolgym/Calculator-v0")
    openenv.add_argument(
        "-k",
        "--env-kwarg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="gym.make kwarg (repeatable)",
    )
    openenv.add_argument("--out", required=True, metavar="DIR", help="the environment directory to write")
    openenv.add_argument(
        "--max-sessions", type=positive_int, default=256, help="concurrent sessions (default 256)"
    )
    openenv.add_argument("--name", default=None, help="package and Space name (default from the env id)")
    openenv.add_argument(
        "--toolgym-requirement",
        default=None,
        metavar="SPEC",
        help="the toolgym dependency line (default toolgym[openenv]>=this version), e.g. a git URL",
    )
    openenv.set_defaults(func=cmd_export_openenv)


def cmd_export_openenv(args: argparse.Namespace) -> int:
    from toolgym.server.openenv_export import write_openenv_package

    files = write_openenv_package(
        args.env,
        args.out,
        env_kwargs=parse_kwargs(args.env_kwarg),
        max_sessions=args.max_sessions,
        name=args.name,
        toolgym_requirement=args.toolgym_requirement,
    )
    names = ", ".join(sorted(str(f.relative_to(args.out)) for f in files))
    print(f"wrote {len(files)} files to {args.out}: {names}")
    print(f"next: cd {args.out} && uv lock && openenv validate && openenv build (or openenv push)")
    return 0


def cmd_export_verl(args: argparse.Namespace) -> int:
    from collections import Counter

    import pyarrow.parquet as pq

    from toolgym.rollout.keys import EnvRequest
    from toolgym.trainers.verl_adapter.export import export_verl, prompt_token_lengths

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
