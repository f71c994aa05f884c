"""`toolgym serve retriever`: Search-R1's /retrieve schema over a BM25 index, in-process and from the CLI."""

import json
import subprocess
import sys
import time

import httpx
import pytest

from toolgym.cli import main as toolgym_main
from toolgym.search.bm25 import BM25Index
from toolgym.search.world import KnowledgeWorld
from toolgym.server.retriever import create_app, load_index, main, parse_args
from toolgym.testing.servers import free_port, serve_in_thread

WORLD = KnowledgeWorld(400, seed=5)


@pytest.fixture(scope="module")
def url():
    with serve_in_thread(create_app(BM25Index.build(WORLD.documents()), topk=2, topk_max=10)) as base:
        yield base


def _passages2string(retrieval_result):
    """Search-R1's client-side rendering (search_r1/llm_agent/generation.py), verbatim in behaviour."""
    format_reference = ""
    for idx, doc_item in enumerate(retrieval_result):
        content = doc_item["document"]["contents"]
        title = content.split("\n")[0]
        text = "\n".join(content.split("\n")[1:])
        format_reference += f"Doc {idx + 1}(Title: {title}) {text}\n"
    return format_reference


def test_scored_results_have_search_r1s_shape(url):
    queries = [f"{WORLD.name(1)} born", WORLD.name(2)]  # "born" matches every person: three documents
    payload = {"queries": queries, "topk": 3, "return_scores": True}
    reply = httpx.post(f"{url}/retrieve", json=payload).json()
    assert set(reply) == {"result"} and len(reply["result"]) == 2
    first = reply["result"][0]
    assert len(first) == 3 and set(first[0]) == {"document", "score"}
    assert first[0]["document"] == WORLD.document(1) and isinstance(first[0]["score"], float)
    assert _passages2string(first).startswith(f"Doc 1(Title: {WORLD.name(1)}) {WORLD.name(1)} is")


def test_unscored_results_are_bare_documents_and_topk_defaults(url):
    reply = httpx.post(f"{url}/retrieve", json={"queries": [f"{WORLD.name(3)} born"]}).json()
    assert len(reply["result"][0]) == 2 and reply["result"][0][0] == WORLD.document(3)
    assert httpx.post(f"{url}/retrieve", json={"queries": []}).json() == {"result": []}


def test_bad_requests_are_refused_with_a_reason(url):
    too_many = httpx.post(f"{url}/retrieve", json={"queries": ["x"], "topk": 11})
    assert too_many.status_code == 422 and "between 1 and 10" in too_many.text
    assert httpx.post(f"{url}/retrieve", json={"topk": 3}).status_code == 422
    assert httpx.get(f"{url}/health").json() == {"status": "ok", "documents": 400}


def test_corpus_save_index_and_index_give_the_same_documents(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    WORLD.write_jsonl(corpus)
    built = load_index(parse_args(["--corpus", str(corpus), "--save-index", str(tmp_path / "idx")]))
    loaded = load_index(parse_args(["--index", str(tmp_path / "idx"), "--mmap"]))
    assert loaded.retrieve([WORLD.name(9)], 3) == built.retrieve([WORLD.name(9)], 3)
    with pytest.raises(ValueError, match="--save-index applies"):
        load_index(parse_args(["--index", "x", "--save-index", "y"]))


def test_arguments_are_checked(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--corpus", "a.jsonl", "--index", "dir"])
    assert exit_info.value.code == 2 and "not allowed with" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--topk must be between"):
        main(["--world", "200", "--topk", "0"])
    with pytest.raises(SystemExit) as exit_info:
        toolgym_main(["serve", "retriever", "--help"])
    assert exit_info.value.code == 0 and "--topk-max" in capsys.readouterr().out


def test_the_cli_serves_and_answers_like_curl():
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "toolgym.cli",
        "serve",
        "retriever",
        "--world",
        "300",
        "--port",
        str(port),
    ]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 120  # a hang guard: ~2 s normally
        while True:
            assert server.poll() is None, server.communicate()[1]
            try:
                if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the retriever did not come up within 120 s"
            time.sleep(0.1)
        world = KnowledgeWorld(300, seed=0)
        body = json.dumps({"queries": [world.name(4)], "topk": 1, "return_scores": True})
        reply = httpx.post(f"{url}/retrieve", content=body, headers={"Content-Type": "application/json"})
        assert reply.json()["result"][0][0]["document"] == world.document(4)
    finally:
        server.terminate()
        _, err = server.communicate(timeout=15)
    assert "300 documents ready" in err
