"""Policies as plain answer functions: what RAG validation, judging and chat-style evaluation call.

Over a generator of this package (token ids or chat-only), or over any OpenAI-compatible
``/chat/completions`` endpoint through the project's HTTP policy (:mod:`sparring.http`). The
function types (:data:`~sparring.envs.search.validation.AnswerFn`, ``JudgeFn``) belong to the
envs; the model behind them belongs here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sparring import SparringError
from sparring.agents.generation import Generator, SamplingParams
from sparring.envs.search.validation import AnswerFn, JudgeFn
from sparring.http import HTTPPolicy, JSONClient

__all__ = [
    "ANSWER_PREFILL",
    "ANSWER_STOP",
    "ChatFn",
    "chat_prompt_ids",
    "generator_answer_fn",
    "generator_chat_fn",
    "openai_answer_fn",
    "openai_judge_fn",
]

#: ``chat_fn(conversations) -> texts``: the next assistant message of each conversation.
ChatFn = Callable[[list[list[dict[str, Any]]]], list[str]]


def generator_chat_fn(
    generator: Any, max_new_tokens: int = 64, stop: tuple[str, ...] = (), prefill: str = ""
) -> ChatFn:
    """A :data:`ChatFn` over a generator (token ids or chat-only), greedy.

    ``prefill`` starts the assistant message (token generators only) and is part of the returned
    text; ``"<answer>"`` makes a small model answer in the expected form instead of in prose.
    """
    sampling = SamplingParams(temperature=0.0, max_new_tokens=max_new_tokens, stop=stop)

    def chat(conversations: list[list[dict[str, Any]]]) -> list[str]:
        if not isinstance(generator, Generator):
            return [g.text for g in generator.chat(conversations, sampling)]
        prompts = [chat_prompt_ids(generator.tokenizer, conversation, prefill) for conversation in conversations]
        return [prefill + g.text for g in generator.generate(prompts, sampling)]

    return chat


def chat_prompt_ids(tokenizer: Any, conversation: list[dict[str, Any]], prefill: str = "") -> list[int]:
    """The token ids a :func:`generator_chat_fn` prompts with: the chat template, then ``prefill``'s tokens."""
    ids = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True)
    start = tokenizer.encode(prefill, add_special_tokens=False) if prefill else []
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids) + start


#: What an answer function's model is prompted with after the chat template, and what ends its answer.
ANSWER_PREFILL, ANSWER_STOP = "<answer>", "</answer>"


def generator_answer_fn(generator: Any, max_new_tokens: int = 24) -> AnswerFn:
    """An :data:`~sparring.envs.search.validation.AnswerFn` over a generator: each prompt is one user message."""
    chat = generator_chat_fn(generator, max_new_tokens, stop=(ANSWER_STOP,), prefill=ANSWER_PREFILL)

    def answer(prompts: list[str]) -> list[str]:
        return chat([[{"role": "user", "content": p}] for p in prompts])

    return answer


def _chat_completion(client: JSONClient, model: str, content: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": content}], "temperature": 0, "max_tokens": 64}
    answer = client.post("/chat/completions", body)
    try:
        return str(answer["choices"][0]["message"]["content"])
    except (KeyError, IndexError, TypeError) as e:
        raise SparringError(f"{client.what} at {client.base_url} sent no chat completion ({str(answer)[:120]}).") from e


def _endpoint(base_url: str, api_key: str | None, timeout_s: float) -> JSONClient:
    fix = "start it (e.g. `sparring serve-policy` or `vllm serve MODEL`) or fix the URL"
    return JSONClient(base_url, "the answering endpoint", fix, HTTPPolicy(timeout_s=timeout_s), api_key=api_key)


def openai_answer_fn(base_url: str, model: str, api_key: str | None = None, timeout_s: float = 60.0) -> AnswerFn:
    """An :data:`AnswerFn` over an OpenAI-compatible ``/chat/completions`` endpoint (``base_url`` ends in /v1)."""

    client = _endpoint(base_url, api_key, timeout_s)

    def answer(prompts: list[str]) -> list[str]:
        return [_chat_completion(client, model, p) for p in prompts]

    return answer


def openai_judge_fn(base_url: str, model: str, api_key: str | None = None, timeout_s: float = 60.0) -> JudgeFn:
    """A :data:`JudgeFn` that asks an OpenAI-compatible model whether two answers are the same."""

    client = _endpoint(base_url, api_key, timeout_s)

    def judge(question: str, reference: str, prediction: str) -> bool:
        content = (
            f"Question: {question}\nReference answer: {reference}\nGiven answer: {prediction}\n"
            "Does the given answer mean the same as the reference answer? Reply with YES or NO only."
        )
        return _chat_completion(client, model, content).strip().upper().startswith("YES")

    return judge
