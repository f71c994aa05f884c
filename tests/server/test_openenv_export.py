"""``toolgym export openenv`` writes the directory OpenEnv's CLI expects: its own structure and deployment
checks pass (all but ``uv.lock``, which needs the package index), and ``server/app.py`` serves the env."""

from __future__ import annotations

import runpy
import tomllib

import gymnasium as gym
import pytest
import yaml
from fastapi.testclient import TestClient
from openenv.cli._cli_utils import validate_env_structure
from openenv.cli._validation import get_deployment_modes, validate_multi_mode_deployment

from toolgym.server.openenv_export import package_name, write_openenv_package

ENV_ID = "toolgym/Calculator-v0"


def test_the_export_passes_openenvs_checks_and_serves_the_env(tmp_path):
    out = tmp_path / "calc"
    write_openenv_package(ENV_ID, out, env_kwargs={"max_turns": 6, "level": 2}, max_sessions=8)

    manifest = yaml.safe_load((out / "openenv.yaml").read_text())
    assert manifest == {
        "spec_version": 1,
        "name": "toolgym_calculator_v0",
        "type": "space",
        "runtime": "fastapi",
        "app": "server.app:app",
        "port": 8000,
    }
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
