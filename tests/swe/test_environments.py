"""`toolgym swe envs build`, SWE-v0 with `envs=`, and `toolgym swe validate`, on repositories the tests write:
a src layout, a namespace package under package_dir, a C extension whose bug is in its C source, a
requirements file at the setup commit. Each builds with uv from PyPI's packages (pytest, iniconfig: in uv's
cache after `make install`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import toolgym  # noqa: F401 - registers the envs
from toolgym import ToolCall
from toolgym.envs.swe import swe_oracle, swe_wrong
from toolgym.envs.swe_tasks import TaskRefused
from toolgym.swe.environments import BuildFailed, EnvironmentStore, build_all, plan
from toolgym.swe.interpreters import NoInterpreter, choose_python
from toolgym.testing.scripted import script_texts
from toolgym.testing.swe_layouts import LAYOUTS, build_with_this_python, layout_row, open_to_sandbox

PYTEST_PIN = f"pytest=={pytest.__version__}"
MINE = sys.version_info[:2]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The four layouts' rows and environments (one build each); the src layout asks for a Python older
    than any the build may use (TOOLGYM_SWE_PYTHONS lists only this one): the nearest newer is taken."""
    root = open_to_sandbox(tmp_path_factory.mktemp("swe-envs"))
    older = f"{MINE[0]}.{MINE[1] - 1}"
    rows = [
        layout_row(root / "repos", layout, python=older if layout == "src" else None, pytest_pin=PYTEST_PIN)
        for layout in LAYOUTS
    ]
    (root / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    by_repo = build_with_this_python(rows, root / "repos", root / "envs")
    return {"root": root, "rows": rows, "manifests": by_repo}


def _play(env, policy) -> tuple[float, object]:
    for action in script_texts(env, policy(env.unwrapped.task)):
        _, reward, _, _, info = env.step(action)
    return reward, info["verdict"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_layout_imports_from_the_workspace_gold_scores_one_and_doing_nothing_zero(built, layout):
    root = built["root"]
    env = gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root / "repos"), envs=str(root / "envs")
    )
    try:
        env.reset(options={"task_id": f"acme__{layout}-1"})
        reward, verdict = _play(env, swe_oracle)
        assert (reward, verdict.error) == (1.0, None), verdict.details
        env.reset(options={"task_id": f"acme__{layout}-1"})
        reward, verdict = _play(env, swe_wrong)
        assert (reward, verdict.error) == (0.0, None), verdict.details
        assert verdict.details["fail_to_pass"] == {next(iter(verdict.details["fail_to_pass"])): "failed"}
    finally:
        env.close()


def test_the_agents_python_imports_the_repository_from_its_own_tree_and_pip_install_is_refused(built):
    root = built["root"]
    env = gym.make(
        "toolgym/SWE-v0", tasks=str(root / "rows.jsonl"), repos=str(root / "repos"), envs=str(root / "envs")
    )
    try:
        env.reset(options={"task_id": "acme__src-1"})
        look = ToolCall(
            name="bash",
            arguments={
                "command": "python -c 'import shapes.area as a; print(a.__file__)'; which python pytest"
            },
        )
        obs = env.step(script_texts(env, [look])[0])[0]
        envs_dir = str(root / "envs")
        assert "src/shapes/area.py" in obs and envs_dir not in obs.split("\n")[0], obs
        assert f"{envs_dir}/{built['manifests']['acme/src']['key']}/venv/bin/python" in obs, obs
        pip = ToolCall(
            name="bash", arguments={"command": "pip install iniconfig; echo exit=$?; pip --version"}
        )
        obs = env.step(script_texts(env, [pip])[0])[0]
        assert "pip install is not available in this episode" in obs and "exit=1" in obs, obs
        assert f"{envs_dir}/" in obs.split("exit=1", 1)[1], obs  # pip --version: the environment's pip
    finally:
        env.close()


def test_the_manifest_records_the_recipe_the_python_the_pins_and_the_compiled_parts(built):
    src, reqs, cext = (built["manifests"][f"acme/{n}"] for n in ("src", "requirements", "cext"))
    older = f"{MINE[0]}.{MINE[1] - 1}"
    assert src["python"]["asked"] == older and src["python"]["used"] == f"{MINE[0]}.{MINE[1]}"
    assert "nearest newer minor" in src["python"]["reason"]
    assert src["recipe_source"].endswith("install_config") and src["import_roots"] == ["src"]
    assert any(p.startswith("pytest==") for p in src["pins"]) and src["build_s"] > 0 and src["size_bytes"] > 0
    # the requirements file is the one at the setup commit, its `-e .` line dropped
    assert reqs["requirements_file"] == "requirements.txt"
    assert any(p.lower().startswith("iniconfig==") for p in reqs["pins"])
    assert cext["compiled"] and cext["rebuild"] == ["python", "setup.py", "build_ext", "--inplace"]
    # none of them is a repository whose build needs parts beyond the one its C extension found here
    assert src["toolchain"] == cext["toolchain"] == [] and cext["system_libraries_missing"] == []
    # the base commit's C source differs from the setup commit's: its own compiled parts were built
    assert cext["base_overlays"] == [
        next(r for r in built["rows"] if r["repo"] == "acme/cext")["base_commit"]
    ]
    assert (Path(built["root"] / "envs" / cext["key"] / "build.log")).read_text().count(
        "=== install ==="
    ) == 1


