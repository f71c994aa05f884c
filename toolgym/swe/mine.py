"""``toolgym swe mine REPO --out FILE``: SWE-bench-schema tasks from any local Python repository with a test
suite, without Docker.

1. The repository is cloned into the store (``--repos DIR``, default ``repos/`` beside ``FILE``) as
   ``owner__name`` (from its ``origin`` remote, else ``local__<directory>``); a directory that is not a git
   repository is committed into a fresh one. The clean commit is the clone's ``HEAD``.
2. The whole suite runs once in the sandbox (the judge's runner, ``toolgym.rewards.swe``), recording which of
   the repository's functions each test calls. A suite that does not pass clean is refused, naming the
   failing tests.
3. For each function the tests call (outside the tests), single-point mutations
   (``toolgym.swe.mutate``) are tried in a seeded order, up to ``per_function`` kept per function: a
   mutant runs the test files that call the function, in the sandbox, and is kept when at least one of their
   tests fails; a kept one then runs the whole suite: the tests it breaks are ``FAIL_TO_PASS``, every other
   test that passed clean ``PASS_TO_PASS`` (as SWE-bench's are: a fix that breaks another file is seen).
4. Each kept mutant becomes a commit in the store's clone, child of the clean commit, holding the bug: the
   row's ``base_commit``. It is kept reachable by ``refs/toolgym/mined/<instance>`` (**the buggy states live
   there**: in the store's clone, not in your repository). ``patch`` is the fix (the bug's reverse);
   ``test_patch`` is empty (the tests are the repository's own); the problem statement reports the failing
   tests and their errors as a CI failure would, without naming the fix.

``toolgym/SWE-v0`` plays the rows with ``tasks=FILE, repos=DIR``: its workspace is fetched at the buggy commit
alone (depth 1), so neither the clean parent nor the other mined commits are in it.
"""

from __future__ import annotations

import json
import random
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolgym.rewards.swe import FileChanges, TestRun, protected, run_tests, test_files_of
from toolgym.sandbox import Sandbox
from toolgym.swe.mutate import Mutation, apply_mutation, mutations_of
from toolgym.swe.repos import git, shared_repo_store
from toolgym.tools.bash import workspace_paths

#: mutants tried per bug kept, at most, in a function (equivalent mutants break no test and are skipped)
TRIES_PER_KEPT = 10


class MiningRefused(ValueError):
    """The repository cannot be mined (its suite fails clean, it has no tests, ...): the message says why."""


