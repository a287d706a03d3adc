"""RAG validation with the real default policy (SmolLM2-135M through the HF backend).

The policy answers in-process (``generator_answer_fn``) and through ``sparring serve-policy``'s
OpenAI-compatible app on a loopback port (``openai_answer_fn``, ``openai_judge_fn``). The
question is one SmolLM2 answers from its evidence under every noise set and document order
tried (greedy decoding); a wrong seed for the same question must be rejected. SmolLM2 also knows
it unaided, so these tests of reading turn the unaided check off, and one test shows that check
rejecting it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

import sparring  # noqa: F401  (registers the envs)
from sparring.agents.answering import generator_answer_fn, openai_answer_fn, openai_judge_fn
from sparring.envs.search.retrieval import BM25Retriever
from sparring.envs.search.validation import PolicyValidator, Proposal, validate_safely

pytestmark = [pytest.mark.model, pytest.mark.slow]

QUESTION = "Which chemical element has the symbol Fe and atomic number 26?"
SEARCHES = ["iron symbol Fe", "metallic element atomic number 26"]


def _proposals(bm25: BM25Retriever, noise_query: str) -> list[Proposal]:
    """The question with its evidence (top 3 per search, as the env retrieves), right and wrong seed."""
    docs = list({h.id: h.document() for q in SEARCHES for h in bm25.retrieve([q], 3)[0]}.values())
    noise = [h.document() for h in bm25.retrieve([noise_query], 4)[0]]
    return [Proposal(QUESTION, "iron", docs, noise), Proposal(QUESTION, "Eric S. Raymond", docs, noise)]


def _assert_accepts_iron_and_rejects_the_wrong_seed(verdicts: list[Any]) -> None:
    right, wrong = verdicts
    assert right.valid and right.reasons == [] and right.answer == "Iron", right
    assert not wrong.valid and wrong.answer == "Iron", wrong
    assert wrong.reasons == ["solver_answered_other: 'Iron'"]


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("noise_query", "shuffle_seed"), [("jazz music", 0), ("hacker slang", 1), ("poetry", 2)])
def test_the_policy_accepts_a_well_formed_question_and_rejects_a_wrong_seed(
    bm25: BM25Retriever, smollm2: Any, noise_query: str, shuffle_seed: int
):
    answer_fn = generator_answer_fn(smollm2, max_new_tokens=16)
    validator = PolicyValidator(answer_fn, shuffle_seed=shuffle_seed, closed_book=False)
    _assert_accepts_iron_and_rejects_the_wrong_seed(validate_safely(validator, _proposals(bm25, noise_query)))


@pytest.mark.timeout(600)
def test_the_policy_rejects_a_question_it_answers_without_documents(bm25: BM25Retriever, smollm2: Any):
    """The unaided check with the real policy: it knows Fe unaided, so the question needs no search."""
    validator = PolicyValidator(generator_answer_fn(smollm2, max_new_tokens=16))
    right, wrong = validate_safely(validator, _proposals(bm25, "jazz music"))
    assert not right.valid and right.reasons == ["answerable_without_search"] and right.answer == "Iron", right
    assert not wrong.valid and wrong.reasons == ["solver_answered_other: 'Iron'"], wrong


@pytest.mark.timeout(600)
def test_a_scripted_proposer_is_accepted_by_the_policy_through_the_env(bm25: BM25Retriever, smollm2: Any):
    validator = PolicyValidator(generator_answer_fn(smollm2, max_new_tokens=16), closed_book=False)
    env = gym.make("sparring/SearchPropose-v0", validator=validator)
    env.reset(seed=0, options={"task": {"id": "propose:iron", "answer": "iron", "hops": 1}})
    for query in SEARCHES:
        env.step(f"<search>{query}</search>")
    obs, reward, terminated, truncated, info = env.step(f"<question>{QUESTION}</question>")
    outcome = info["outcome"]
    assert terminated and obs == "Question accepted."
    assert outcome["valid"] and outcome["reasons"] == [] and outcome["validator"] == "policy"
    assert outcome["validator_answer"] == "Iron" and reward == 0.0
    env.close()


@pytest.fixture(scope="module")
def policy_endpoint(smollm2: Any) -> Iterator[tuple[str, list[str | None]]]:
    """``sparring serve-policy``'s app over SmolLM2 on a loopback port; yields its /v1 URL and the
    Authorization headers it received."""
    import uvicorn

    from sparring.agents.server import create_app

    app = create_app(smollm2)
    authorizations: list[str | None] = []

    @app.middleware("http")
    async def record_authorization(request: Any, call_next: Any) -> Any:
        authorizations.append(request.headers.get("authorization"))
        return await call_next(request)

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("the policy server did not start within 30 s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1", authorizations
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@pytest.mark.timeout(600)
def test_the_policy_validates_over_an_openai_compatible_endpoint_with_a_judge(
    bm25: BM25Retriever, smollm2: Any, policy_endpoint: tuple[str, list[str | None]]
):
    """The same policy behind ``serve-policy``: answers over /v1/chat/completions, a judge over the same API."""
    url, authorizations = policy_endpoint
    answer_fn = openai_answer_fn(url, smollm2.name, api_key="test-key")
    judged: list[tuple[str, str, str, bool]] = []
    judge_fn = openai_judge_fn(url, smollm2.name, api_key="test-key")

    def judge(question: str, reference: str, prediction: str) -> bool:
        same = judge_fn(question, reference, prediction)
        judged.append((question, reference, prediction, same))
        return same

    del authorizations[:]
    validator = PolicyValidator(answer_fn, judge=judge, closed_book=False)
    verdicts = validate_safely(validator, _proposals(bm25, "jazz music"))
    assert authorizations and set(authorizations) == {"Bearer test-key"}
    # Without the <answer> prefill of the in-process path, SmolLM2 answers in a sentence that names
    # the element, so exact match fails for both seeds and the judge decides each one.
    right, wrong = verdicts
    assert right.answer is not None and "iron" in right.answer.lower() and wrong.answer == right.answer
    expected = [(QUESTION, "iron", right.answer), (QUESTION, "Eric S. Raymond", right.answer)]
    assert [(q, r, p) for q, r, p, _ in judged] == expected
    for verdict, (*_, same) in zip(verdicts, judged, strict=True):
        assert verdict.valid == same
        assert verdict.reasons == ([] if same else [f"solver_answered_other: {verdict.answer[:80]!r}"])
    assert not wrong.valid, judged  # a judge that took a chemical element for a person would be useless
