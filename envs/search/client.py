"""HTTP client of a Search-R1-compatible retrieval server (``POST /retrieve``).

Many rollout workers share one index through it: queries are sent in batches under the project's
one HTTP policy (:mod:`sparring.http`: a timeout per request, retries with backoff, one sentence
when the server refuses or never answers).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sparring import SparringError
from sparring.envs.search.documents import Hit
from sparring.http import HTTPPolicy, JSONClient

__all__ = ["RetrievalClient", "RetrievalClientConfig"]


@dataclass
class RetrievalClientConfig(HTTPPolicy):
    """How the client talks to the server: the HTTP policy, plus the batch size."""

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
        self._http = JSONClient(
            self.url.removesuffix("/retrieve"),
            "the retrieval server",
            "start it with `sparring serve-retriever` or fix the URL",
            self.config,
        )

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = self._http.post("/retrieve", payload)
        if not isinstance(body, dict):
            raise SparringError(f"the retrieval server at {self.url} sent a malformed answer (not a JSON object).")
        return body

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
