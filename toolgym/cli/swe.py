"""``toolgym swe``: SWE-v0's repository tasks. ``mine REPO --out FILE``: rows from a local repository;
``envs build ROWS --repos DIR --out ENVS``: one environment per repository version, from the rows' recipes;
``envs report ENVS``: their disk as it lies, build seconds and validation, per environment and repository;
``validate ROWS --repos DIR --envs ENVS``: SWE-bench's validation of every row, here."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolgym.util.kwargs import positive_float, positive_int
from toolgym.util.table import format_table


def register(sub: argparse._SubParsersAction) -> None:
    from toolgym.rewards.swe import DEFAULT_TEST_TIMEOUT, DEFAULT_TIMEOUT

    swe = sub.add_parser(
        "swe",
        help="repository tasks for toolgym/SWE-v0: mine rows, build their environments, validate them",
    )
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
    history = mine.add_argument_group(
        "--history",
        "rows from the repository's own fix commits (source and tests changed; the tests fail at the parent "
        "and pass at the commit), each in the repository's environment, built once into --envs",
    )
    history.add_argument("--history", action="store_true", help="mine the history instead of mutating")
    history.add_argument(
        "--max-commits", type=positive_int, default=200, help="commits to look at (default 200)"
    )
    history.add_argument(
        "--envs", default=None, metavar="ENVS", help="environments (default: envs/ beside --out)"
    )
    history.add_argument("--recipes", default=None, metavar="FILE", help="your recipes (YAML or JSON)")
    history.add_argument(
        "--writer", default=None, metavar="URL", help="an OpenAI-compatible endpoint that writes each issue"
    )
    history.add_argument("--writer-model", default=None, metavar="NAME", help="the writer's model")
    mine.set_defaults(func=cmd_mine)

    envs = verbs.add_parser("envs", help="the environments SWE-bench-schema rows run in (`envs build`)")
    env_verbs = envs.add_subparsers(dest="envs_verb", metavar="VERB", required=True)
    build = env_verbs.add_parser(
        "build",
        help="build one Python environment per repository version the rows need, from their recipes, with uv",
        description="Plans one environment per distinct (repository, setup commit, recipe) and builds each "
        "once into ENVS/<key>/ (a venv, the repository installed so that it imports from the episode's "
        "workspace, its compiled parts, a manifest and a build log). Recipes come from --recipes, the rows' "
        "install_config, SWE-bench's specs, SWE-smith's profiles, or are inferred. Then: "
        "gym.make('toolgym/SWE-v0', tasks=ROWS, repos=DIR, envs=ENVS).",
    )
    _rows_and_repos(build, "builds")
    build.add_argument("--out", required=True, metavar="ENVS", help="the environments' directory")
    build.add_argument("--recipes", default=None, metavar="FILE", help="your recipes (YAML or JSON)")
    build.add_argument(
        "--exclude-newer",
        nargs="?",
        const=True,
        default=False,
        type=_exclusion_date,
        metavar="DATE",
        help="resolve each environment's packages as of its newest row's created_at, or as of DATE "
        "(YYYY-MM-DD, or an RFC 3339 time) for every environment; a recipe's pins win over the date",
    )
    build.add_argument(
        "--download-python",
        action="store_true",
        help="where the machine has no Python of a recipe's version nor a newer one, install it with uv "
        "(uv python install: needs uv's download site)",
    )
    build.add_argument(
        "--sources",
        default=None,
        type=_sources_dir,
        metavar="DIR",
        help="a directory of the sources a repository's build downloads, which this machine cannot: "
        "matplotlib's FreeType 2.6.1, which its image tests need (freetype-2.6.1.tar.gz, or the tree "
        "freetype-2.6.1/), and Qhull; the build takes them from DIR instead",
    )
    build.set_defaults(func=cmd_envs_build)
    report = env_verbs.add_parser(
        "report",
        help="what the built environments cost on disk and took to build, and their rows' validation",
        description="Per environment and per repository: the build's seconds, the disk it holds as it lies "
        "(each inode once, as du counts: uv links packages from its cache, so adding up sizes overstates "
        "it; 'shared': the part also linked from elsewhere, uv's cache or another environment) and how many "
        "of its rows validated, in how many seconds (median).",
    )
    report.add_argument("envs", metavar="ENVS", help="the environments' directory")
    report.add_argument("--json", default=None, metavar="FILE", help="also write the figures as JSON")
    report.set_defaults(func=cmd_envs_report)

    validate = verbs.add_parser(
        "validate",
        help="SWE-bench's validation of every row here: the gold patch passes, the bare base fails",
        description="Runs each row's gold patch and its bare base commit through SWE-v0's judge in the row's "
        "environment, in parallel; the results go to ENVS/validation/, which SWE-v0 reads when it draws a "
        "row, so training does not validate twice.",
    )
    _rows_and_repos(validate, "rows")
    validate.add_argument("--envs", required=True, metavar="ENVS", help="the built environments")
    validate.add_argument("--out", default=None, metavar="FILE", help="write each row's result (JSONL)")
    validate.add_argument(
        "--test-timeout",
        type=positive_float,
        default=DEFAULT_TEST_TIMEOUT,
        metavar="S",
        help=f"seconds per test; past it the test fails (default {DEFAULT_TEST_TIMEOUT:g}; a slow machine "
        "may need more: SWE-bench's harness bounds only the whole run)",
    )
    validate.add_argument(
        "--judge-timeout",
        type=positive_float,
        default=DEFAULT_TIMEOUT,
        metavar="S",
        help=f"seconds for one judge run, every test together (default {DEFAULT_TIMEOUT:g})",
    )
    validate.set_defaults(func=cmd_validate)


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})?)?")


def _sources_dir(value: str) -> str:
    """``--sources DIR``: an existing directory; refused at once else (not after the first checkout)."""
    if not os.path.isdir(value):
        raise argparse.ArgumentTypeError(f"{value} is not a directory")
    return value


def _exclusion_date(text: str) -> str:
    """``--exclude-newer DATE``: a date uv reads (YYYY-MM-DD or an RFC 3339 time); refused at once else."""
    if not _DATE.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a date: give YYYY-MM-DD or 2021-06-01T00:00:00Z")
    return text


def _rows_and_repos(parser: argparse.ArgumentParser, jobs: str) -> None:
    """ROWS, --repos and --jobs, as every command over a row file takes them."""
    parser.add_argument("rows", metavar="ROWS", help="SWE-bench-schema rows (.jsonl, .json, .parquet)")
    parser.add_argument("--repos", required=True, metavar="DIR", help="the owner__name clones")
    parser.add_argument("--jobs", type=positive_int, default=2, help=f"{jobs} at once (default 2)")


def _mining(unit: str, desc: str, run: Callable[[Callable[[int, int, str], None]], Any]) -> Any:
    """``run(progress)`` with a progress bar; its report, or None after printing why the miner refused."""
    from tqdm import tqdm

    from toolgym.swe.mine import MiningRefused

    bar = tqdm(total=0, unit=unit, desc=desc, file=sys.stderr, disable=None)

    def progress(done: int, total: int, what: str) -> None:
        bar.total = total
        bar.set_postfix_str(what[-60:], refresh=False)
        bar.update(done - bar.n)

    try:
        return run(progress)
    except MiningRefused as exc:
        print(f"toolgym swe mine: refused: {exc}", file=sys.stderr)
        return None
    finally:
        bar.close()


def cmd_mine(args: argparse.Namespace) -> int:
    if args.history:
        return cmd_mine_history(args)
    from toolgym.swe.mine import mine

    report = _mining(
        "function",
        "mining",
        lambda progress: mine(
            args.repo,
            args.out,
            args.repos,
            max_tasks=args.max_tasks,
            per_function=args.per_function,
            seed=args.seed,
            python=args.python,
            test_timeout=args.test_timeout,
            progress=progress,
        ),
    )
    if report is None:
        return 1
    assert report.clone is not None  # mine() always names the store's clone
    print(
        f"{report.repo}: {report.tests} passing tests, {report.functions} functions they call, "
        f"{report.mutants_tried} mutants tried, {len(report.rows)} tasks written to {args.out}\n"
        f"buggy states: commits in {report.clone} (refs/toolgym/mined/*)\n"
        f"play them: gym.make('toolgym/SWE-v0', tasks={str(args.out)!r}, repos={str(report.clone.parent)!r})"
    )
    return 0


def cmd_mine_history(args: argparse.Namespace) -> int:
    from toolgym.swe.history import endpoint_writer, mine_history

    if args.writer and not args.writer_model:
        print(
            "toolgym swe mine: --writer needs --writer-model (the model the endpoint serves)", file=sys.stderr
        )
        return 2
    writer = endpoint_writer(args.writer, args.writer_model) if args.writer else None
    report = _mining(
        "commit",
        "mining history",
        lambda progress: mine_history(
            args.repo,
            args.out,
            args.repos,
            envs=args.envs,
            recipes=args.recipes,
            python=args.python,
            max_commits=args.max_commits,
            max_tasks=args.max_tasks,
            test_timeout=args.test_timeout,
            writer=writer,
            progress=progress,
        ),
    )
    if report is None:
        return 1
    assert report.clone is not None
    print(
        f"{report.repo}: {report.commits} commits change source and tests, {report.mutants_tried} tried, "
        f"{len(report.rows)} rows written to {args.out}\n"
        f"play them: gym.make('toolgym/SWE-v0', tasks={str(args.out)!r}, repos={str(report.clone.parent)!r}"
        + (", envs=...)" if args.python is None else ", python=...)")
    )
    return 0


def cmd_envs_build(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from toolgym.envs.task_files import task_rows
    from toolgym.swe.environments import BuildFailed, build_all, plan
    from toolgym.swe.recipes import RecipeError, UserRecipes

    try:
        rows = list(task_rows(args.rows))
        plans = plan(rows, UserRecipes(args.recipes) if args.recipes else None)
    except (OSError, ValueError, RecipeError) as exc:
        print(f"toolgym swe envs build: {exc}", file=sys.stderr)
        return 2
    print(f"{len(rows)} rows need {len(plans)} environment(s); building into {args.out}", file=sys.stderr)
    bar = tqdm(total=len(plans), unit="env", desc="building", file=sys.stderr, disable=None)
    lines = []

    def progress(entry, result) -> None:
        bar.update(1)
        bar.set_postfix_str(entry.repo[-40:], refresh=False)
        if isinstance(result, BuildFailed):
            lines.append(
                [entry.repo, entry.key, "FAILED", "", "", f"step {result.step}: {result.message}"[:150]]
            )
        else:
            py = result["python"]
            python = py["used"] + (
                "" if py["used"] == py["asked"] or py["asked"] is None else f" (asked {py['asked']})"
            )
            state = "reused" if result.get("reused") else f"built in {result['build_s']:.0f} s"
            size = f"{result['size_bytes'] / 2**20:.0f} MiB"
            lines.append([entry.repo, entry.key, state, python, size, f"{len(entry.rows)} rows"])

    results = build_all(plans, args.repos, args.out, jobs=args.jobs, exclude_newer=args.exclude_newer,
                        download_python=args.download_python, sources=args.sources,
                        progress=progress)  # fmt: skip
    bar.close()
    print(format_table(["repository", "environment", "build", "python", "size", ""], sorted(lines)))
    failed = [r for r in results.values() if isinstance(r, BuildFailed)]
    for failure in failed:
        print(f"failed: {failure}", file=sys.stderr)
    print(f"{len(results) - len(failed)} of {len(results)} environment(s) ready in {args.out}")
    return 1 if failed else 0


def _mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def cmd_envs_report(args: argparse.Namespace) -> int:
    import json

    from toolgym.swe.store_report import Validation, store_report

    try:
        report = store_report(args.envs)
    except ValueError as exc:
        print(f"toolgym swe envs report: {exc}", file=sys.stderr)
        return 2

    def judged(v: Validation) -> list[str]:
        median = "" if v.median_s is None else f"{v.median_s:.1f}"
        return [f"{v.valid}/{v.rows}" if v.rows else "", median]

    headers = ["repository", "environment", "python", "build s", "on disk", "shared", "rows", "valid"]
    headers.append("median s")
    print(format_table(headers, [
        [e.repo, e.key, e.python, "" if e.build_s is None else f"{e.build_s:.0f}",
         _mib(e.disk.on_disk_bytes), _mib(e.disk.shared_bytes), e.rows, *judged(e.validation)]
        for e in report.environments
    ]))  # fmt: skip
    print()
    print(format_table(["repository", "environments", "build s", "on disk, together", "valid", "median s"], [
        [r.repo, r.environments, "" if not r.build_s else f"{r.build_s[0]:.0f} to {r.build_s[-1]:.0f}",
         _mib(r.disk.on_disk_bytes), *judged(r.validation)]
        for r in report.repositories
    ]))  # fmt: skip
    t = report.total
    print(
        f"\n{args.envs}: {len(report.environments)} environment(s), {t.files} files; "
        f"{_mib(t.listed_bytes)} added up, {_mib(t.on_disk_bytes)} on disk (each inode once), "
        f"{_mib(t.shared_bytes)} of it also linked from outside the store (uv's cache)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(report.as_dict(), indent=1))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    import json
    from concurrent.futures import ThreadPoolExecutor

    import gymnasium as gym
    from tqdm import tqdm

    import toolgym  # noqa: F401 - registers the envs
    from toolgym.envs.swe_tasks import TaskRefused
    from toolgym.swe.validate import ValidationCache

    env = gym.make(
        "toolgym/SWE-v0",
        tasks=args.rows,
        repos=args.repos,
        envs=args.envs,
        judge_timeout=args.judge_timeout,
        test_timeout=args.test_timeout,
    )
    source: Any = env.unwrapped.tasks  # type: ignore[attr-defined]  # (SWE-v0's ToolEnv)
    verifier: Any = env.unwrapped.verifier  # type: ignore[attr-defined]
    ids = [source.rows.task_at(i).id for i in range(len(source))]
    cache = ValidationCache(args.envs, (args.judge_timeout, args.test_timeout))
    bar = tqdm(total=len(ids), unit="row", desc="validating", file=sys.stderr, disable=None)

    def one(task_id: str) -> dict:
        try:
            task = source.get(task_id)
        except TaskRefused as exc:
            result = {"instance_id": task_id, "ok": False, "reason": str(exc).removeprefix(f"{task_id}: ")}
        else:
            python = verifier.python_for(task)
            result = cache.get(task, python) or {"instance_id": task_id, "ok": True, "reason": None}
        bar.update(1)
        return result

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        results = list(pool.map(one, ids))
    bar.close()
    env.close()
    from toolgym.swe.environments import EnvironmentStore

    store = EnvironmentStore(args.envs)
    rows = []
    for r in results:
        # ENVS/<key>/venv/bin/python, or ENVS/<key>/bases/<commit>/venv/bin/python (a base's own)
        path = Path(r.get("python") or "")
        parts = path.relative_to(store.root).parts if path.is_relative_to(store.root) else ()
        key = parts[0] if len(parts) > 1 else ""
        python = (store.manifest(key) or {}).get("python", {}) if key else {}
        used = python.get("used", "")
        if used and python.get("asked") not in (None, used):
            used += f" (asked {python['asked']})"
        seconds = f"{r['seconds']:.1f}" if "seconds" in r else ""
        verdict = "valid" if r["ok"] else "refused"
        shown = f"{key} (base {parts[2][:12]})" if key and parts[1:2] == ("bases",) else key
        rows.append([r["instance_id"], verdict, shown, used, seconds, (r["reason"] or "")[:120]])
        r["python_version"] = used
    print(format_table(["row", "verdict", "environment", "python", "seconds", "reason"], rows))
    valid = sum(r["ok"] for r in results)
    print(f"{valid} of {len(results)} rows valid here")
    if args.out:
        with open(args.out, "w") as fh:
            for r in results:
                fh.write(json.dumps(r) + "\n")
    return 0 if valid == len(results) else 1
