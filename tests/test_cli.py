import json
import os
import re
import shutil
import subprocess
import sys

import gymnasium as gym

import toolgym
from toolgym.core.types import ToolCall
from toolgym.testing.scripted import oracle_script

CLI = [sys.executable, "-m", "toolgym.cli"]


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], input=stdin, capture_output=True, text=True, timeout=300)


def test_console_script_is_installed():
    exe = shutil.which("toolgym", path=os.path.dirname(sys.executable))
    assert exe is not None
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    for verb in ("list", "play", "demo", "doctor"):
        assert verb in out.stdout


def test_every_command_is_in_the_help_the_readme_table_and_the_docs_table():
    """README lists every command in short; docs/quickstart.md's table has each one's options (and every
    service of ``toolgym serve``)."""
    import argparse
    from pathlib import Path

    from toolgym.cli import _build_parser
    from toolgym.cli.serve import SERVICES

    def section(page: str) -> str:
        text = (Path(__file__).resolve().parents[1] / page).read_text()
        return text.split("## Command line", 1)[1].split("\n## ", 1)[0]

    parser = _build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    readme, docs = section("README.md"), section("docs/quickstart.md")
    for verb in sub.choices:
        assert f"| `toolgym {verb}" in readme, verb
        assert f"| `toolgym {verb}" in docs, verb
    for service in SERVICES:
        assert f"| `toolgym serve {service}" in docs, service
    # the help's own list is argparse's: exactly the registered commands, each with its line
    text = parser.format_help()
    listed = re.findall(r"^    (\w+) {2,}\S", text.split("positional arguments:", 1)[1], re.MULTILINE)
    assert listed == list(sub.choices), listed


def test_the_help_speaks_to_a_user_and_its_examples_parse():
    """``toolgym --help`` opens with what toolgym is and where to start (no module docstring, no reST), and
    every example in it is a command line the parser takes."""
    from toolgym.cli import EPILOG, _build_parser

    parser = _build_parser()
    text = parser.format_help()
    assert text.split("\n")[2].startswith("toolgym: tool-using text environments"), text[:300]
    assert "``" not in text and "register(sub)" not in text
    examples = [line.split("  ")[1].strip() for line in EPILOG.splitlines() if line.startswith("  toolgym ")]
    assert len(examples) == 5
    for example in examples:
        argv = example.split()[1:]
        if argv[-1] == "--help":
            continue
        args = parser.parse_args(argv)
        assert callable(args.func), example


def test_list_shows_every_env_with_tools_and_source():
    out = run("list")
    assert out.returncode == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("toolgym/Calculator-v0"))
    assert "calculator" in line and "procedural" in line
    data = json.loads(run("list", "--json").stdout)
    assert {e["id"] for e in data["envs"]} == set(toolgym.ENVS)
    assert "calculator" in {t["name"] for t in data["tools"]}


def _oracle_session(env_id: str, seed: int) -> str:
    env = gym.make(env_id)
    env.reset(seed=seed)
    parser = env.unwrapped.parser
    script = oracle_script(env_id, env.unwrapped.task)
    actions = [parser.format_call(s) if isinstance(s, ToolCall) else parser.format_answer(s) for s in script]
    return "".join(a + "\n\n" for a in actions)


def test_play_an_episode_to_a_correct_answer():
    out = run(
        "play", "toolgym/Calculator-v0", "--seed", "3", stdin=_oracle_session("toolgym/Calculator-v0", 3)
    )
    assert out.returncode == 0, out.stderr
    assert "== system prompt" in out.stdout and "<calculator>" in out.stdout
    assert "[understood: tool_calls]" in out.stdout
    assert "episode over (answered): reward 1" in out.stdout
    assert "passed: True" in out.stdout


def test_play_reports_a_wrong_answer_and_abandoned_input():
    out = run("play", "toolgym/Calculator-v0", "--seed", "1", stdin="<answer>7</answer>\n\n")
    assert out.returncode == 0 and "reward 0" in out.stdout and "passed: False" in out.stdout
    out = run("play", "toolgym/Calculator-v0", "--seed", "1", stdin="")
    assert out.returncode == 1 and "abandoned" in out.stdout


