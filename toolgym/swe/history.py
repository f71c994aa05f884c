"""``toolgym swe mine REPO --history``: rows from the real fixes in a repository's history (R2E-Gym's SWE-GEN
idea), without containers.

1. The repository is cloned into the store as ``toolgym swe mine`` does. Its environment comes from the
   user's recipe (``--recipes``) or is inferred (``pip install -e .`` with a declared ``test``/``tests``/
   ``testing``/``dev`` extra, plus pytest), and is built once at ``HEAD`` into ``--envs`` (the manifest says
   the recipe was inferred). Each row names that environment (``environment_setup_commit``,
   ``install_config``), so ``toolgym swe envs build`` on the rows finds it built.
2. Commits reachable from ``HEAD``, newest first (``--max-commits``; merges left out), that change both
   source files and test files are candidates: ``patch`` is the source diff, ``test_patch`` the test
   diff, ``base_commit`` the parent.
3. The changed test files run twice in the sandbox, with the environment's interpreter: at the parent with the
   commit's tests, and at the commit. A test that passes at the commit and not at the parent is
   ``FAIL_TO_PASS``; one that passes at both is ``PASS_TO_PASS``. A commit with no ``FAIL_TO_PASS`` test is
   not a row.
4. The problem statement is the commit's message and the failing tests' errors. With a writer (an
   OpenAI-compatible endpoint, as the judges use) it is rewritten as an issue that does not name the fix.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from toolgym.rewards.swe import FileChanges, TestRun, protected, run_tests
from toolgym.sandbox import Sandbox
from toolgym.swe.environments import BuildFailed, EnvironmentStore, EnvPlan
from toolgym.swe.mine import (
    MineReport,
    MiningRefused,
    _store_clone,
    judge_paths,
    repo_name,
    test_sandbox_with,
)
from toolgym.swe.recipes import DEFAULT_INSTALL, UserRecipes, recipe_of
from toolgym.swe.repos import git, shared_repo_store
from toolgym.swe.requirements import declared_extras
from toolgym.swe.row_envs import with_overlay

WRITER_PROMPT = (
    "Rewrite this bug fix as the GitHub issue a user would have filed before it was fixed: what they did, "
    "what they expected, what happened. Do not describe the fix, name the changed code's internals, or "
    "mention tests that were added. Reply with the issue's text only.\n\n<commit_message>\n{message}\n"
    "</commit_message>\n\n<failing_tests>\n{failures}\n</failing_tests>"
)


def candidates(clone: Path, max_commits: int) -> list[dict[str, Any]]:
    """Commits reachable from ``HEAD`` (newest first; merges left out, the fixes they bring are their own
    commits) that change source files and test files."""
    out = []
    listed = git(["rev-list", "--no-merges", f"--max-count={max_commits}", "HEAD"], clone)
    for commit in listed.split():
        parents = git(["rev-list", "--parents", "-n", "1", commit], clone).split()[1:]
        if len(parents) != 1:
            continue
        names = git(["diff", "--name-only", "--no-renames", parents[0], commit], clone).split("\n")
        paths = [p for p in names if p]
        tests = [p for p in paths if protected(p) and p.endswith(".py")]
        source = [p for p in paths if p.endswith(".py") and not protected(p)]
        if tests and source:
            out.append({"commit": commit, "parent": parents[0], "tests": tests, "source": source})
    return out


def history_recipe(clone: Path, name: str, recipes: UserRecipes | None) -> tuple[dict[str, Any], str]:
    """(the recipe as ``install_config`` keys, where it came from): the user's, else inferred here."""
    if recipes is not None:
        found = recipes.find({"repo": name, "instance_id": ""})
        if found is not None:
            body = found.model_dump(mode="json", exclude_defaults=True)
            return body, found.source
    extras = sorted(declared_extras(clone) & {"test", "tests", "testing", "dev"})
    install = DEFAULT_INSTALL + (f"[{extras[0]}]" if extras else "")
    why = f"inferred: {install} and pytest" + (f" (the project declares [{extras[0]}])" if extras else "")
    return {"install": install, "pip_packages": ["pytest"]}, why


def _failures(run: TestRun, tests: list[str]) -> str:
    lines = []
    for test in tests[:5]:
        message = (run.messages.get(test) or run.outcomes.get(test, "")).strip().splitlines()
        lines.append(f"- `{test}`: {message[0][:200] if message else 'failed'}")
    if len(tests) > 5:
        lines.append(f"- ... and {len(tests) - 5} more")
    return "\n".join(lines)


def statement(message: str, failing: str, writer: Callable[[str], str] | None) -> str:
    """The commit's message and the failing tests; with ``writer``, an issue written from them."""
    if writer is not None:
        return writer(WRITER_PROMPT.format(message=message.strip(), failures=failing)).strip()
    return f"{message.strip()}\n\nThese tests fail:\n{failing}"


