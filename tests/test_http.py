"""The one HTTP policy (sparring.http) against a real server on a loopback port."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sparring import ServerUnavailable
from sparring.http import HTTPPolicy, JSONClient, ServerRefused


class _Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next (status, body) of the server's script; counts requests."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        server = self.server
        status, body = server.script[min(server.count, len(server.script) - 1)]  # type: ignore[attr-defined]
        server.count += 1  # type: ignore[attr-defined]
        self.send_response(status)
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
    httpd.script = [(200, "{}")]  # type: ignore[attr-defined]
    httpd.count = 0  # type: ignore[attr-defined]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _client(httpd: ThreadingHTTPServer, retries: int = 3) -> JSONClient:
    url = f"http://127.0.0.1:{httpd.server_address[1]}"
    return JSONClient(url, "the test server", "start it", HTTPPolicy(timeout_s=5, retries=retries, backoff_s=0.01))


def test_server_errors_and_non_json_are_retried_until_an_answer(server: ThreadingHTTPServer) -> None:
    server.script = [(503, "busy"), (200, "not json"), (200, json.dumps({"ok": 1}))]  # type: ignore[attr-defined]
    assert _client(server).post("/x", {"a": 1}) == {"ok": 1}
    assert server.count == 3  # type: ignore[attr-defined]


def test_a_refusal_is_not_retried(server: ThreadingHTTPServer) -> None:
    server.script = [(404, "no such route")]  # type: ignore[attr-defined]
    with pytest.raises(ServerRefused, match=r"the test server at http://127\.0\.0\.1:\d+/x refused .*HTTP 404"):
        _client(server).post("/x", {})
    assert server.count == 1  # type: ignore[attr-defined]


def test_a_server_that_keeps_failing_is_one_transient_sentence(server: ThreadingHTTPServer) -> None:
    server.script = [(500, "boom")]  # type: ignore[attr-defined]
    with pytest.raises(ServerUnavailable, match=r"did not answer after 2 tries \(HTTP 500: boom\); start it\.$"):
        _client(server, retries=2).post("/x", {})
    assert server.count == 2  # type: ignore[attr-defined]


def test_nobody_listening_is_the_same_sentence() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = JSONClient(f"http://127.0.0.1:{port}", "the test server", "start it", HTTPPolicy(1, 2, 0.01))
    with pytest.raises(ServerUnavailable, match=r"did not answer after 2 tries \(ConnectError"):
        client.get("/models")
