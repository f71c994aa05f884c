"""The tool server: verl-tool's /get_observation (the env's parser and rendering, per-trajectory state, finish
and is_last_step), the typed API (422s with reasons), sessions (idle timeout, max_sessions), metrics, and
the overload answers (503 + Retry-After, 413)."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from fastapi.testclient import TestClient

import toolgym  # noqa: F401  (registers the envs)
from toolgym.parsers import make_parser
from toolgym.sandbox import shared_sandbox
from toolgym.sandbox.local import wait_until
from toolgym.server.tools import main
from toolgym.server.tools_api import ToolServerConfig
from toolgym.server.tools_app import create_app
from toolgym.testing.servers import free_port, serve_in_thread
from toolgym.tools.calculator import Calculator
from toolgym.tools.python import PythonTool

TOOLS = ["python", "calculator"]


@pytest.fixture(scope="module")
def client():
    app = create_app(ToolServerConfig(tools=TOOLS), sandbox=shared_sandbox())
    with TestClient(app) as c:
        yield c


def observe(client, ids, actions, **flags):
    reply = client.post("/get_observation", json={"trajectory_ids": ids, "actions": actions, **flags})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert len(body["observations"]) == len(body["dones"]) == len(body["valids"]) == len(ids)
    return body


# -- verl-tool's protocol ------------------------------------------------------------------------------------


def test_observations_are_what_the_parser_renders(client):
    parser = make_parser("xml", [PythonTool(), Calculator()])
    actions = [
        "Let me compute. <python>print(6*7)</python>",
        "Some text and no call at all",  # invalid, with the parser's reason
        "<calculator>2**10</calculator>",
        "<tool>print('generic marker goes to the primary tool')</tool>",
        "<think><python>print('never run')</python></think><answer>42</answer>",
    ]
    body = observe(client, ["a", "b", "c", "d", "e"], actions)
    invalid = parser.parse(actions[1])
    assert body["observations"] == [
        "<output>\n42\n</output>",
        parser.render_invalid(invalid.reason),
        "<output>\n1024\n</output>",
        "<output>\ngeneric marker goes to the primary tool\n</output>",
        "",
    ]
    assert body["valids"] == [True, False, True, True, True]
    assert body["dones"] == [False, False, False, False, True]  # an answer ends the trajectory


def test_verl_tools_python_fences_run_where_the_format_finds_no_call(client):
    """verl-tool's python tool reads <python> tags, else ```python fences (its math-TIR recipes' format)."""
    actions = [
        "I will compute it.\n```python\nx = 6 * 7\nprint(x)\n```",
        "```python\nprint(x + 1)\n```\nand\n```py\nprint(x + 2)\n```",  # two blocks: two calls, in order
        "<python>print('the tag wins')</python>\n```python\nprint('not run')\n```",
        "```bash\nls\n```",  # not a python fence: still no call
    ]
    body = observe(client, ["f", "f3", "f4"], actions[:1] + actions[2:])
    assert body["observations"][:2] == ["<output>\n42\n</output>", "<output>\nthe tag wins\n</output>"]
    assert body["valids"] == [True, True, False]
    assert body["observations"][2].startswith("Invalid action:")
    both = observe(client, ["f"], [actions[1]])["observations"][0]
    assert both == "<output>\n43\n</output>\n<output>\n44\n</output>"
    observe(client, ["f", "f2", "f3", "f4"], [""] * 4, finish=[True] * 4)


def test_a_fence_closed_mid_line_ends_the_code_there_as_verl_tool_reads_it(client):
    """verl-tool's python tool ends the code at the first ``` wherever it stands: what follows a closing
    fence on its line, or a fence closed at the end of a code line, is not code."""
    actions = [
        "```python\nprint('x')\n``` and that is the result",
        "```python\nprint('y')```\nthen more prose with `ticks`",
    ]
    body = observe(client, ["m1", "m2"], actions)
    assert body["observations"] == ["<output>\nx\n</output>", "<output>\ny\n</output>"]
    assert body["valids"] == [True, True]
    observe(client, ["m1", "m2"], ["", ""], finish=[True, True])


def test_fences_can_be_turned_off():
    app = create_app(ToolServerConfig(tools=TOOLS, code_fences=False), sandbox=shared_sandbox())
    with TestClient(app) as c:
        body = observe(c, ["a"], ["```python\nprint(1)\n```"])
    assert body["valids"] == [False] and body["observations"][0].startswith("Invalid action:")


def test_python_state_persists_per_trajectory_until_finish(client):
    observe(client, ["t1", "t2"], ["<python>x = 1</python>", "<python>x = 2</python>"])
    body = observe(client, ["t1", "t2"], ["<python>print(x)</python>", "<python>print(x)</python>"])
    assert body["observations"] == ["<output>\n1\n</output>", "<output>\n2\n</output>"]
    # finish: nothing runs, the state is freed
    body = observe(client, ["t1"], ["<python>print('not run')</python>"], finish=[True])
    assert body == {**body, "observations": [""], "dones": [True], "valids": [True]}
    after = observe(client, ["t1"], ["<python>print(x)</python>"])["observations"][0]
    assert "NameError" in after and after.startswith("<output>\nError:")
    # is_last_step: runs, then frees
    last = observe(client, ["t2"], ["<python>print(x + 1)</python>"], is_last_step=[True])
    assert last["observations"] == ["<output>\n3\n</output>"] and last["dones"] == [False]
    assert "NameError" in observe(client, ["t2"], ["<python>print(x)</python>"])["observations"][0]
    observe(client, ["t1", "t2"], ["", ""], finish=[True, True])


def test_integer_trajectory_ids_and_extra_fields_are_accepted(client):
    body = observe(
        client,
        [7, 8],
        ["<calculator>1+1</calculator>", "<calculator>2+2</calculator>"],
        extra_fields=[{"a": 1}, {}],
        some_per_trajectory_key=["x", "y"],
    )
    assert body["observations"] == ["<output>\n2\n</output>", "<output>\n4\n</output>"]


@pytest.mark.parametrize(
    "body, reason",
    [
        ({"trajectory_ids": ["a"], "actions": ["x", "y"]}, "2 entries in 'actions' for 1 trajectory_ids"),
        ({"trajectory_ids": ["a"], "actions": ["x"], "finish": [True, False]}, "entries in 'finish'"),
        ({"trajectory_ids": ["a"], "actions": ["x"], "stdin": "not a list"}, "'stdin' must be a list"),
        ({"trajectory_ids": ["a"]}, "actions"),
        ({"trajectory_ids": ["a"], "actions": [3]}, "valid string"),
    ],
)
def test_malformed_observation_requests_are_422_with_the_reason(client, body, reason):
    reply = client.post("/get_observation", json=body)
    assert reply.status_code == 422
    assert reason in reply.text


def test_long_output_is_cut_in_the_middle_as_the_env_does(client):
    body = observe(client, ["long"], ["<python>print('a' * 20000 + 'END')</python>"], is_last_step=[True])
    obs = body["observations"][0]
    assert len(obs) <= 8_000 and obs.endswith("END\n</output>") and "characters cut" in obs


# -- the typed API -------------------------------------------------------------------------------------------


def test_typed_call_validates_with_the_tools_args(client):
    ok = client.post("/tools/calculator", json={"expression": "7/2"})
    assert ok.status_code == 200
    assert ok.json() == {
        "name": "calculator",
        "status": "ok",
        "output": "3.5",
        "call_id": None,
        "metadata": {"value": "7/2"},
    }
    wrong = client.post("/tools/calculator", json={"expr": "1"})
    assert wrong.status_code == 422 and "expression" in wrong.text and "Field required" in wrong.text
    assert (
        client.post(
            "/tools/calculator", content=b"{not json", headers={"content-type": "application/json"}
        ).status_code
        == 422
    )
    unknown = client.post("/tools/shell", json={"cmd": "ls"})
    assert unknown.status_code == 404 and "python, calculator" in unknown.text
    # the model's mistakes are results, not HTTP errors
    bad = client.post("/tools/calculator", json={"expression": "1/0"}).json()
    assert bad["status"] == "error" and "division by zero" in bad["output"]


def test_typed_python_sessions_and_one_shot_calls(client):
    assert client.post("/tools/python?session_id=s", json={"code": "v = 5"}).json()["status"] == "ok"
    assert client.post("/tools/python?session_id=s", json={"code": "print(v)"}).json()["output"] == "5"
    one_shot = client.post("/tools/python", json={"code": "print(v)"}).json()
    assert one_shot["status"] == "error" and "NameError" in one_shot["output"]
    assert client.delete("/sessions/s").json() == {"closed": True}
    assert client.delete("/sessions/s").json() == {"closed": False}


def test_batch_runs_in_order_and_names_the_bad_item(client):
    calls = [{"name": "calculator", "arguments": {"expression": f"{i}*{i}"}} for i in range(5)] + [
        {"name": "python", "arguments": {"code": "print('hi')"}}
    ]
    results = client.post("/batch", json={"calls": calls}).json()["results"]
    assert [r["output"] for r in results] == ["0", "1", "4", "9", "16", "hi"]
    bad = client.post("/batch", json={"calls": [calls[0], {"name": "calculator", "arguments": {"x": 1}}]})
    assert bad.status_code == 422 and bad.json()["detail"].startswith(
        "calls[1]: calculator: invalid arguments"
    )
    unknown = client.post("/batch", json={"calls": [{"name": "nope"}]})
    assert unknown.status_code == 422 and "calls[0]: no tool 'nope'" in unknown.text


def test_tools_lists_schemas_and_which_keep_state(client):
    tools = {t["name"]: t for t in client.get("/tools").json()["tools"]}
    assert tools["python"]["stateful"] is True and tools["calculator"]["stateful"] is False
    assert tools["calculator"]["parameters"] == Calculator().parameters
    assert tools["python"]["primary_arg"] == "code"


def test_health_and_metrics(client):
    client.post("/tools/calculator", json={"expression": "1+1"})
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["tools"] == TOOLS and health["queue_depth"] == 0
    assert health["sandbox"]["workers_alive"] == health["sandbox"]["workers"]
    metrics = client.get("/metrics").json()
    assert metrics["requests"]["/tools/calculator 200"] >= 1
    assert metrics["latency"]["/tools/calculator"]["count"] >= 1
    assert metrics["counters"]["tool_calls"]["calculator/ok"] >= 1
    text = client.get("/metrics", params={"format": "prometheus"}).text
    assert 'toolgym_tools_requests_total{endpoint="/tools/calculator",status="200"}' in text
    assert 'toolgym_tools_tool_calls_total{tool="calculator",status="ok"}' in text
    assert "toolgym_tools_request_duration_ms_bucket" in text and "toolgym_tools_in_flight" not in text


# -- sessions ------------------------------------------------------------------------------------------------


def test_idle_sessions_are_freed_and_max_sessions_is_a_503():
    config = ToolServerConfig(tools=["python"], session_idle_timeout=0.2, max_sessions=2)
    app = create_app(config, sandbox=shared_sandbox())
    runtime = app.state.runtime
    with TestClient(app) as c:
        for sid in ("a", "b"):
            assert c.post(f"/tools/python?session_id={sid}", json={"code": "z = 1"}).status_code == 200
        full = c.post("/tools/python?session_id=c", json={"code": "z = 1"})
        assert full.status_code == 503 and full.headers["retry-after"] == "1" and "max_sessions" in full.text
        assert asyncio.run(runtime.sessions.sweep(now=10**9)) == 2  # long idle: both freed
        assert len(runtime.sessions) == 0 and runtime.sessions.expired == 2
        assert c.post("/tools/python?session_id=c", json={"code": "print(1)"}).json()["output"] == "1"


# -- overload ------------------------------------------------------------------------------------------------


def test_beyond_the_queue_requests_get_503_with_retry_after_at_once():
    """One slot, no queue: while a call holds the slot, others are refused at once, not piled up."""
    config = ToolServerConfig(tools=["python"], max_concurrency=1, max_queue=0, retry_after=2)
    app = create_app(config, sandbox=shared_sandbox())
    admission, release, held = app.state.admission, threading.Event(), []

    def held_body():  # the slot's holder: the rest of its body comes when the test says so
        yield b'{"code": '
        release.wait(60)
        yield b'"print(2)"}'

    def hold(url):
        headers = {"content-type": "application/json"}
        held.append(httpx.post(f"{url}/tools/python", content=held_body(), headers=headers, timeout=60))

    with serve_in_thread(app) as url:
        holder = threading.Thread(target=hold, args=(url,))
        holder.start()
        try:
            assert wait_until(lambda: admission.running == 1, timeout=60)
            refused = httpx.post(f"{url}/tools/python", json={"code": "print(1)"}, timeout=30)
            assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
            # refused on arrival (a queued request would wait for the slot, and say "no slot within ... s")
            assert "every slot and queue place is taken" in refused.text
            assert (admission.refused, admission.queued) == (1, 0)
            assert httpx.get(f"{url}/health", timeout=30).json()["in_flight"] == 1  # health is not queued
        finally:
            release.set()
            holder.join()
        assert held[0].status_code == 200 and held[0].json()["output"] == "2"
        assert httpx.post(f"{url}/tools/python", json={"code": "print(1)"}, timeout=30).status_code == 200


def test_bodies_over_the_limit_are_413():
    app = create_app(ToolServerConfig(tools=["calculator"], max_request_bytes=1000))
    with TestClient(app) as c:
        big = c.post("/tools/calculator", json={"expression": "1+" * 600 + "1"})
        assert big.status_code == 413 and "limit is 1,000 bytes" in big.text

        def chunks():
            yield b'{"expression": "'
            yield b"1+" * 600
            yield b'1"}'

        chunked = c.post("/tools/calculator", content=chunks(), headers={"content-type": "application/json"})
        assert chunked.status_code == 413
        assert c.post("/tools/calculator", json={"expression": "1+1"}).json()["output"] == "2"


def test_too_many_items_in_one_request_is_422():
    app = create_app(ToolServerConfig(tools=["calculator"], max_batch=2))
    with TestClient(app) as c:
        reply = c.post("/get_observation", json={"trajectory_ids": ["a", "b", "c"], "actions": ["x"] * 3})
        assert reply.status_code == 422 and "the limit is 2" in reply.text


def test_config_errors_name_the_fix():
    with pytest.raises(ValueError, match="unknown tools \\['shell'\\]"):
        create_app(ToolServerConfig(tools=["shell"]))
    with pytest.raises(ValueError, match="tool_options for tools not served"):
        create_app(ToolServerConfig(tools=["calculator"], tool_options={"python": {"timeout": 1}}))
    with pytest.raises(ValueError, match=r"TOOL\.KEY=VALUE"):
        main(["--tools", "calculator", "--tool-option", "timeout=1"])


def test_toolgym_serve_tools_runs_the_server_with_its_options():
    """The command line end to end: a real process, tool options reaching the tool."""
    import subprocess
    import sys
    import time

    port = free_port()
    argv = [
        sys.executable,
        "-m",
        "toolgym.cli",
        "serve",
        "tools",
        "--tools",
        "calculator",
        "--port",
        str(port),
    ]
    proc = subprocess.Popen([*argv, "--tool-option", "calculator.decimals=3"], stderr=subprocess.PIPE)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{url}/health", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
                time.sleep(0.2)
        body = {"trajectory_ids": ["a"], "actions": ["<tool>1/3</tool>"]}
        assert httpx.post(f"{url}/get_observation", json=body).json()["observations"] == [
            "<output>\n1/3 ≈ 0.333\n</output>"
        ]
    finally:
        proc.terminate()
        proc.wait(10)
    assert b"tool_server_url=http://127.0.0.1" in proc.stderr.read()


def test_the_verl_tool_and_tool_routes_are_answered_directly_and_still_documented(client):
    """``/get_observation`` and ``/tools/{name}`` are served by the direct routes (pydantic reads the body, no
    FastAPI dependency solving: the tool server bench's profile), first in the router; FastAPI's typed routes
    stay behind them, so the OpenAPI schema still documents both bodies."""
    from fastapi.routing import APIRoute

    routes = client.app.router.routes
    first = {r.path: r for r in reversed(routes) if getattr(r, "path", None)}  # the first route of each path
    for path in ("/get_observation", "/tools/calculator"):
        assert not isinstance(first[path], APIRoute), path
        assert any(isinstance(r, APIRoute) and r.path == path for r in routes), path
    schema = client.get("/openapi.json").json()
    assert "ObservationRequest" in schema["components"]["schemas"]
    assert {"/get_observation", "/tools/calculator"} <= set(schema["paths"])
    # a bad body gets FastAPI's 422, located in the body
    reply = client.post("/get_observation", content=b"not json", headers={"content-type": "application/json"})
    assert reply.status_code == 422 and reply.json()["detail"][0]["loc"][0] == "body"
