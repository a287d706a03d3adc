"""The colocated vLLM engine on a CUDA GPU: its own sleep (level 2), wake-up and weight push, as the trainer calls them.

Runs where torch sees a CUDA device and vLLM is installed (a GPU machine: docs/benchmarks.md, section `cuda`);
skipped elsewhere, CI included. The CPU engine cannot sleep, so on CPU the same order of calls is checked against
a stand-in of the engine (test_vllm_backend.py's ``_SleepingEngine``); here the real engine frees and maps back
its GPU memory, and the weights it samples after the push are the pushed ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.generation import SamplingParams
from tests.agents.vllm_fixtures import assert_an_update_reaches, chat_prompts, require_vllm
from tests.training.conftest import tiny_vllm_model

pytestmark = [pytest.mark.slow, pytest.mark.model]

#: The engine's share of the GPU: its KV cache is most of it, and all of it goes in the sleep.
SHARE = 0.3


def _in_use() -> int:
    """Bytes of the GPU in use, whatever allocated them (vLLM's sleep-mode pool is not torch's caching allocator)."""
    import torch

    free, total = torch.cuda.mem_get_info()
    return int(total - free)


@pytest.fixture(scope="module")
def cuda_engines(tmp_path_factory: pytest.TempPathFactory, tokenizer: Any) -> tuple[Any, Any]:
    """A float32 HF generator on a CUDA model, and a float32 vLLM engine mirroring it on the same GPU."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: vLLM's engine sleeps on CUDA only")
    require_vllm()
    from transformers import AutoModelForCausalLM

    from sparring.agents.hf_backend import HFGenerator
    from sparring.agents.vllm_backend import VLLMGenerator

    folder: Path = tiny_vllm_model(tokenizer, tmp_path_factory.mktemp("model"))
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).to("cuda").eval()
    hf = HFGenerator(model_obj=model, tokenizer=tokenizer, device="cuda")
    engine = VLLMGenerator(
        str(folder), policy=model, tokenizer=tokenizer, dtype="float32", max_model_len=1024,
        gpu_memory_utilization=SHARE,
    )  # fmt: skip
    return hf, engine


def test_on_cuda_the_engine_frees_its_memory_asleep_and_samples_the_pushed_weights_after_waking(
    cuda_engines: tuple[Any, Any],
) -> None:
    """The trainer's order: sleep, the update, wake_up (the weights' memory), the push, then the KV cache."""
    import torch

    hf, engine = cuda_engines
    assert engine._sleeps
    awake, total = _in_use(), torch.cuda.mem_get_info()[1]

    def sleep() -> None:
        engine.sleep()
        assert awake - _in_use() > 0.8 * SHARE * total - 2 * 2**30  # the KV cache and the weights went back
        with pytest.raises(SparringError, match=r"^the vllm engine slept through an update"):
            engine.generate(chat_prompts(hf.tokenizer), SamplingParams(temperature=0.0, max_new_tokens=2))
        engine.wake_up()

    def memory_back() -> None:
        assert abs(_in_use() - awake) < 0.05 * awake  # all of the engine's memory is back

    assert_an_update_reaches(hf, engine, before_change=sleep, after_push=memory_back)
