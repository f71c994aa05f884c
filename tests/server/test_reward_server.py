"""The reward server and its client: scores, 422s for bad requests, recording, bounded concurrency, retries,
and a real server answering 2,000 concurrent requests without losing one."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from toolgym.core.types import Verdict
from toolgym.rewards.scorers import register_scorer, unregister_scorer
from toolgym.server.reward_client import RewardClient, RewardServerError
from toolgym.server.rewards import create_app
from toolgym.testing.servers import free_port, serve_in_thread

MATH_HALF = {"type": "math", "ground_truth": "\\frac{1}{2}"}


@pytest.fixture(scope="module")
def client():
    with TestClient(create_app(max_concurrency=8)) as c:
        yield c


def test_score(client):
    body = {"response": "so it is \\boxed{0.5}", "verification_info": MATH_HALF}
    reply = client.post("/score", json=body)
    assert reply.status_code == 200
    assert reply.json() == {
        "score": 1.0,
        "passed": True,
        "details": {"answer": "0.5", "gold": "\\frac{1}{2}", "method": "exact number"},
        "error": None,
    }
    wrong = client.post("/score", json={"response": "\\boxed{\\{1, 2\\}}", "verification_info": MATH_HALF})
    assert wrong.status_code == 200 and wrong.json()["score"] == 0.0 and wrong.json()["error"] is None


def test_verification_info_may_be_json_text(client):
    body = {
        "response": "<answer>Paris</answer>",
        "verification_info": json.dumps({"type": "f1", "ground_truth": ["paris"]}),
    }
    assert client.post("/score", json=body).json()["score"] == 1.0


def test_batch_keeps_the_order(client):
    items = [
        {"response": f"\\boxed{{{i}}}", "verification_info": {"type": "numeric", "ground_truth": 3}}
        for i in range(6)
    ]
    results = client.post("/score_batch", json={"items": items}).json()["results"]
    assert [r["score"] for r in results] == [0.0, 0.0, 0.0, 1.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("path", "body", "fragment"),
    [
        ("/score", {"response": "x"}, "verification_info"),
        ("/score", {"verification_info": MATH_HALF}, "response"),
        ("/score", {"response": 5, "verification_info": MATH_HALF}, "response"),
        ("/score", {"response": "x", "verification_info": [1, 2]}, "verification_info"),
        ("/score", {"response": "x", "verification_info": "{not json"}, "not JSON"),
        ("/score", {"response": "x", "verification_info": MATH_HALF, "extra": 1}, "extra"),
        ("/score", {"response": "x", "verification_info": {"ground_truth": "1"}}, 'needs a \\"type\\"'),
        (
            "/score",
            {"response": "x", "verification_info": {"type": "code_tests"}},
            "a non-empty list of test sources",
        ),
        ("/score", {"response": "\\boxed{1}", "verification_info": {"type": "math"}}, "ground_truth"),
        ("/score_batch", {"items": [{"response": "x", "verification_info": {"type": "nope"}}]}, "items[0]"),
        ("/score_batch", {"items": "x"}, "items"),
    ],
)
def test_malformed_requests_get_422_and_nothing_is_scored(client, path, body, fragment):
    reply = client.post(path, json=body)
    assert reply.status_code == 422, reply.text
    assert fragment in reply.text


def test_invalid_json_body_gets_422(client):
    reply = client.post("/score", content=b"{this is not json", headers={"content-type": "application/json"})
    assert reply.status_code == 422


def test_health_lists_the_types(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and {"math", "numeric", "exact_match", "f1"} <= set(health["types"])


def test_every_computation_is_recorded(tmp_path):
    with TestClient(create_app(save_dir=tmp_path, save_freq=3, warm=False)) as c:
        for i in range(5):
            c.post(
                "/score",
                json={
                    "response": f"\\boxed{{{i}}}",
                    "verification_info": {"type": "numeric", "ground_truth": 2},
                },
            )
        (path,) = tmp_path.glob("rewards-*.jsonl")
        assert len(path.read_text().splitlines()) == 3  # written every save_freq records...
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 5  # ...and the rest on shutdown
    assert [r["result"]["score"] for r in lines] == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert (
        lines[0]["verification_info"] == {"type": "numeric", "ground_truth": 2}
        and lines[0]["latency_ms"] >= 0
    )


@pytest.fixture
def test_scorers():
    state = {"running": 0, "peak": 0}
    lock = threading.Lock()

    def slow(response, info):
        with lock:
            state["running"] += 1
            state["peak"] = max(state["peak"], state["running"])
        time.sleep(0.05)
        with lock:
            state["running"] -= 1
        return Verdict(reward=1.0, passed=True)

    def buggy(response, info):
        raise RuntimeError("scorer bug")

    register_scorer("test_slow", slow)
    register_scorer("test_buggy", buggy)
    yield state
    unregister_scorer("test_slow")
    unregister_scorer("test_buggy")


def test_concurrency_is_bounded_and_nothing_is_dropped(test_scorers):
    app = create_app(max_concurrency=3, warm=False)

    async def fire():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
            body = {"response": "x", "verification_info": {"type": "test_slow", "ground_truth": 1}}
            return await asyncio.gather(*(http.post("/score", json=body) for _ in range(30)))

    replies = asyncio.run(fire())
    assert [r.status_code for r in replies] == [200] * 30
    assert test_scorers["peak"] == 3


def test_a_scorer_bug_is_an_error_result_not_a_zero(client, test_scorers):
    reply = client.post(
        "/score", json={"response": "x", "verification_info": {"type": "test_buggy", "ground_truth": 1}}
    )
    assert reply.status_code == 200
    assert reply.json()["error"] == "internal scorer error: RuntimeError: scorer bug"


# -- the client --------------------------------------------------------------------------------------------


def test_client_against_a_live_server():
    with (
        serve_in_thread(create_app(warm=False)) as url,
        RewardClient(url, max_workers=4, batch_size=16) as rc,
    ):
        assert rc.health()["status"] == "ok"
        assert rc.score("\\boxed{0.5}", MATH_HALF).passed
        infos = [{"type": "numeric", "ground_truth": i % 7} for i in range(100)]
        results = rc.score_batch([f"<answer>{i % 5}</answer>" for i in range(100)], infos)
        assert [r.passed for r in results] == [i % 5 == i % 7 for i in range(100)]
        with pytest.raises(RewardServerError, match="422"):
            rc.score("x", {"type": "no_such_type", "ground_truth": 1})
        with pytest.raises(ValueError):
            rc.score_batch(["a"], [])


def _mock_client(handler, **kwargs) -> RewardClient:
    return RewardClient("http://rewards", transport=httpx.MockTransport(handler), backoff=0.01, **kwargs)


def test_client_retries_transient_failures():
    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) == 1:
            raise httpx.ConnectError("refused", request=request)
        if len(calls) == 2:
            return httpx.Response(503, json={"detail": "overloaded"})
        return httpx.Response(200, json={"score": 1.0, "passed": True})

    with _mock_client(handler, retries=3) as rc:
        assert rc.score("x", MATH_HALF).score == 1.0
    assert len(calls) == 3


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        (lambda request: httpx.Response(500, text="boom"), "failed after 3 attempts: HTTP 500"),
        (lambda request: httpx.Response(200, text="not json"), "not JSON"),
        (lambda request: httpx.Response(200, json={"unexpected": True}), "not a ScoreResult"),
    ],
)
def test_client_never_turns_a_failure_into_a_reward(behaviour, message):
    with _mock_client(behaviour, retries=2) as rc, pytest.raises(RewardServerError, match=message):
        rc.score("x", MATH_HALF)


def test_client_does_not_retry_a_refused_request():
    calls = []

    def handler(request):
        calls.append(request)
        return httpx.Response(422, json={"detail": "unknown verification type 'x'"})

    with (
        _mock_client(handler, retries=5) as rc,
        pytest.raises(RewardServerError, match="unknown verification"),
    ):
        rc.score("x", {"type": "x"})
    assert len(calls) == 1


def test_client_gives_up_on_a_dead_server():
    dead = RewardClient(f"http://127.0.0.1:{free_port()}", retries=2, backoff=0.01, timeout=2)
    with dead as rc, pytest.raises(RewardServerError, match="failed after 3 attempts"):
        rc.score_batch(["\\boxed{1}"] * 3, [MATH_HALF] * 3)


# -- a real server under load --------------------------------------------------------------------------------


def _request(i: int) -> tuple[bytes, int, float | None]:
    """Request ``i`` of the load test: (JSON body, expected status, expected score)."""
    kind = i % 20
    if kind < 4:  # sets: math-verify in the worker pool
        answer = f"\\{{{i + 1}, {i}\\}}" if i % 2 == 0 else f"\\{{{i}, {i + 2}\\}}"
        info = {"type": "math", "ground_truth": f"\\{{{i}, {i + 1}\\}}"}
        body, status, score = (
            {"response": f"\\boxed{{{answer}}}", "verification_info": info},
            200,
            float(i % 2 == 0),
        )
    elif kind < 10:  # numbers: settled in-process
        info = {"type": "math", "ground_truth": f"\\frac{{{i}}}{{4}}"}
        body, status, score = {"response": f"<answer>{i / 4}</answer>", "verification_info": info}, 200, 1.0
    elif kind < 12:
        info = {"type": "numeric", "ground_truth": i}
        body, status, score = (
            {"response": f"<answer>{i + kind % 2}</answer>", "verification_info": info},
            200,
            1.0 - kind % 2,
        )
    elif kind < 14:
        info = {"type": "exact_match", "ground_truth": [f"city {i}"]}
        body, status, score = (
            {"response": f"<answer>The City {i}</answer>", "verification_info": info},
            200,
            1.0,
        )
    elif kind == 14:
        info = {"type": "f1", "ground_truth": [f"new city {i}"]}
        body, status, score = {"response": f"<answer>city {i}</answer>", "verification_info": info}, 200, 0.8
    elif kind == 15:  # verification_info as JSON text, an interval against an inequality
        info = json.dumps({"type": "math", "ground_truth": "(4, \\infty)"})
        body, status, score = {"response": "\\boxed{x > 4}", "verification_info": info}, 200, 1.0
    elif kind == 16:
        body, status, score = {"response": "x", "verification_info": {"type": "no_such_type"}}, 422, None
    elif kind == 17:
        body, status, score = {"verification_info": MATH_HALF}, 422, None
    elif kind == 18:
        return b'{"response": "unterminated', 422, None
    else:
        body, status, score = {"response": "\\boxed{1}", "verification_info": {"type": "math"}}, 422, None
    return json.dumps(body).encode(), status, score


async def _post(port: int, body: bytes) -> tuple[int, bytes]:
    """One HTTP/1.1 request on its own connection. A raw asyncio client: on 2 cores, httpx's async pool
    spends more CPU on 2,000 connections than the server does answering them."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (
        f"POST /score HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
    )
    writer.write(head.encode() + b"\r\nConnection: close\r\n\r\n" + body)
    await writer.drain()
    reply = await reader.read()
    writer.close()
    status_line, _, rest = reply.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_a_real_server_answers_2000_concurrent_requests(tmp_path):
    """``toolgym serve rewards`` in its own process; 2,000 requests in flight at once; every one answered
    with the right status and score, and every scored one recorded."""
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    command = [sys.executable, "-m", "toolgym.cli", "serve", "rewards", "--port", str(port)]
    options = ["--log-level", "warning", "--save-dir", str(tmp_path / "records"), "--save-freq", "500"]
    server = subprocess.Popen([*command, *options], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and server.poll() is None, (
                tmp_path / "server.log"
            ).read_text()
            time.sleep(0.2)
        requests = [_request(i) for i in range(2000)]

        async def fire():
            return await asyncio.gather(*(_post(port, body) for body, _, _ in requests))

        start = time.perf_counter()
        replies = asyncio.run(asyncio.wait_for(fire(), timeout=120))
        elapsed = time.perf_counter() - start
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
    assert len(replies) == 2000
    for i, ((status, body), (_, expected_status, expected)) in enumerate(zip(replies, requests)):
        assert status == expected_status, (i, status, body)
        if expected is not None:
            result = json.loads(body)
            assert result["error"] is None and result["score"] == pytest.approx(expected), (i, result)
    scored = sum(status == 200 for _, status, _ in requests)
    (records,) = (tmp_path / "records").glob("rewards-*.jsonl")
    assert len(records.read_text().splitlines()) == scored
    print(f"\n2000 concurrent requests answered in {elapsed:.2f} s ({2000 / elapsed:.0f} requests/s)")
