"""HTTP client of a Search-R1-compatible retrieval server (``POST /retrieve``).

Many rollout workers share one index through it: queries are sent in batches, each request has a
timeout, and transport errors or server errors (5xx) are retried with exponential backoff. When
every try fails the client raises one clear :class:`~sparring.SparringError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from sparring import SparringError
from sparring.envs.search.retrieval import Hit

__all__ = ["RetrievalClient", "RetrievalClientConfig"]


@dataclass
class RetrievalClientConfig:
    """How the client talks to the server."""

    timeout_s: float = 30.0
    """Seconds one request may take (connect, read and write)."""
    retries: int = 3
    """Tries per batch before giving up."""
    backoff_s: float = 0.5
    """Wait before the second try; doubles for each further try."""
    batch_size: int = 64
    """Queries per request."""


class RetrievalClient:
    """A :class:`~sparring.envs.search.retrieval.Retriever` backed by a retrieval server.

    Example:
        >>> client = RetrievalClient("http://127.0.0.1:8000")  # doctest: +SKIP
        >>> client.retrieve(["jargon file"], topk=1)[0][0].id  # doctest: +SKIP
        'foldoc:Jargon File'
    """

    def __init__(self, url: str, config: RetrievalClientConfig | None = None):
        """Connect lazily to ``url`` (the server's base URL or its ``/retrieve`` endpoint)."""
        self.config = config or RetrievalClientConfig()
        url = url.rstrip("/")
        self.url = url if url.endswith("/retrieve") else url + "/retrieve"
        self._http = httpx.Client(timeout=self.config.timeout_s)

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        last = ""
        for attempt in range(self.config.retries):
            if attempt:
                time.sleep(self.config.backoff_s * 2 ** (attempt - 1))
            try:
                response = self._http.post(self.url, json=payload)
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
                continue
            if response.status_code >= 500:
                last = f"HTTP {response.status_code}"
                continue
            if response.status_code != 200:
                raise SparringError(
                    f"the retrieval server at {self.url} rejected the request (HTTP {response.status_code}: "
                    f"{response.text[:200]}); check that it speaks the Search-R1 /retrieve protocol."
                )
            try:
                return response.json()
            except ValueError:
                last = "the answer is not JSON"
        raise SparringError(
            f"the retrieval server at {self.url} did not answer after {self.config.retries} tries ({last}); "
            "start it with `sparring serve-retriever` or fix the URL."
        )

    def retrieve(self, queries: list[str], topk: int = 3) -> list[list[Hit]]:
        """Top-``topk`` hits of each query, best first, fetched in batches."""
        out: list[list[Hit]] = []
        size = max(1, self.config.batch_size)
        for start in range(0, len(queries), size):
            batch = list(queries[start : start + size])
            body = self._post({"queries": batch, "topk": int(topk), "return_scores": True})
            result = body.get("result")
            if not isinstance(result, list) or len(result) != len(batch):
                raise SparringError(f"the retrieval server at {self.url} sent a malformed answer (no result list).")
            for row in result:
                out.append([self._hit(item) for item in (row if isinstance(row, list) else [None])])
        return out

    def _hit(self, item: Any) -> Hit:
        """One result item (``{"document": {...}, "score"}`` or the document itself) as a :class:`Hit`."""
        doc = item.get("document", item) if isinstance(item, dict) else None
        if not isinstance(doc, dict) or "id" not in doc or not isinstance(doc.get("contents"), str):
            raise SparringError(
                f"the retrieval server at {self.url} sent a malformed result item ({str(item)[:120]}); each must be a "
                'document with "id" and "contents" (Search-R1 /retrieve protocol).'
            )
        try:
            return Hit(int(doc.get("index", -1)), str(doc["id"]), doc["contents"], float(item.get("score", 0.0)))
        except (TypeError, ValueError) as e:
            raise SparringError(f"the retrieval server at {self.url} sent a malformed result item: {e}.") from e

    def close(self) -> None:
        """Close the connection pool (idempotent)."""
        self._http.close()
