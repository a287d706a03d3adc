"""One HTTP policy for every server Sparring calls: policy endpoints, judges, retrieval servers.

Each request has a timeout; transport errors, server errors (5xx, 429) and answers that are not
JSON are retried with exponential backoff; a request the server refuses (another 4xx) is not
retried. When a call fails, the caller gets one sentence naming the server, what went wrong and
how to fix it: :class:`ServerRefused` for a refusal (the user must fix the request or the URL),
:class:`~sparring.ServerUnavailable` when every try failed (transient: a trainer may retry it).

Example:
    >>> client = JSONClient("http://127.0.0.1:8000", "the retrieval server", "start it with `sparring serve-retriever`")
    >>> client.post("/retrieve", {"queries": ["lambda"], "topk": 1})  # doctest: +SKIP
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from sparring import ServerUnavailable, SparringError

__all__ = ["HTTPPolicy", "JSONClient", "ServerRefused"]


class ServerRefused(SparringError):
    """The server answered, but refused the request (a 4xx other than 429): retrying cannot help."""

    def __init__(self, message: str, status: int = 400):
        """``status``: the HTTP status code of the refusal."""
        super().__init__(message)
        self.status = status

    @property
    def request_specific(self) -> bool:
        """A refusal of this request's content (400, 413, 422: a prompt past the model's context, a
        parameter out of range), not of the URL, the model or the key (401, 403, 404, ...): other
        requests to the same server may still succeed."""
        return self.status in (400, 413, 422)


@dataclass
class HTTPPolicy:
    """Timeouts and retries of a :class:`JSONClient`."""

    timeout_s: float = 30.0
    """Seconds one request may take (connect, read and write)."""
    retries: int = 3
    """Tries per request before giving up (at least 1)."""
    backoff_s: float = 0.5
    """Wait before the second try; doubles for each further try."""


class JSONClient:
    """A JSON-over-HTTP client for one server, under one :class:`HTTPPolicy`.

    Args:
        base_url: The server's base URL; request paths are appended to it.
        what: The server as the error sentences name it ("the policy server").
        fix: What the user does when the server cannot be reached ("start it with ...").
        policy: Timeouts and retries.
        api_key: Sent as a bearer token when given.
    """

    def __init__(
        self, base_url: str, what: str, fix: str, policy: HTTPPolicy | None = None, api_key: str | None = None
    ):
        """Open a connection pool to ``base_url`` (nothing is sent yet)."""
        self.base_url = base_url.rstrip("/")
        self.what = what
        self.fix = fix
        self.policy = policy or HTTPPolicy()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=self.policy.timeout_s)

    def get(self, path: str) -> Any:
        """``GET path``; the decoded JSON answer."""
        return self._call("GET", path, None)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        """``POST path`` with a JSON body; the decoded JSON answer."""
        return self._call("POST", path, body)

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        where = f"{self.what} at {self.base_url}{path}"
        last = ""
        for attempt in range(max(1, self.policy.retries)):
            if attempt:
                time.sleep(self.policy.backoff_s * 2 ** (attempt - 1))
            try:
                response = self._http.request(method, path, json=body)
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
                continue
            if response.status_code >= 500 or response.status_code == 429:
                last = f"HTTP {response.status_code}: {response.text[:200]}"
                continue
            if response.status_code >= 400:
                raise ServerRefused(
                    f"{where} refused the request (HTTP {response.status_code}: {response.text[:300]}); "
                    "check the URL, the model name and the server's protocol.",
                    status=response.status_code,
                )
            try:
                return response.json()
            except ValueError:
                last = "its answer is not JSON"
        tries = max(1, self.policy.retries)
        raise ServerUnavailable(f"{where} did not answer after {tries} tries ({last}); {self.fix}.")

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._http.close()
