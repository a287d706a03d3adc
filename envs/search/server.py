"""The retrieval server: one index shared by many rollout workers over HTTP.

It speaks the Search-R1 protocol: ``POST /retrieve`` with ``{"queries": [...], "topk": k,
"return_scores": bool}`` answers ``{"result": [[...], ...]}``, one list per query, whose items
are ``{"document": {"id", "contents", "index"}, "score": s}`` with scores, else the bare
documents. ``GET /health`` reports the corpus. FastAPI and uvicorn come with the ``serve`` extra.
"""

from __future__ import annotations

from typing import Any

from sparring import SparringError
from sparring.envs.search.retrieval import Retriever

__all__ = ["create_app", "serve"]

#: Largest ``topk`` a request may ask for.
MAX_TOPK = 100


def create_app(retriever: Retriever, name: str = "", default_topk: int = 3) -> Any:
    """A FastAPI app serving ``retriever``; ``default_topk`` answers requests without ``topk``."""
    try:
        from fastapi import FastAPI, HTTPException
        from pydantic import BaseModel, Field
    except ImportError:
        raise SparringError("the retrieval server needs FastAPI; install it: pip install 'sparring[serve]'.") from None

    class RetrieveRequest(BaseModel):
        queries: list[str]
        topk: int | None = Field(default=None, ge=1, le=MAX_TOPK)
        return_scores: bool = False

    app = FastAPI(title="sparring retrieval", version="1")

    def retrieve(request: RetrieveRequest) -> dict[str, Any]:
        try:
            rows = retriever.retrieve(request.queries, request.topk or default_topk)
        except SparringError as e:
            raise HTTPException(status_code=400, detail=str(e)) from None
        result: list[list[dict[str, Any]]] = []
        for hits in rows:
            docs = [hit.document() | {"index": hit.index} for hit in hits]
            if request.return_scores:
                result.append([{"document": d, "score": h.score} for d, h in zip(docs, hits, strict=True)])
            else:
                result.append(docs)
        return {"result": result}

    # The request model is local (FastAPI is an optional import), so the postponed annotation
    # cannot be resolved by name: give FastAPI the class itself.
    retrieve.__annotations__["request"] = RetrieveRequest
    app.post("/retrieve")(retrieve)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "corpus": name}

    return app


def serve(retriever: Retriever, host: str = "127.0.0.1", port: int = 8000, name: str = "") -> None:
    """Run the server in the foreground until interrupted."""
    import uvicorn

    uvicorn.run(create_app(retriever, name), host=host, port=port, log_level="warning")