def test_play_rejects_unknown_envs_and_bad_kwargs():
    out = run("play", "toolgym/Nope-v0", stdin="")
    assert out.returncode == 2 and "Nope" in out.stderr and "toolgym list" in out.stderr
    out = run("play", "toolgym/Calculator-v0", "-k", "level", stdin="")
    assert out.returncode == 2 and "KEY=VALUE" in out.stderr


def test_bad_counts_and_model_paths_fail_before_any_engine_starts(capsys):
    """Parse-time errors name the flag and the rule; a missing model path names what to give instead."""
    from toolgym.cli import main

    for argv in (
        ["eval", "--env", "toolgym/Calculator-v0", "--model", "tiny", "-k", "0"],
        ["rollout", "--env", "toolgym/Calculator-v0", "--model", "tiny", "--concurrency", "x"],
        ["export", "verl", "--env", "toolgym/Calculator-v0", "--n", "0", "--out", "unused"],
    ):
        try:
            main(argv)
        except SystemExit as exc:
            assert exc.code == 2
        else:
            raise AssertionError(f"{argv} was accepted")
        err = capsys.readouterr().err
        assert "must be >= 1" in err or "expected a whole number >= 1" in err, err
    assert main(["rollout", "--env", "toolgym/Calculator-v0", "--model", "/no/such/model"]) == 2
    err = capsys.readouterr().err
    assert "no model at /no/such/model" in err and "'tiny'" in err


#: a vLLM log line at INFO level, from any of its processes: ``(EngineCore pid=1) INFO 11-25 09:47:48 [...``
VLLM_INFO = re.compile(r"\bINFO \d\d-\d\d \d\d:\d\d:\d\d \[")


def test_demo_prints_the_reward_table():
    """Also the front door of every command that starts an in-process engine (the demo's tiny-model
    rollouts): vLLM logs at WARNING unless ``--verbose``, so no INFO line (start-up or ``[shutdown]``) is
    printed. Its warnings still are (on a loaded machine, "[shutdown] ... force killing" an engine process
    that did not exit in time)."""
    unset = ("VLLM_LOGGING_LEVEL", "TOOLGYM_JUDGE_URL", "TOOLGYM_JUDGE_MODEL")
    env = {k: v for k, v in os.environ.items() if k not in unset} | {"PYTHONUNBUFFERED": "1"}
    # three envs, not every one: every env's oracle and wrong answer in every format are
    # tests/envs/test_registered_envs.py's; this is the command, its engine and its table, and a judged env
    # with no judge endpoint set (as on a user's first `make demo`: the scripted judge stands in)
    names = ["toolgym/Calculator-v0", "toolgym/PythonCode-v0", "toolgym/Report-v0"]
    envs = [arg for name in names for arg in ("--env", name)]
    cmd = [*CLI, "demo", *envs, "--episodes", "1", "--llm-tasks", "1", "--group-size", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert not VLLM_INFO.search(out.stdout + out.stderr), "vLLM INFO lines without --verbose"
    note = "toolgym/Report-v0: no judge endpoint is set (TOOLGYM_JUDGE_URL): judged by toolgym's scripted"
    assert note in out.stdout, out.stdout
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("toolgym/") and "judge" not in ln]
    assert {r[0] for r in rows} == set(names), out.stdout
    oracle_rows = [r for r in rows if "oracle" in r]
    assert oracle_rows and all("1.00" in r for r in oracle_rows)
    assert all("0.00" in r for r in rows if "wrong" in r)


def test_doctor_lists_packages_and_isolation():
    out = run("doctor", "--quick")
    assert out.returncode == 0, out.stderr
    for name in ("gymnasium", "vllm", "verl", "ray", "sandbox", "envs registered"):
        assert name in out.stdout
    per_session = re.search(r"sandbox sessions: ([\d.]+) MiB Pss each \(16 live interpreters", out.stdout)
    assert per_session and 0.1 < float(per_session[1]) < 200, out.stdout  # measured, not a placeholder
