"""The retrieval server and its client: same results as the local retriever, clear errors."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from sparring import SparringError
from sparring.envs.search.client import RetrievalClient, RetrievalClientConfig
from sparring.envs.search.retrieval import BM25Retriever
from sparring.envs.search.server import create_app

QUERIES = ["daemon", "Jargon File", "which element has the symbol Fe", "zzzqqqx", "unix kernel process scheduling"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _serving(app: Any) -> Iterator[str]:
    """``app`` on a loopback port for the block; yields its URL."""
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def server_url(bm25: BM25Retriever) -> Iterator[str]:
    with _serving(create_app(bm25, "default")) as url:
        yield url


def test_client_round_trips_the_local_results(server_url: str, bm25: BM25Retriever):
    client = RetrievalClient(server_url, RetrievalClientConfig(batch_size=2))  # 5 queries -> 3 requests
    remote = client.retrieve(QUERIES, topk=5)
    local = bm25.retrieve(QUERIES, topk=5)
    assert remote == local
    assert remote[3] == [] and remote[0][0].id == "foldoc:daemon"
    client.close()


def test_the_protocol_is_search_r1(server_url: str):
    body = httpx.post(f"{server_url}/retrieve", json={"queries": ["daemon"], "topk": 2}).json()
    assert set(body) == {"result"} and len(body["result"][0]) == 2
    assert {"id", "contents"} <= set(body["result"][0][0])  # no scores asked: bare documents
    scored = httpx.post(f"{server_url}/retrieve", json={"queries": ["daemon"], "topk": 1, "return_scores": True})
    item = scored.json()["result"][0][0]
    assert item["document"]["id"] == "foldoc:daemon" and item["score"] > 0
    assert httpx.post(f"{server_url}/retrieve", json={"queries": ["x"], "topk": 0}).status_code == 422
    default = httpx.post(f"{server_url}/retrieve", json={"queries": ["daemon"], "topk": None}).json()
    assert len(default["result"][0]) == 3  # Search-R1 clients may leave topk to the server


def test_a_dead_server_is_a_clear_error_after_the_retries():
    url = f"http://127.0.0.1:{_free_port()}"  # nothing listens here
    client = RetrievalClient(url, RetrievalClientConfig(retries=3, backoff_s=0.1, timeout_s=2))
    started = time.monotonic()
    with pytest.raises(SparringError, match=r"did not answer after 3 tries .*sparring serve-retriever"):
        client.retrieve(["daemon"])
    assert time.monotonic() - started >= 0.3  # waited 0.1 + 0.2 s between the tries


@pytest.mark.parametrize(
    "item", [{"document": {"contents": "no id"}, "score": 1.0}, {"id": "d1"}, "just text", {"id": "d", "contents": 3}]
)
def test_a_malformed_result_item_is_one_clear_error(item: Any):
    """A server that answers 200 with items that are not Search-R1 documents."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.post("/retrieve")
    def retrieve(body: dict[str, Any]) -> dict[str, Any]:
        return {"result": [[item] for _ in body["queries"]]}

    with _serving(app) as url:
        client = RetrievalClient(url, RetrievalClientConfig(retries=1))
        with pytest.raises(SparringError, match=r"sent a malformed result item .*\"id\" and \"contents\""):
            client.retrieve(["daemon"])
        client.close()


def test_envs_search_through_the_server(server_url: str):
    from sparring.envs.search.answer_env import SearchAnswerEnv

    env = SearchAnswerEnv(retriever=server_url)
    env.reset(options={"task": {"id": "t", "question": "What runs in the background?", "answers": ["daemon"]}})
    obs, *_ = env.step("<search>daemon</search>")
    assert obs.startswith("<information>Doc 1 (Title: daemon)")
