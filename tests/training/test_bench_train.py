"""``sparring bench train --backend vllm``: ours generates with vLLM in process and reports the weight push it times."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from tests.agents.vllm_fixtures import require_vllm
from tests.training.conftest import tiny_vllm_model


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.timeout(600)
def test_bench_train_with_vllm_reports_the_weight_push_and_rollout_rate(
    smol_tokenizer: Any, corpus: Any, tmp_path: Path
) -> None:
    from sparring.training.bench import bench_train

    require_vllm()
    model = tiny_vllm_model(smol_tokenizer, tmp_path / "model")
    result = bench_train(model=str(model), backend="vllm", vllm_dtype="float32", tasks=1, group=2, max_turns=1,
                         max_new_tokens=4, iterations=1, warmup=0, threads=1)  # fmt: skip
    assert result["backend"] == "vllm" and result["compared"]["ours_generation"].startswith("vllm in process")
    assert result["weight_sync_seconds"] > 0  # the push into the engine, timed in the trainer's update
    seconds = result["seconds_per_iteration"]["ours"]
    assert 0 < result["weight_sync_share"] < 1
    assert result["weight_sync_share"] == pytest.approx(result["weight_sync_seconds"] / seconds, rel=0.05)
    assert result["generation_tokens_per_s"]["ours"] > 0 and result["ratio_vs_trl"] > 0


def test_bench_train_refuses_an_unknown_backend_in_one_sentence() -> None:
    from sparring.training.bench import bench_train

    with pytest.raises(SparringError, match=r"--backend must be hf or vllm \(not 'server'\)"):
        bench_train(backend="server")
