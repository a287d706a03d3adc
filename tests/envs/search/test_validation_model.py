"""RAG validation with the real default policy (SmolLM2-135M through the HF backend)."""

from __future__ import annotations

import pytest

from sparring.envs.search.retrieval import BM25Retriever
from sparring.envs.search.scoring import exact_match
from sparring.envs.search.validation import PolicyValidator, Proposal, generator_answer_fn, validate_safely
from tests.conftest import require

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.mark.timeout(600)
def test_the_policy_answers_from_the_documents_and_is_graded_by_exact_match(bm25: BM25Retriever):
    from sparring.agents.model import default_model_present

    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    from sparring.agents.hf_backend import HFGenerator

    docs = [
        h.document() for q in ["iron symbol Fe", "metallic element atomic number 26"] for h in bm25.retrieve([q], 2)[0]
    ]
    noise = [h.document() for h in bm25.retrieve(["jazz music"], 4)[0]]
    question = "Which chemical element has the symbol Fe and atomic number 26?"
    proposals = [Proposal(question, "iron", docs, noise), Proposal(question, "Eric S. Raymond", docs, noise)]
    validator = PolicyValidator(generator_answer_fn(HFGenerator(), max_new_tokens=16))
    verdicts = validate_safely(validator, proposals)
    for proposal, verdict in zip(proposals, verdicts, strict=True):
        assert verdict.answer, verdict.reasons  # the model really answered (no validator_error)
        assert verdict.valid == bool(exact_match(verdict.answer, proposal.answer))
        assert verdict.valid or verdict.reasons[0].startswith("solver_answered_other")
    assert not verdicts[1].valid  # a seed the documents do not support is rejected
