"""The e2b backend's mapping of e2b's API onto the sandbox contract, against a stand-in for the SDK.

The real service needs an API key and the network (``test_e2b_contract.py`` runs when E2B_API_KEY is set);
these tests pin down how our adapter reads e2b's results: statuses, timeouts, output caps, sessions.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field

import pytest

from toolgym.sandbox import Limits, SandboxUnavailable, get_sandbox


class CommandExitException(Exception):
    def __init__(self, stdout, stderr, exit_code):
        super().__init__(f"exit {exit_code}")
        self.stdout, self.stderr, self.exit_code = stdout, stderr, exit_code


class TimeoutException(Exception):
    pass


@dataclass
class Result:
    stdout: str
    stderr: str
    exit_code: int


@dataclass
class FakeVM:
    script: list = field(default_factory=list)  # what commands.run does next: Result or exception
    commands_run: list = field(default_factory=list)
    written: dict = field(default_factory=dict)
    killed: bool = False
    created_with: dict = field(default_factory=dict)

    def __post_init__(self):
        vm = self
        self.commands = types.SimpleNamespace(run=lambda cmd, timeout=None: vm._run(cmd, timeout))
        self.files = types.SimpleNamespace(write=lambda path, data: vm.written.__setitem__(path, data))
        self.sandbox_id = "fake-vm"

    def _run(self, cmd, timeout):
        self.commands_run.append((cmd, timeout))
        if cmd.startswith("mkdir"):
            return Result("", "", 0)
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        if step.exit_code:
            raise CommandExitException(step.stdout, step.stderr, step.exit_code)
        return step

    def create_code_context(self, cwd=None):
        return {"cwd": cwd}

    def remove_code_context(self, context):
        self.removed = context

    def run_code(self, code, context=None, timeout=None):
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def kill(self):
        self.killed = True


@pytest.fixture
def vm(monkeypatch):
    fake = FakeVM()

    def create(**kwargs):
        fake.created_with = kwargs
        return fake

    module = types.ModuleType("e2b_code_interpreter")
    module.Sandbox = types.SimpleNamespace(create=create)
    module.CommandExitException = CommandExitException
    module.TimeoutException = TimeoutException
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", module)
    monkeypatch.setenv("E2B_API_KEY", "e2b_fake")
    return fake


def test_missing_key_is_a_clear_error(vm, monkeypatch):
    monkeypatch.delenv("E2B_API_KEY")
    with pytest.raises(SandboxUnavailable, match="E2B_API_KEY"):
        get_sandbox("e2b")


def test_missing_package_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "e2b_code_interpreter", None)
    with pytest.raises(SandboxUnavailable, match="pip install"):
        get_sandbox("e2b")


def test_run_statuses(vm):
    box = get_sandbox("e2b", limits=Limits(timeout_s=5, max_output_bytes=100))
    assert vm.created_with["allow_internet_access"] is False and vm.created_with["api_key"] == "e2b_fake"
    vm.script = [
        Result("1\n", "", 0),
        Result("", "Traceback ...\nValueError: x\n", 1),
        Result("", "Traceback ...\nMemoryError\n", 1),
        Result("", "", 139),
        TimeoutException("slow"),
        Result("y" * 1000, "", 0),
    ]
    assert box.run("print(1)", files={"a.txt": "hi"}, stdin="in").stdout == "1\n"
    assert any(path.endswith("/a.txt") for path in vm.written)
    cmd, timeout = vm.commands_run[-1]
    assert "python3 -I" in cmd and "timeout -s KILL 5" in cmd and "env -i" in cmd and timeout > 5
    assert box.run("raise ValueError('x')").status == "error"
    assert box.run("x = bytearray(10**12)").status == "memory"
    assert box.run("crash").status == "killed"
    assert box.run("loop", timeout=1).status == "timeout"
    flood = box.run("print('y' * 1000)")
    assert flood.stdout_truncated and len(flood.stdout) < 200
    assert box.isolation.backend == "e2b" and "no_internet" in box.isolation.active
    box.close()
    assert vm.killed


def test_session_uses_a_code_context(vm):
    box = get_sandbox("e2b")
    execution = types.SimpleNamespace(
        logs=types.SimpleNamespace(stdout=["4", "2\n"], stderr=[]), error=None, results=[]
    )
    failing = types.SimpleNamespace(
        logs=types.SimpleNamespace(stdout=[], stderr=[]),
        error=types.SimpleNamespace(name="NameError", value="x", traceback="NameError: x"),
        results=[],
    )
    vm.script = [execution, failing]
    sess = box.session()
    ok = sess.run("print(42)")
    assert ok.status == "ok" and ok.stdout == "42\n"
    bad = sess.run("x")
    assert bad.status == "error" and "NameError" in bad.stderr
    sess.close()