def endpoint_writer(base_url: str, model: str, timeout: float = 120.0) -> Callable[[str], str]:
    """A writer on an OpenAI-compatible endpoint (the judges' client: one pooled connection per endpoint)."""
    from toolgym.rewards.judge.endpoint import Limits, endpoint_for

    endpoint = endpoint_for(base_url.rstrip("/"), model, Limits(), timeout)

    def write(prompt: str) -> str:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0.0}
        reply = endpoint.http.post("/chat/completions", json=body, timeout=timeout)
        reply.raise_for_status()
        return str(reply.json()["choices"][0]["message"]["content"])

    return write


def _outcomes_at(
    box: Sandbox, archive: bytes, changes: FileChanges, tests: Mapping[str, bytes | None], **options: Any
) -> TestRun:
    files = sorted(p for p, data in tests.items() if data is not None)
    return run_tests(box, archive, changes, None, files=files, test_files=tests, **options)


def mine_history(
    repo: str | Path,
    out: str | Path,
    repos: str | Path | None = None,
    *,
    envs: str | Path | None = None,
    recipes: str | Path | None = None,
    python: str | None = None,
    sandbox: Sandbox | None = None,
    max_commits: int = 200,
    max_tasks: int = 50,
    test_timeout: float = 60.0,
    writer: Callable[[str], str] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> MineReport:
    """Rows from ``repo``'s fix commits at ``out`` (module docstring). ``python``: run with this interpreter
    instead of building an environment (rows then carry no recipe)."""
    source = Path(repo)
    if not source.is_dir():
        raise FileNotFoundError(f"{repo}: no such directory")
    out = Path(out)
    store = (Path(repos) if repos is not None else out.parent / "repos").absolute()
    name = repo_name(source)
    clone = _store_clone(source, store, name)
    head = git(["rev-parse", "HEAD"], clone).strip()
    found = candidates(clone, max_commits)
    report = MineReport(repo=name, clone=clone, commits=len(found))
    config, recipe_source = history_recipe(clone, name, UserRecipes(recipes) if recipes else None)
    env_store = EnvironmentStore(envs if envs is not None else out.parent / "envs")
    manifest: dict[str, Any] | None = None
    if python is None:
        recipe = recipe_of(config, recipe_source)
        entry = EnvPlan(recipe.key(name, head), name, head, recipe, bases={c["parent"] for c in found})
        try:
            manifest = env_store.build(entry, store)
        except BuildFailed as exc:
            raise MiningRefused(f"{name}: its environment did not build: {exc}") from None
        python = env_store.python(manifest["key"])
    box = sandbox or test_sandbox_with(python)
    options: dict[str, Any] = {"python": python, "test_timeout": test_timeout, "paths": judge_paths(box)}
    repo_store = shared_repo_store(store)
    for done, cand in enumerate(found, 1):
        if len(report.rows) >= max_tasks:
            break
        commit, parent = cand["commit"], cand["parent"]
        if progress is not None:
            progress(done, len(found), commit[:12])
        patch = git(["diff", "--no-renames", parent, commit, "--", *cand["source"]], clone)
        test_patch = git(["diff", "--no-renames", parent, commit, "--", *cand["tests"]], clone)
        snap = repo_store.snapshot(name, parent, patch, test_patch)
        archive = snap.archive
        if manifest is not None:
            archive = with_overlay(archive, env_store.overlay_for(manifest["key"], parent))
        report.mutants_tried += 1
        before = _outcomes_at(box, archive, FileChanges(), snap.test_files, **options)
        after = _outcomes_at(box, archive, FileChanges.of(snap.gold_files), snap.test_files, **options)
        if before.error or after.error:
            continue
        fixed = sorted(
            t for t, o in after.outcomes.items() if o == "passed" and before.outcomes.get(t) != "passed"
        )
        kept = sorted(
            t for t, o in after.outcomes.items() if o == "passed" and before.outcomes.get(t) == "passed"
        )
        if not fixed:
            continue
        report.tests += len(fixed)
        message = git(["log", "-1", "--format=%B", commit], clone)
        created = git(["log", "-1", "--format=%cI", commit], clone).strip()
        row: dict[str, Any] = {
            "instance_id": f"{name.replace('/', '__')}-{commit[:12]}",
            "repo": name,
            "base_commit": parent,
            "patch": patch,
            "test_patch": test_patch,
            "problem_statement": statement(message, _failures(before, fixed), writer),
            "FAIL_TO_PASS": json.dumps(fixed),
            "PASS_TO_PASS": json.dumps(kept),
            "created_at": created,
            "version": "history",
            "fix_commit": commit,
        }
        if manifest is not None:
            row.update(environment_setup_commit=head, install_config=config, recipe_source=recipe_source)
        report.rows.append(row)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as fh:
        for row in report.rows:
            fh.write(json.dumps(row) + "\n")
    return report
