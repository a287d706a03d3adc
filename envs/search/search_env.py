"""What both search roles share: the ``search`` tool over a local or remote retriever.

Results come back in the Search-R1 form, inside ``<information>…</information>``, one line per
document: ``Doc 1 (Title: …) text``. Every document an episode retrieved is remembered in order
(the proposer hands them to RAG validation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparring.envs.core import TextEnv
from sparring.envs.search.corpus import DEFAULT_CORPUS, Corpus, corpus_dir
from sparring.envs.search.documents import Hit, split_contents
from sparring.envs.search.retrieval import Retriever, open_retriever
from sparring.envs.tools import tool

__all__ = ["EXAMPLE_QUERY", "SearchToolEnv", "format_information"]

_CORPORA: dict[str, Corpus] = {}

#: The query the instructions show. A small model copies the example it is shown (``...`` once made
#: most of its queries), so the example is a real query and searching it returns nothing.
EXAMPLE_QUERY = "creator of the Python programming language"


def format_information(hits: list[Hit], max_chars: int) -> str:
    """Hits as the ``<information>`` block the model reads."""
    lines = []
    for n, hit in enumerate(hits, 1):
        title, text = split_contents(hit.contents)
        text = " ".join(text.split())
        if len(text) > max_chars:
            text = text[:max_chars].rsplit(" ", 1)[0] + " …"
        lines.append(f"Doc {n} (Title: {title}) {text}")
    body = "\n".join(lines) if lines else "No documents matched the query."
    return f"<information>{body}</information>"


class SearchToolEnv(TextEnv):
    """A :class:`~sparring.envs.core.TextEnv` with the ``search`` tool."""

    domain = "search"

    def __init__(
        self,
        *,
        retriever: Retriever | str | Path | None = None,
        corpus: str | Path = DEFAULT_CORPUS,
        topk: int = 3,
        doc_chars: int = 600,
        max_query_chars: int = 300,
        **kwargs: Any,
    ):
        """Create the env.

        Args:
            retriever: A retriever, a retrieval server URL, or a corpus name/folder (BM25); None
                means BM25 on ``corpus``.
            corpus: The corpus whose seeds and documents tasks are drawn from.
            topk: Documents per search.
            doc_chars: Characters of each document shown in a result.
            max_query_chars: Longest query accepted.
            **kwargs: Passed to :class:`~sparring.envs.core.TextEnv` (``max_turns``, ...).
        """
        super().__init__(**kwargs)
        self._retriever_spec = retriever if retriever is not None else corpus
        self._retriever: Retriever | None = None
        self.corpus_name = str(corpus)
        self.topk = int(topk)
        self.doc_chars = int(doc_chars)
        self.max_query_chars = int(max_query_chars)
        self.queries: list[str] = []
        self.retrieved: dict[str, dict[str, Any]] = {}

    @property
    def retriever(self) -> Retriever:
        """The retriever, opened at the first search (shared per process)."""
        if self._retriever is None:
            self._retriever = open_retriever(self._retriever_spec)
        return self._retriever

    @property
    def corpus(self) -> Corpus:
        """The local corpus tasks come from (shared per process)."""
        key = str(corpus_dir(self.corpus_name))
        if key not in _CORPORA:
            _CORPORA[key] = Corpus.open(self.corpus_name)
        return _CORPORA[key]

    def _start_searches(self) -> None:
        self.queries = []
        self.retrieved = {}

    @tool(example={"query": EXAMPLE_QUERY})
    def search(self, query: str) -> str:
        """Search the corpus and return the top documents.

        Args:
            query: What to look for, in a few keywords.
        """
        query = " ".join(query.split())
        if not query:
            return "Error: the query is empty; write a few keywords about your task between <search> and </search>."
        if query.casefold() == EXAMPLE_QUERY.casefold():  # copied from the instructions, not asked about the task
            return (
                "Error: that is the example query from the instructions, not a search for your task; "
                "write keywords about your own task. Nothing was searched."
            )
        if len(query) > self.max_query_chars:
            return f"Error: the query is longer than {self.max_query_chars} characters; shorten it."
        self.queries.append(query)
        hits = self.retriever.retrieve([query], self.topk)[0]  # a dead server raises: it is no fault of the model
        for hit in hits:
            self.retrieved.setdefault(hit.id, hit.document())
        return format_information(hits, self.doc_chars)