@dataclass
class MineReport:
    """What ``mine`` did: the rows written, the clone and the counts, for the command's summary."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    repo: str = ""
    clone: Path | None = None
    tests: int = 0
    functions: int = 0
    mutants_tried: int = 0
    commits: int = 0  # (--history) commits that change source and tests


def repo_name(path: Path) -> str:
    """``owner/name`` from the ``origin`` remote (GitHub-style URLs), else ``local/<directory name>``."""
    url = ""
    if (path / ".git").exists():
        url = git(["config", "--get", "remote.origin.url"], path, check=False).strip()
    match = re.search(r"[/:]([\w.-]+)/([\w.-]+?)(?:\.git)?/?$", url)
    if match:
        return f"{match.group(1)}/{match.group(2)}"
    return "local/" + re.sub(r"[^\w.-]", "_", path.resolve().name)


def _store_clone(source: Path, store: Path, name: str) -> Path:
    """The store's clone of the repository (made now if absent; a non-git directory is committed)."""
    clone = store / name.replace("/", "__")
    if (clone / ".git").exists():
        return clone
    store.mkdir(parents=True, exist_ok=True)
    if (source / ".git").exists():
        git(["clone", "-q", "--no-hardlinks", str(source.resolve()), str(clone)], store)
    else:
        shutil.copytree(source, clone, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"))
        git(["init", "-q"], clone)
        git(["add", "-A"], clone)
        git(["commit", "-q", "--no-gpg-sign", "-m", "toolgym: the mined repository"], clone)
    return clone


def _commit_with(clone: Path, parent: str, path: str, text: str, message: str) -> str:
    """A commit, child of ``parent``, with one file changed (git plumbing: the work tree is not touched)."""
    blob = git(["hash-object", "-w", "--stdin"], clone, stdin=text.encode()).strip()
    entry = git(["ls-tree", parent, "--", path], clone).split()
    mode = entry[0] if entry else "100644"
    index = clone / ".git" / "toolgym-mine-index"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        git(["read-tree", parent], clone, env=env)
        git(["update-index", "--add", "--cacheinfo", f"{mode},{blob},{path}"], clone, env=env)
        tree = git(["write-tree"], clone, env=env).strip()
    finally:
        index.unlink(missing_ok=True)
    return git(["commit-tree", tree, "-p", parent, "-m", message], clone).strip()


def _diff(path: str, before: str, after: str) -> str:
    from toolgym.swe.workspaces import repo_patch

    return repo_patch({path: before}, {path: after})


def _statement(name: str, failing: dict[str, str], run: TestRun) -> str:
    """A CI-style bug report: which tests fail and how, never the fix."""
    lines = [
        f"After the latest change to {name}, part of the test suite fails. These tests passed before:",
        "",
    ]
    for test in sorted(failing)[:5]:
        message = (run.messages.get(test) or failing[test]).strip().splitlines()
        lines.append(f"- `{test}`: {message[0][:200] if message else failing[test]}")
    if len(failing) > 5:
        lines.append(f"- ... and {len(failing) - 5} more")
    lines += ["", "Please find the cause in the library's code and fix it; the tests themselves are correct."]
    return "\n".join(lines)


def test_sandbox_with(python: str | None) -> Sandbox:
    """Where the miner runs tests with ``python``: the test sandbox (pytest preloaded) for toolgym's own
    interpreter, else a terminal sandbox that exposes that one (a venv under the store, an environment)."""
    from toolgym.sandbox.shared import shared_test_sandbox
    from toolgym.swe.interpreters import interpreter, sandbox_for

    if python is None or python == sys.executable:
        return shared_test_sandbox()
    own = sandbox_for([interpreter(python)])
    return shared_test_sandbox() if own is None else own.with_network("loopback")


def judge_paths(box: Sandbox) -> tuple[str, str]:
    """Where the miner's test runs build their tree in ``box`` (the bash tool's rule), or ``MiningRefused``
    saying why no tree can be built there and how to fix it."""
    paths = workspace_paths(box, "testbed", "/testbed")
    if isinstance(paths, str):
        raise MiningRefused(f"the sandbox cannot build a repository's tree to test here: {paths}")
    return paths


def _normal(qualname: str) -> str:
    return qualname.replace(".<locals>", "")


def mine(
    repo: str | Path,
    out: str | Path,
    repos: str | Path | None = None,
    *,
    sandbox: Sandbox | None = None,
    max_tasks: int = 50,
    per_function: int = 1,
    seed: int = 0,
    python: str | None = None,
    test_timeout: float = 60.0,
    progress: Callable[[int, int, str], None] | None = None,
) -> MineReport:
    """Mine ``repo`` into SWE-bench-schema rows at ``out`` (JSONL) over the store ``repos`` (module doc).
    ``progress(done, total, what)`` is called per function tried."""
    source = Path(repo)
    if not source.is_dir():
        raise FileNotFoundError(f"{repo}: no such directory")
    out = Path(out)
    store = (Path(repos) if repos is not None else out.parent / "repos").absolute()
    python = python or sys.executable
    box = sandbox or test_sandbox_with(python)
    name = repo_name(source)
    clone = _store_clone(source, store, name)
    base = git(["rev-parse", "HEAD"], clone).strip()
    archive = shared_repo_store(store).snapshot(name, base).archive
    report = MineReport(repo=name, clone=clone)
    tracked = [p for p in git(["ls-files"], clone).splitlines() if p.endswith(".py")]
    test_paths = [p for p in tracked if protected(p)]
    if not test_paths:
        raise MiningRefused(f"{name}: no test files (test_*.py, *_test.py or under tests/) to run")
    options: dict[str, Any] = {"python": python, "test_timeout": test_timeout, "paths": judge_paths(box)}
    clean = run_tests(box, archive, FileChanges(), None, files=[], trace=True, **options)
    if clean.error:
        raise MiningRefused(f"{name}: the test suite could not run: {clean.error}")
    failing = sorted(t for t, o in clean.outcomes.items() if o not in ("passed", "skipped"))
    if failing:
        shown = ", ".join(failing[:10]) + (f" and {len(failing) - 10} more" if len(failing) > 10 else "")
        raise MiningRefused(f"{name}: the suite does not pass clean; failing: {shown}")
    passing = sorted(t for t, o in clean.outcomes.items() if o == "passed")
    if not passing:
        raise MiningRefused(f"{name}: no test passes clean (collected: {len(clean.outcomes)})")
    report.tests = len(passing)
    callers: dict[tuple[str, str], set[str]] = {}
    for test in passing:
        for path, qualname in clean.covered.get(test, []):
            if path.endswith(".py") and not protected(path) and path in tracked:
                callers.setdefault((path, _normal(qualname)), set()).add(test)
    targets = sorted(callers)
    report.functions = len(targets)
    rng = random.Random(seed)
    rng.shuffle(targets)
    texts: dict[str, str] = {}
    for done, (path, function) in enumerate(targets, 1):
        if len(report.rows) >= max_tasks:
            break
        if progress is not None:
            progress(done, len(targets), f"{path}:{function}")
        text = texts.setdefault(path, (clone / path).read_text(encoding="utf-8"))
        candidates: list[Mutation] = mutations_of(text, path, {function})
        rng.shuffle(candidates)
        kept = 0
        files = test_files_of(sorted(callers[(path, function)]))
        suite = [t for t in passing if t.split("::", 1)[0] in files]
        for mutation in candidates[: per_function * TRIES_PER_KEPT]:
            if kept >= per_function or len(report.rows) >= max_tasks:
                break
            report.mutants_tried += 1
            buggy = apply_mutation(text, mutation)
            run = run_tests(box, archive, FileChanges.of({path: buggy}), suite, **options)
            if run.error:
                continue
            if all(o == "passed" for o in run.outcomes.values()):
                continue  # an equivalent mutant (or one the tests do not see)
            # a bug the tests that call the function see: the whole suite says what it breaks and what holds
            run = run_tests(box, archive, FileChanges.of({path: buggy}), passing, **options)
            if run.error:
                continue
            broken = {t: o for t, o in run.outcomes.items() if o != "passed"}
            if not broken:
                continue
            index = len(report.rows) + 1
            instance = f"{name.replace('/', '__')}.toolgym-mined.{index}"
            commit = _commit_with(clone, base, path, buggy, f"toolgym mined bug {index}")
            git(["update-ref", f"refs/toolgym/mined/{index}", commit], clone)
            report.rows.append(
                {
                    "instance_id": instance,
                    "repo": name,
                    "base_commit": commit,
                    "patch": _diff(path, buggy, text),
                    "test_patch": "",
                    "problem_statement": _statement(name, broken, run),
                    "FAIL_TO_PASS": json.dumps(sorted(broken)),
                    "PASS_TO_PASS": json.dumps(sorted(t for t in passing if t not in broken)),
                    "created_from": base,
                    "mutation": f"{mutation.kind} in {path}:{function}",
                }
            )
            kept += 1
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for row in report.rows:
            fh.write(json.dumps(row) + "\n")
    return report
