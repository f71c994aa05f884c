"""The remote retriever client against the real local service, and against services that fail."""

import httpx
import pytest

from toolgym.search.base import RetrieverError
from toolgym.search.remote import RemoteRetriever, retrieve_url


@pytest.fixture
def no_sleep(monkeypatch):
    """Record the clients' backoff waits instead of sleeping through them."""
    waits: list[float] = []
    monkeypatch.setattr(RemoteRetriever, "_sleep", staticmethod(waits.append))
    return waits


def test_remote_hits_equal_the_local_index(world, index, service_url):
    client = RemoteRetriever(service_url)
    queries = [world.name(i) for i in range(0, 3_000, 150)] + ["zzqxv"]
    remote_hits = client.retrieve(queries, topk=3)
    local_hits = index.retrieve(queries, topk=3)
    assert [[h.id for h in q] for q in remote_hits] == [[h.id for h in q] for q in local_hits]
    assert remote_hits[0][0].contents == local_hits[0][0].contents
    assert remote_hits[0][0].score == pytest.approx(local_hits[0][0].score)
    assert remote_hits[-1] == []  # the server matched nothing: an empty list, and a successful reply
    client.close()


def test_without_scores_the_bare_documents_are_read(world, service_url):
    client = RemoteRetriever(service_url + "/retrieve", return_scores=False)
    (hits,) = client.retrieve([world.name(5)], topk=2)
    assert hits[0].id == "5" and hits[0].score is None


def test_retries_a_service_that_fails_its_first_attempts(world, flaky_service, no_sleep):
    url, service = flaky_service(failures=2, status=503)
    client = RemoteRetriever(url, retries=3, backoff=0.1)
    (hits,) = client.retrieve([world.name(7)], topk=3)
    assert hits[0].id == "7"
    assert service.requests == 3
    assert len(no_sleep) == 2 and 0.05 <= no_sleep[0] <= 0.1 and 0.1 <= no_sleep[1] <= 0.2  # backoff doubles


def test_gives_up_after_its_retries_with_the_reason(world, flaky_service, no_sleep):
    url, service = flaky_service(failures=100, status=503)
    client = RemoteRetriever(url, retries=2, backoff=0.1)
    with pytest.raises(RetrieverError, match=r"failed after 3 attempts: HTTP 503: .*warming up") as caught:
        client.retrieve([world.name(7)], topk=3)
    assert caught.value.attempts == 3 and service.requests == 3 and len(no_sleep) == 2


def test_client_errors_are_not_retried(world, service_url, no_sleep):
    client = RemoteRetriever(service_url, retries=3)
    with pytest.raises(RetrieverError, match=r"refused the request: HTTP 422.*topk must be between 1 and 20"):
        client.retrieve([world.name(1)], topk=50)
    assert no_sleep == []


def test_a_slow_service_times_out_and_is_retried(world, flaky_service):
    url, service = flaky_service(delay=1.0)
    client = RemoteRetriever(url, timeout=0.2, retries=1, backoff=0.01)
    with pytest.raises(RetrieverError, match=r"failed after 2 attempts: no reply within 0.2 s"):
        client.retrieve([world.name(1)], topk=3)
    assert service.requests == 2


def test_an_unreachable_service_is_an_error_not_an_empty_result(closed_port_url, no_sleep):
    client = RemoteRetriever(closed_port_url, retries=1, timeout=1.0)
    with pytest.raises(RetrieverError, match="cannot reach it"):
        client.retrieve(["anything"], topk=3)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ({"result": []}, "0 result lists for 1 queries"),
        ({"results": [[]]}, 'expected {"result": \\[...\\]}'),
        ({"result": ["doc"]}, "a result is str, not a list of documents"),
        ({"result": [[{"document": {"id": 1}}]]}, "a document needs 'contents'"),
        ({"result": [[{"document": "text", "score": 1}]]}, "a document is str"),
    ],
)
def test_malformed_replies_are_errors(reply, message):
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=reply))
    client = RemoteRetriever("http://retriever:8000", client=httpx.Client(transport=transport), retries=0)
    with pytest.raises(RetrieverError, match=f"malformed reply: {message}"):
        client.retrieve(["q"], topk=3)


def test_the_request_is_search_r1s():
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.path, request.read()))
        return httpx.Response(200, json={"result": [[{"id": "0", "contents": '"T"\nbody'}]]})

    client = RemoteRetriever(
        "http://retriever:8000", client=httpx.Client(transport=httpx.MockTransport(handler))
    )
    (hits,) = client.retrieve(["who?"], topk=2)
    assert seen == [("/retrieve", b'{"queries":["who?"],"topk":2,"return_scores":true}')]
    assert (hits[0].title, hits[0].text) == ("T", "body")


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h:8000", "http://h:8000/retrieve"),
        ("http://h:8000/", "http://h:8000/retrieve"),
        ("https://h/api/retrieve", "https://h/api/retrieve"),
    ],
)
def test_urls(url, expected):
    assert retrieve_url(url) == expected


def test_bad_urls_and_settings_are_refused():
    with pytest.raises(ValueError, match="retriever URL"):
        RemoteRetriever("localhost:8000")
    with pytest.raises(ValueError, match="retries"):
        RemoteRetriever("http://h:1", retries=-1)
