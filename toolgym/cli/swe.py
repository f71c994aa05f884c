"""``toolgym swe mine REPO --out FILE``: SWE-v0 tasks (SWE-bench-schema rows) from a local repository."""

from __future__ import annotations

import argparse
import sys

from toolgym.util.kwargs import positive_int


def register(sub: argparse._SubParsersAction) -> None:
    swe = sub.add_parser("swe", help="repository tasks for toolgym/SWE-v0 (`toolgym swe mine --help`)")
    verbs = swe.add_subparsers(dest="verb", metavar="VERB", required=True)
    mine = verbs.add_parser(
        "mine",
        help="turn a local Python repository with a passing test suite into SWE-bench-schema tasks",
        description="Runs the repository's tests in the sandbox, mutates the functions they call, keeps each "
        "mutation that makes tests fail and writes one row per kept bug. The buggy states are commits in the "
        "store's clone (REPOS/owner__name, refs/toolgym/mined/*), not in REPO. Play them with "
        "gym.make('toolgym/SWE-v0', tasks=OUT, repos=REPOS).",
    )
    mine.add_argument(
        "repo", metavar="REPO", help="the repository's directory (a git clone, or any directory)"
    )
    mine.add_argument("--out", required=True, metavar="FILE", help="the rows to write (JSONL)")
    mine.add_argument(
        "--repos", default=None, metavar="DIR", help="the clones' store (default: repos/ beside --out)"
    )
    mine.add_argument("--max-tasks", type=positive_int, default=50, help="rows at most (default 50)")
    mine.add_argument(
        "--per-function", type=positive_int, default=1, help="bugs kept per function at most (default 1)"
    )
    mine.add_argument("--seed", type=int, default=0, help="the order functions and mutations are tried in")
    mine.add_argument("--python", default=None, help="the interpreter the tests run with (default this one)")
    mine.add_argument("--test-timeout", type=float, default=60.0, help="seconds per test (default 60)")
    mine.set_defaults(func=cmd_mine)


def cmd_mine(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from toolgym.swe.mine import MiningRefused, mine

    bar = tqdm(total=0, unit="function", desc="mining", file=sys.stderr, disable=None)

    def progress(done: int, total: int, what: str) -> None:
        bar.total = total
        bar.set_postfix_str(what[-60:], refresh=False)
        bar.update(done - bar.n)

    try:
        report = mine(
            args.repo,
            args.out,
            args.repos,
            max_tasks=args.max_tasks,
            per_function=args.per_function,
            seed=args.seed,
            python=args.python,
            test_timeout=args.test_timeout,
            progress=progress,
        )
    except MiningRefused as exc:
        bar.close()
        print(f"toolgym swe mine: refused: {exc}", file=sys.stderr)
        return 1
    bar.close()
    assert report.clone is not None  # mine() always names the store's clone
    print(
        f"{report.repo}: {report.tests} passing tests, {report.functions} functions they call, "
        f"{report.mutants_tried} mutants tried, {len(report.rows)} tasks written to {args.out}\n"
        f"buggy states: commits in {report.clone} (refs/toolgym/mined/*)\n"
        f"play them: gym.make('toolgym/SWE-v0', tasks={str(args.out)!r}, repos={str(report.clone.parent)!r})"
    )
    return 0
