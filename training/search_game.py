"""What the search game needs beyond the common roles: its solver tasks, its preflight, its validator."""

from __future__ import annotations

from typing import Any

from sparring.envs.core import content_id
from sparring.training.config import TrainConfig

__all__ = ["search_preflight", "search_proposer_kwargs", "search_solver_task"]


def search_solver_task(outcome: dict[str, Any]) -> dict[str, Any] | None:
    """A valid question's solver task, its id from its whole content.

    A solver group and its proposer's solve rate are keyed by this id, so two different tasks must
    never share it.
    """
    if not outcome.get("valid") or not outcome.get("question"):
        return None
    task = {"question": outcome["question"], "answers": list(outcome.get("answers") or [outcome["answer"]])}
    return {"id": content_id(task, "proposed"), **task}


def search_preflight(config: TrainConfig) -> None:
    from sparring.envs.search.corpus import Corpus

    corpus = Corpus.open()  # the envs' default corpus: missing or of an older format is one sentence
    try:
        corpus.require_current_format()
    finally:
        corpus.close()


def search_proposer_kwargs(policy: Any, config: TrainConfig) -> dict[str, Any]:
    from sparring.agents.answering import generator_answer_fn
    from sparring.envs.search.validation import PolicyValidator

    return {"validator": PolicyValidator(generator_answer_fn(policy))} if hasattr(policy, "tokenizer") else {}
