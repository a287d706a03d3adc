"""The HTTP backend against a real ``sparring serve-policy`` on localhost."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest

from sparring import SparringError
from sparring.agents import EpisodeRunner, EpisodeSpec, RunnerConfig, SamplingParams, require_token_exact
from sparring.agents.http_backend import HTTPChatGenerator, HTTPGenerator
from sparring.agents.model import default_model_present
from sparring.training.game import end_reason
from tests.agents.conftest import assert_token_exact
from tests.conftest import require
from tests.toy_env import SumEnv

pytestmark = [pytest.mark.model, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def policy_server() -> Iterator[str]:
    """``sparring serve-policy`` with the default model, in a subprocess; yields its /v1 URL."""
    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    port = _free_port()
    cmd = [sys.executable, "-m", "sparring.cli", "serve-policy", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                pytest.fail(f"serve-policy did not come up: {out[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.mark.timeout(900)
def test_three_turn_episode_over_http_is_token_exact(policy_server, hf_generator):
    """Same buffer as the in-process HF backend, and the local model recomputes its logprobs."""
    generator = HTTPGenerator(policy_server)
    config = RunnerConfig(
        concurrency=2, max_turns=3, progress=False, sampling=SamplingParams(temperature=0.0, max_new_tokens=20)
    )
    specs = [EpisodeSpec(lambda: SumEnv(max_turns=3), seed=s) for s in (1, 4)]
    episodes = EpisodeRunner(generator, config).run(specs)
    for episode in episodes:
        assert_token_exact(generator.tokenizer, hf_generator, episode)
    (local,) = EpisodeRunner(hf_generator, config).run(specs[:1])
    assert local.token_ids == episodes[0].token_ids
    assert max(abs(a - b) for a, b in zip(local.logprobs, episodes[0].logprobs, strict=True)) < 1e-3


def test_completions_api_shapes(policy_server):
    """Text and token-id prompts, ids as "token_id:N" strings, logprobs, and a clear 400."""
    body = {"prompt": "The sky is", "max_tokens": 3, "temperature": 0, "logprobs": 0}
    text_choice = httpx.post(f"{policy_server}/completions", json=body, timeout=120).json()["choices"][0]
    assert len(text_choice["logprobs"]["tokens"]) == 3 and all(
        lp <= 0 for lp in text_choice["logprobs"]["token_logprobs"]
    )
    body |= {"prompt": [[504, 5135, 314], [504, 5135, 314]], "return_tokens_as_token_ids": True}
    choices = httpx.post(f"{policy_server}/completions", json=body, timeout=120).json()["choices"]
    assert len(choices) == 2 and choices[0]["logprobs"]["tokens"][0].startswith("token_id:")
    assert choices[0]["logprobs"]["tokens"] == choices[1]["logprobs"]["tokens"]
    bad = httpx.post(f"{policy_server}/completions", json={"prompt": [[]], "max_tokens": 2}, timeout=30)
    assert bad.status_code == 400 and "token ids" in bad.text


@pytest.mark.timeout(600)
def test_chat_only_endpoint_plays_for_eval_but_not_for_training(policy_server):
    chat = HTTPChatGenerator(policy_server)
    config = RunnerConfig(max_turns=2, progress=False, sampling=SamplingParams(temperature=0.0, max_new_tokens=12))
    (episode,) = EpisodeRunner(chat, config).run([EpisodeSpec(lambda: SumEnv(max_turns=2), seed=0)])
    assert episode.error is None and len(episode.turns) == 2 and episode.turns[0].action
    assert episode.token_ids == [] and episode.logprobs == []
    with pytest.raises(SparringError, match="chat-only"):
        require_token_exact(chat)


class _LongSumEnv(SumEnv):
    """A SumEnv whose first observation alone is longer than SmolLM2's 8,192-token context."""

    def _begin(self, task):
        return super()._begin(task) + " filler" * 9000


@pytest.mark.timeout(600)
def test_a_refused_prompt_fails_only_its_episode(policy_server):
    """The server refuses a prompt past the model's context with a 400 (as vLLM does); that episode ends
    with an agent error, the others in its batch go on, token-exact and chat-only alike."""
    bad = httpx.post(f"{policy_server}/completions", json={"prompt": [[5] * 8190], "max_tokens": 8}, timeout=30)
    assert bad.status_code == 400 and "maximum context length of 8192" in bad.text
    assert httpx.post(f"{policy_server}/completions", json={"prompt": [[10**9]]}, timeout=30).status_code == 400
    specs = [EpisodeSpec(lambda: SumEnv(max_turns=2), seed=1), EpisodeSpec(lambda: _LongSumEnv(max_turns=2), seed=2)]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)  # one request for the batch, refused, then each alone
    for policy, sampling in (
        (HTTPGenerator(policy_server), greedy),
        (HTTPGenerator(policy_server), SamplingParams(temperature=1.0, max_new_tokens=8, seed=3)),
        (HTTPChatGenerator(policy_server), greedy),
    ):
        config = RunnerConfig(
            concurrency=2, max_turns=2, progress=False, sampling=sampling, batch_wait_seconds=5.0,
            max_context_tokens=10**6,  # the runner's own limit would end the episode before asking (overlong)
        )  # fmt: skip
        ok, refused = EpisodeRunner(policy, config).run(specs)
        assert ok.error is None and len(ok.turns) == 2
        assert refused.error is not None and refused.error.startswith("agent: ") and "HTTP 400" in refused.error
        assert "maximum context length" in refused.error and refused.turns == []
        assert end_reason(refused) == "agent_error" and end_reason(ok) != "agent_error"


def test_a_refusal_of_the_url_or_model_stops_the_run(policy_server):
    """A 404 is no episode's fault: it stops the run with the server's sentence, not 1 failure per episode."""
    tokenizer = HTTPGenerator(policy_server).tokenizer
    generator = HTTPGenerator(policy_server.replace("/v1", "/v2"), model="default", tokenizer=tokenizer)
    config = RunnerConfig(concurrency=2, max_turns=2, progress=False, sampling=SamplingParams(max_new_tokens=4))
    with pytest.raises(SparringError, match="HTTP 404"):
        EpisodeRunner(generator, config).run([EpisodeSpec(lambda: SumEnv(max_turns=2), seed=s) for s in (1, 2)])


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(SparringError, match=r"the policy server at .* did not answer after \d tries .*serve-policy"):
        HTTPGenerator(f"http://127.0.0.1:{_free_port()}/v1")


def test_a_seeded_batch_samples_each_prompt_with_its_own_seed(policy_server):
    """Identical prompts in one seeded call (a task's solver attempts) get different samples, reproducibly."""
    generator = HTTPGenerator(policy_server)
    prompt = generator.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Invent a name for a cat."}], add_generation_prompt=True, tokenize=True
    )
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    first = generator.generate([prompt, prompt, prompt], sampling)
    again = generator.generate([prompt, prompt, prompt], sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert len({tuple(g.token_ids) for g in first}) == 3, [g.text for g in first]
