"""Env/tool registries and third-party plugins found through entry points."""

import os
import subprocess
import sys
import textwrap

import pytest

import toolgym
from toolgym.core.registry import register_env

PLUGIN_MODULE = textwrap.dedent(
    """
    from pydantic import BaseModel
    import toolgym
    from toolgym.core.types import ToolResult


    class EchoArgs(BaseModel):
        text: str


    @toolgym.register_tool
    class Echo(toolgym.Tool):
        name = "theirs_echo"
        description = "Echoes its input back."
        Args = EchoArgs
        primary_arg = "text"

        def run(self, args):
            return ToolResult(name=self.name, output=args.text)


    def register():
        @toolgym.register_env("theirs/Env-v0", tools=["theirs_echo"], task_source="two fixed tasks",
                              description="A third-party env.")
        def make(**kwargs):
            tasks = [{"id": x, "prompt": "Say " + x, "answer": x} for x in "ab"]
            return toolgym.make_env(tasks, ["theirs_echo"], lambda t, a: a == t.answer, **kwargs)
    """
)


def _install_fake_distribution(root, entry_points: str, module: str = PLUGIN_MODULE):
    (root / "theirs_envs.py").write_text(module)
    dist = root / "theirs_envs-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: theirs-envs\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(entry_points)


def _run(code: str, root, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [sys.executable, *args, "-c", code] if code else [sys.executable, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_a_pip_installed_plugin_is_loaded_on_import(tmp_path):
    _install_fake_distribution(
        tmp_path, "[toolgym.envs]\ntheirs = theirs_envs:register\n\n[toolgym.tools]\necho = theirs_envs\n"
    )
    code = textwrap.dedent(
        """
        import gymnasium as gym, toolgym
        env = gym.make("theirs/Env-v0")
        obs, info = env.reset(options={"task_id": "b"})
        _, reward, terminated, _, _ = env.step("<answer>b</answer>")
        print(obs, reward, terminated, "theirs_echo" in toolgym.TOOLS)
        """
    )
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["Say", "b", "1.0", "True", "True"]
    listed = _run("", tmp_path, "-m", "toolgym.cli", "list")
    assert listed.returncode == 0, listed.stderr
    assert "theirs/Env-v0" in listed.stdout and "theirs_echo" in listed.stdout
    assert "A third-party env." in listed.stdout


def test_a_broken_plugin_warns_and_toolgym_still_works(tmp_path):
    _install_fake_distribution(tmp_path, "[toolgym.envs]\nbroken = theirs_envs:register\n", module="1/0\n")
    code = (
        "import toolgym; from toolgym.core.registry import PLUGIN_ERRORS;"
        "print('toolgym/Calculator-v0' in toolgym.ENVS, PLUGIN_ERRORS)"
    )
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert "toolgym plugin toolgym.envs:broken" in out.stderr and "division by zero" in out.stderr
    assert out.stdout.startswith("True {'toolgym.envs:broken': 'ZeroDivisionError")


def test_register_env_needs_a_namespace_and_refuses_id_clashes():
    with pytest.raises(ValueError, match="namespace"):
        register_env("Plain-v0")

    with pytest.raises(ValueError, match="already registered"):

        @register_env("toolgym/Calculator-v0")
        def other(**kwargs):
            raise AssertionError("never built")


def test_register_tool_refuses_name_clashes():
    class FakeCalculator(toolgym.Tool):
        name = "calculator"
        description = "not the real one"

    with pytest.raises(ValueError, match="already registered"):
        toolgym.register_tool(FakeCalculator)
    with pytest.raises(KeyError, match="registered tools:"):
        toolgym.make_tool("no_such_tool")
