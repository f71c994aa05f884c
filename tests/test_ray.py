"""Ray scale-out on one local Ray instance (started once for this module): ``toolgym rollout --ray 2`` with
the tiny model in two engine actors, and ``toolgym serve tools --ray`` as a Ray Serve deployment."""

import argparse
import json
import os
import time

import httpx
import pytest
import ray

from toolgym.cli import main as cli_main
from toolgym.core.types import Trajectory
from toolgym.server.ray_serve import (
    RayServeOptions,
    add_ray_arguments,
    options_from_args,
    serve_tools,
    stateful_tools,
    use_local_ray_env,
)
from toolgym.server.tools_api import ToolServerConfig
from toolgym.testing.servers import free_port


@pytest.fixture(scope="module")
def local_ray():
    start = time.perf_counter()
    use_local_ray_env()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    print(f"ray.init took {time.perf_counter() - start:.1f}s")
    yield
    from ray import serve

    serve.shutdown()
    ray.shutdown()


def test_rollout_over_two_ray_engine_actors_writes_the_usual_jsonl(local_ray, tmp_path, capsys):
    out = tmp_path / "ray.jsonl"
    args = ["rollout", "--env", "toolgym/Calculator-v0", "--model", "tiny", "--ray", "2", "--episodes", "2"]
    args += ["--group-size", "2", "--max-response-tokens", "48", "--max-tokens-per-turn", "24"]
    assert cli_main([*args, "--out", str(out), "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "episodes per engine: 2, 2" in captured.err  # both actors played, whole episodes each
    assert "toolgym/Calculator-v0" in captured.out and "4 trajectories appended" in captured.out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    schema = set(json.loads(Trajectory(task_id="-").model_dump_json()))  # what a one-engine rollout writes
    assert len(rows) == 4 and all(set(row) == schema for row in rows)
    trajectories = [Trajectory.model_validate(row) for row in rows]
    assert all(t.error is None and t.response_ids for t in trajectories)
    assert all(len(t.logprobs) == len(t.response_ids) == len(t.response_mask) <= 48 for t in trajectories)
    assert sorted((t.group, t.sample) for t in trajectories) == [
        (f"toolgym/Calculator-v0#{i}", s) for i in range(2) for s in range(2)
    ]
    assert ray.is_initialized()  # a Ray the caller started is left running
    deadline = time.monotonic() + 120  # a hang guard: the actors' CPUs come back within seconds
    while ray.available_resources().get("CPU") != 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU") == 2  # the engine actors are gone, their CPUs free


def test_tool_server_on_ray_serve_answers_health_and_a_calculator_call(local_ray):
    port = free_port()
    config = ToolServerConfig(tools=["calculator"], max_concurrency=8, max_queue=8)
    serve_tools(config, RayServeOptions(num_cpus=0.5), host="127.0.0.1", port=port, blocking=False)
    url = f"http://127.0.0.1:{port}"
    health = httpx.get(f"{url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    reply = httpx.post(f"{url}/tools/calculator", json={"expression": "48213 * 1937"}, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["status"] == "ok" and reply.json()["output"] == "93388581"


def _parse(*argv):
    p = argparse.ArgumentParser()
    add_ray_arguments(p)
    return options_from_args(p.parse_args(argv))


def test_replica_flags_need_ray_and_consistent_bounds():
    assert _parse() is None
    assert _parse("--ray", "--replicas", "3") == RayServeOptions(replicas=3)
    assert _parse("--ray", "--min-replicas", "1", "--max-replicas", "4").autoscaling
    with pytest.raises(ValueError, match="--replicas need --ray"):
        _parse("--replicas", "3")
    with pytest.raises(ValueError, match="more than --max-replicas"):
        _parse("--ray", "--min-replicas", "5", "--max-replicas", "2")
    assert stateful_tools(ToolServerConfig(tools=["python", "calculator"])) == ["python"]


def test_local_ray_env_gives_the_proxy_time_and_keeps_what_the_user_set(monkeypatch):
    monkeypatch.delenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", raising=False)
    use_local_ray_env()
    assert os.environ["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] == "60"
    monkeypatch.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "7")
    use_local_ray_env()
    assert os.environ["RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S"] == "7"
