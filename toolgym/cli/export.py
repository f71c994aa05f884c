"""``toolgym export TRAINER``: training data a trainer loads as is."""

from __future__ import annotations

import argparse

from toolgym.cli.argtypes import positive_int
from toolgym.core.kwargs import parse_kwargs


def register(sub: argparse._SubParsersAction) -> None:
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


def cmd_export_verl(args: argparse.Namespace) -> int:
    from collections import Counter

    import pyarrow.parquet as pq

    from toolgym.rollout.pool import EnvRequest
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
