"""``toolgym export openenv`` writes the directory OpenEnv's CLI expects: what the installed ``openenv init``
writes (files, manifest keys, base image, dependency), its structure, deployment and manifest checks pass
(all but ``uv.lock``, which needs the package index), and ``server/app.py`` serves the env."""

from __future__ import annotations

import runpy
import tomllib

import gymnasium as gym
import pytest
import yaml
from fastapi.testclient import TestClient
from openenv.cli._cli_utils import validate_env_structure
from openenv.cli._validation import get_deployment_modes, validate_multi_mode_deployment
from openenv.cli.commands import init as openenv_init_module
from openenv.validation.parsers.openenv_yaml import OpenEnvYamlParser
from packaging.requirements import Requirement

from toolgym.server.openenv_export import package_name, write_openenv_package

ENV_ID = "toolgym/Calculator-v0"


def test_the_export_passes_openenvs_checks_and_serves_the_env(tmp_path):
    out = tmp_path / "calc"
    write_openenv_package(ENV_ID, out, env_kwargs={"max_turns": 6, "level": 2}, max_sessions=8)

    manifest = yaml.safe_load((out / "openenv.yaml").read_text())
    assert manifest["name"] == "toolgym_calculator_v0"
    parsed = OpenEnvYamlParser().parse(out)  # OpenEnv 0.10's validator reads the manifest as is
    assert parsed.capabilities.declared_tools == ["calculator"]
    assert parsed.capabilities.verifier.kind == "reward_channel" and tuple(parsed.reward.range) == (0.0, 1.0)
    assert validate_env_structure(out) == ["Recommended directory missing: outputs/"]
    _ok, issues = validate_multi_mode_deployment(out)
    assert issues == ["Missing uv.lock - run 'uv lock' to generate it"]
    assert get_deployment_modes(out)["docker"]
    project = tomllib.loads((out / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["server"] == "toolgym_calculator_v0.server.app:main"
    assert any(dep.startswith("toolgym[openenv]") for dep in project["dependencies"])
    dockerfile = (out / "server" / "Dockerfile").read_text()
    assert "uvicorn server.app:app --host 0.0.0.0 --port 8000" in dockerfile and "HEALTHCHECK" in dockerfile

    app_module = runpy.run_path(str(out / "server" / "app.py"), run_name="exported_app")
    assert app_module["ENV_KWARGS"] == {"max_turns": 6, "level": 2}
    with TestClient(app_module["app"]) as client:
        assert client.get("/metadata").json()["name"] == ENV_ID
        with client.websocket_connect("/ws") as ws:
            ws.send_json({"type": "reset", "data": {"seed": 0}})
            first = ws.receive_json()["data"]["observation"]
    expected_env = gym.make(ENV_ID, max_turns=6, level=2)
    prompt, info = expected_env.reset(seed=0)
    assert (first["text"], first["task_id"]) == (prompt, info["task_id"])


def test_the_export_refuses_an_unknown_env_before_writing(tmp_path):
    with pytest.raises(gym.error.Error):
        write_openenv_package("toolgym/NoSuchEnv-v0", tmp_path / "x")
    assert not (tmp_path / "x").exists()
    assert package_name("toolgym/SearchMultiHop-v0") == "toolgym_searchmultihop_v0"


def test_the_cli_exports_and_serve_refuses_an_unknown_env(tmp_path, capsys):
    from toolgym.cli import main

    out = tmp_path / "math"
    assert (
        main(["export", "openenv", "--env", "toolgym/Math-v0", "-k", "max_turns=6", "--out", str(out)]) == 0
    )
    assert "ENV_KWARGS = {'max_turns': 6}" in (out / "server" / "app.py").read_text()
    assert "uv lock" in capsys.readouterr().out
    assert main(["serve", "openenv", "--env", "toolgym/NoSuchEnv-v0"]) == 2
    assert "NoSuchEnv" in capsys.readouterr().err


def test_the_export_writes_what_the_installed_openenv_init_writes(tmp_path, monkeypatch):
    """The same files (less the template's own environment module, which toolgym's app replaces), the same
    manifest keys and values where they are not the env's own, the same base image and the ``openenv``
    dependency: checked against whichever openenv is installed, so an OpenEnv release that changes its
    template fails here."""
    # `openenv init` then runs `uv lock`, which needs the package index: not part of the template
    monkeypatch.setattr(openenv_init_module, "_generate_uv_lock", lambda env_dir: False)
    openenv_init_module.init("probe_env", output_dir=str(tmp_path))
    template, out = tmp_path / "probe_env", tmp_path / "export"
    write_openenv_package(ENV_ID, out)

    def files(root):  # not the bytecode an installed openenv's template carries (pip and make compile it)
        return {
            p.relative_to(root).as_posix()
            for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts
        }

    expected = files(template) - {"server/probe_env_environment.py", "uv.lock"}
    assert expected <= files(out)
    ours, theirs = (yaml.safe_load((d / "openenv.yaml").read_text()) for d in (out, template))
    assert set(ours) == set(theirs)
    assert set(ours["validation"]) <= set(theirs["validation"]) | {"capabilities"}
    assert {k: v for k, v in ours.items() if k not in ("name", "validation")} == {
        k: v for k, v in theirs.items() if k not in ("name", "validation")
    }
    assert ours["validation"]["reward"] == theirs["validation"]["reward"]

    def base_image(root):
        lines = (root / "server" / "Dockerfile").read_text().splitlines()
        return next(line for line in lines if line.startswith("ARG BASE_IMAGE="))

    assert base_image(out) == base_image(template)

    def openenv_dependency(root):
        deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
        return [Requirement(d).name for d in deps if Requirement(d).name.startswith("openenv")]

    assert openenv_dependency(out) == openenv_dependency(template) == ["openenv"]