def test_python_choice_takes_the_version_asked_else_the_nearest_newer_else_refuses():
    have = {(3, 9): "/py/3.9", (3, 11): "/py/3.11", (3, 13): "/py/3.13"}
    assert choose_python("3.9", have)["executable"] == "/py/3.9"
    chosen = choose_python("3.10", have)
    assert (chosen["used"], chosen["executable"]) == ("3.11", "/py/3.11") and "3.10" in chosen["reason"]
    with pytest.raises(NoInterpreter, match=r"has 3\.9, 3\.11, 3\.13"):
        choose_python("3.14", have)


def test_a_failed_build_names_its_step_and_log_and_its_rows_are_refused_with_that_reason(built, tmp_path):
    row = layout_row(tmp_path / "repos", "src", pytest_pin=PYTEST_PIN)
    row["install_config"]["install"] = "python setup.py no_such_command"
    (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n")
    results = build_all(plan([row]), tmp_path / "repos", tmp_path / "envs")
    (failure,) = results.values()
    assert isinstance(failure, BuildFailed) and failure.step == "install" and failure.log.is_file()
    env = gym.make(
        "toolgym/SWE-v0",
        tasks=str(tmp_path / "rows.jsonl"),
        repos=str(tmp_path / "repos"),
        envs=str(tmp_path / "envs"),
    )
    try:
        with pytest.raises(TaskRefused, match=r"failed to build at step install: .*log: "):
            env.unwrapped.tasks.get(row["instance_id"])
    finally:
        env.close()


def test_two_processes_building_the_same_environment_build_it_once(built, tmp_path):
    row = layout_row(tmp_path / "repos", "requirements", pytest_pin=PYTEST_PIN)
    (tmp_path / "rows.json").write_text(json.dumps([row]))
    code = (
        "import json, sys\n"
        "from toolgym.swe.environments import build_all, plan\n"
        "rows = json.load(open(sys.argv[1]))\n"
        "(m,) = build_all(plan(rows), sys.argv[2], sys.argv[3]).values()\n"
        "print(json.dumps({'reused': m.get('reused', False), 'built_at': m['built_at']}))\n"
    )
    argv = [
        sys.executable,
        "-c",
        code,
        str(tmp_path / "rows.json"),
        str(tmp_path / "repos"),
        str(tmp_path / "envs"),
    ]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [json.loads(p.communicate(timeout=600)[0].strip().splitlines()[-1]) for p in procs]
    assert sorted(o["reused"] for o in outs) == [False, True]
    assert outs[0]["built_at"] == outs[1]["built_at"]
    store = EnvironmentStore(tmp_path / "envs")
    assert len(store.manifests()) == 1 and not list((tmp_path / "envs" / ".tmp").iterdir())


def test_validate_runs_every_row_and_its_results_are_what_swe_v0_reads(built):
    root = built["root"]
    toolgym_cli = [sys.executable, "-m", "toolgym.cli"]  # (a setup's venv may have no console script)
    out = subprocess.run(
        [*toolgym_cli, "swe", "envs", "build", str(root / "rows.jsonl"), "--repos", str(root / "repos"),
         "--out", str(root / "envs")],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("reused") == 4 and "4 of 4 environment(s) ready" in out.stdout
    out = subprocess.run(
        [*toolgym_cli, "swe", "validate", str(root / "rows.jsonl"), "--repos", str(root / "repos"),
         "--envs", str(root / "envs"), "--out", str(root / "validation.jsonl")],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 of 4 rows valid here" in out.stdout
    results = [json.loads(line) for line in (root / "validation.jsonl").read_text().splitlines()]
    assert {r["instance_id"] for r in results if r["ok"]} == {r["instance_id"] for r in built["rows"]}
    assert len(list((root / "envs" / "validation").glob("*.json"))) == 4  # the cache SWE-v0's draw reads


def _slow_row(row: dict, seconds: int) -> dict:
    """``row`` whose FAIL_TO_PASS test sleeps ``seconds`` first (the test patch's hunk one line longer)."""
    added = "+def test_rectangle():\n"
    assert added in row["test_patch"]
    patch = row["test_patch"].replace(added, added + f"+    __import__('time').sleep({seconds})\n")
    patch = re.sub(r"^(@@ -\S+ \+\d+,)(\d+)", lambda m: m[1] + str(int(m[2]) + 1), patch, flags=re.M)
    return {**row, "instance_id": "acme__src-slow", "test_patch": patch}


def test_validate_takes_its_limit_per_test_and_a_test_past_it_names_the_option(built):
    """A test that runs past the judge's limit per test is refused with that reason and the option that
    gives more; given more, the row validates (the limits are in the cache's key: not answered from the
    refusal)."""
    root = built["root"]
    src = next(r for r in built["rows"] if r["instance_id"] == "acme__src-1")
    rows = root / "slow.jsonl"
    rows.write_text(json.dumps(_slow_row(src, 3)) + "\n")
    toolgym_cli = [sys.executable, "-m", "toolgym.cli"]

    def validate(*limit: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*toolgym_cli, "swe", "validate", str(rows), "--repos", str(root / "repos"), "--envs",
             str(root / "envs"), "--out", str(root / "slow-validation.jsonl"), *limit],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip

    refused = validate("--test-timeout", "1")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    (result,) = [json.loads(line) for line in (root / "slow-validation.jsonl").read_text().splitlines()]
    assert not result["ok"] and "timed out" in result["reason"], result
    assert "past the judge's 1 s per test" in result["reason"] and "--test-timeout" in result["reason"]
    valid = validate("--test-timeout", "60")
    assert valid.returncode == 0 and "1 of 1 rows valid here" in valid.stdout, valid.stdout + valid.stderr


def test_a_python_the_machine_lacks_is_refused_or_asked_of_uv_when_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLGYM_SWE_PYTHONS", sys.executable)
    row = layout_row(tmp_path / "repos", "src", python="3.99", pytest_pin=PYTEST_PIN)
    (refused,) = build_all(plan([row]), tmp_path / "repos", tmp_path / "envs").values()
    assert isinstance(refused, BuildFailed) and refused.step == "python"
    assert f"has {MINE[0]}.{MINE[1]}" in refused.message and "TOOLGYM_SWE_PYTHONS" in refused.message
    # allowed to download, uv is asked for it (and has no such version: the step says so, with uv's words)
    (asked,) = build_all(plan([row]), tmp_path / "repos", tmp_path / "envs", download_python=True).values()
    assert isinstance(asked, BuildFailed) and asked.step == "python"
    log = asked.log.read_text()
    assert "python install 3.99" in log and "No download found" in log + asked.message


def test_make_refuses_where_the_sandbox_cannot_hold_a_workspace_naming_the_fix(built):
    """A container's root whose Python lies under a closed /root, without the read-only view: the children
    read files as uid 0 and a command could not write the workspace, so every episode would be an infra
    error. With envs=, make says so at once, with the fixes (the bash tool's own refusal, shared)."""
    from types import SimpleNamespace

    from toolgym.tools.bash import BashTool

    report = SimpleNamespace(
        broken="", backend="local", active=["landlock", "unprivileged_user"],
        missing={"fs_view": "no CAP_SYS_ADMIN"},
        details={"unprivileged_user": "uid 61234, file access as uid 0 (the interpreter is under /root)"},
    )  # fmt: skip
    tool = BashTool(sandbox=SimpleNamespace(isolation=report))
    root = built["root"]
    with pytest.raises(ValueError, match=r"cannot play rows in their environments here: .*chmod o\+x /root"):
        gym.make(
            "toolgym/SWE-v0",
            tasks=str(root / "rows.jsonl"),
            repos=str(root / "repos"),
            envs=str(root / "envs"),
            tool=tool,
        )


def test_exclude_newer_takes_one_date_for_every_environment_and_a_build_asking_another_is_refused(tmp_path):
    row = layout_row(tmp_path / "repos", "src", pytest_pin=PYTEST_PIN)
    row["created_at"] = "2023-06-01T00:00:00Z"  # not the date asked: DATE bounds every environment
    (manifest,) = build_with_this_python([row], tmp_path / "repos", tmp_path / "envs",
                                         exclude_newer="2024-06-01").values()  # fmt: skip
    assert manifest["exclude_newer"] == "2024-06-01"
    assert "pytest" in manifest["exclude_newer_exempt"]  # the recipe's pin wins over the date
    # the environment's key is its recipe's: the same ENVS asked without the date, or with another, says so
    repos, envs = tmp_path / "repos", tmp_path / "envs"
    for asked in (False, True):
        (refused,) = build_all(plan([row]), repos, envs, exclude_newer=asked).values()
        assert isinstance(refused, BuildFailed) and refused.step == "reuse", refused
        assert "built with exclude_newer=2024-06-01" in refused.message and "another --out" in refused.message
    (again,) = build_all(plan([row]), repos, envs, exclude_newer="2024-06-01").values()
    assert again["reused"] and not (envs / ".failed").exists()  # a refusal records no failure
    cli = [sys.executable, "-m", "toolgym.cli", "swe", "envs", "build", "rows.jsonl", "--repos", "r", "--out"]
    said = subprocess.run(
        [*cli, "e", "--exclude-newer", "2021"], capture_output=True, text=True, cwd=tmp_path
    )
    assert said.returncode == 2 and "'2021' is not a date: give YYYY-MM-DD" in said.stderr
