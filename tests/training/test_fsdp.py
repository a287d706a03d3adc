"""``distributed: fsdp`` on two CPU ranks (torchrun, gloo) against one process, and the device rule.

The ranks get different episodes, as real runs give them (different numbers and lengths, so a rank pads
with idle passes); the single process trains on all of them at once. The model is the tiny Llama with
SmolLM2's vocabulary, and SmolLM2-135M's own shapes (2 of its layers) for the memory figures.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from sparring import SparringError
from sparring.training.config import load_config
from sparring.training.fsdp import is_sharded
from sparring.training.trainer import Trainer
from tests.training.conftest import tiny_model
from tests.training.ranks_worker import SCENARIO_OVERRIDES, SETTINGS, fsdp_demos, fsdp_rollouts
from tests.training.test_ranks import launch, two_ranks

#: Largest parameter difference allowed between two ranks under FSDP and one process, after two AdamW steps of
#: lr 0.01 (each moves a weight by up to about 0.01): only the order of float32 sums differs.
TOLERANCE = 1e-4


def _single(tokenizer: Any, tmp_path: Path, *overrides: str) -> Trainer:
    config = load_config(None, [f"out={tmp_path / 'single'}", *SETTINGS, *overrides])
    return Trainer(config, model=tiny_model(tokenizer, seed=0), tokenizer=tokenizer)


@pytest.fixture(scope="module")
def fsdp(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The three FSDP scenarios on two ranks in one launch (starting two ranks costs more than each scenario): every
    rank's results by scenario, and their folder."""
    folder = tmp_path_factory.mktemp("fsdp")
    return launch(["fsdp_update", "fsdp_checkpoint", "memory"], tiny_model_dir, folder, "distributed=fsdp"), folder


def _worst(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert set(a) == set(b)
    return max(float((a[k].double().cpu() - b[k].double().cpu()).abs().max()) for k in a)  # weights from a GPU too


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_fsdp_update_equals_the_single_process_update(
    smol_tokenizer: Any, fsdp: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    (first, second), folder = fsdp[0]["fsdp_update"], fsdp[1]
    assert first["sharded"] and second["sharded"] and first["reference_sharded"]
    assert first["reference_error"] < 1e-6 and second["reference_error"] < 1e-6
    for rank in (first, second):  # the HF copy took the new weights, gathered one at a time (a layer's at most)
        assert rank["copy_is_the_policy"] and rank["gathered"] == rank["weights"], rank
        assert rank["gathered_alive_most"] <= 9, rank
    sharded = torch.load(folder / "fsdp_update" / "run" / "weights.pt", map_location="cpu")
    trainer = _single(smol_tokenizer, tmp_path, *SCENARIO_OVERRIDES["fsdp_update"])
    start = {k: v.detach().clone() for k, v in trainer.policy_model.state_dict().items()}
    trainer.supervised(fsdp_demos(0) + fsdp_demos(1), epochs=1, lr=0.01)
    trainer.freeze_reference()
    trainer.reinforce(fsdp_rollouts(0) + fsdp_rollouts(1))
    single = {k: v.detach() for k, v in trainer.policy_model.state_dict().items()}
    assert _worst(single, start) > 0.01  # both steps moved the weights
    assert _worst(sharded, single) < TOLERANCE
    # Each rank holds half of the reference, as of the policy: no whole copy per rank.
    whole = sum(v.numel() * v.element_size() for k, v in trainer.policy_model.named_parameters())
    for rank in (first, second):
        assert 0.45 < rank["reference_bytes"] / whole < 0.55
        assert 0.45 < rank["bytes"]["parameters"] / whole < 0.55


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_under_ddp_the_kl_reference_is_sharded_across_the_ranks_and_the_update_is_the_same(
    smol_tokenizer: Any, tiny_model_dir: Path, tmp_path: Path
) -> None:
    # fsdp_update's steps with the policy whole on each rank: the reference's forwards are then the only collectives
    # of a pass, and rank 1 (an episode a pass: 2 passes against rank 0's 3) must still make as many of them
    one_each = "update_tokens_per_batch=1"
    first, second = two_ranks("fsdp_update", tiny_model_dir, tmp_path / "ddp", "distributed=ddp", one_each)
    assert not first["sharded"] and first["reference_sharded"] and second["reference_sharded"]
    assert first["reference_error"] < 1e-6 and second["reference_error"] < 1e-6  # the policy's slices, reassembled
    ranks = torch.load(tmp_path / "ddp" / "run" / "weights.pt", map_location="cpu")
    trainer = _single(smol_tokenizer, tmp_path / "one", *SCENARIO_OVERRIDES["fsdp_update"], one_each)
    trainer.supervised(fsdp_demos(0) + fsdp_demos(1), epochs=1, lr=0.01)
    trainer.freeze_reference()
    assert trainer.reference is not None and not is_sharded(trainer.reference)  # one process: one whole copy
    trainer.reinforce(fsdp_rollouts(0) + fsdp_rollouts(1))
    single = {k: v.detach() for k, v in trainer.policy_model.state_dict().items()}
    assert _worst(ranks, single) < TOLERANCE
    whole = sum(v.numel() * v.element_size() for v in trainer.policy_model.parameters())
    for rank in (first, second):
        assert 0.45 < rank["reference_bytes"] / whole < 0.55  # half of the reference on each of the two ranks
        assert rank["bytes"]["parameters"] == whole  # and the whole policy


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_checkpoint_saved_under_fsdp_loads_in_one_process(
    smol_tokenizer: Any, fsdp: tuple[dict[str, Any], Path], tmp_path: Path
) -> None:
    from transformers import AutoModelForCausalLM

    from sparring.training.checkpoint import load_checkpoint

    (first, second), folder = fsdp[0]["fsdp_checkpoint"], fsdp[1]
    for rank in (first, second):  # resumed under fsdp: the saved weights, in the policy and the generator
        assert rank["moved"] and rank["reloaded"] and rank["generator"]
    saved = torch.load(folder / "fsdp_checkpoint" / "run" / "weights.pt", map_location="cpu")
    checkpoint = Path(first["folder"])
    model = AutoModelForCausalLM.from_pretrained(checkpoint / "model")  # what `sparring eval --model` loads
    assert type(model).__name__ == "LlamaForCausalLM"
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    trainer = _single(smol_tokenizer, tmp_path)
    load_checkpoint(trainer, checkpoint)  # the optimizer's state by parameter name into an unsharded optimizer
    assert all(torch.equal(v.cpu(), saved[k]) for k, v in trainer.policy_model.state_dict().items())
    state = trainer.optimizer.optimizer.state
    assert len(state) == len(list(trainer.policy_model.parameters()))
    assert all(float(s["step"]) == 1 for s in state.values())


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fsdp_holds_half_the_parameters_and_optimizer_state_of_ddp_per_rank(
    fsdp: tuple[dict[str, Any], Path], tiny_model_dir: Path, tmp_path: Path
) -> None:
    ddp = two_ranks("memory", tiny_model_dir, tmp_path, "distributed=ddp")
    for whole, part in zip(ddp, fsdp[0]["memory"], strict=True):
        total = (part["parameters"] + part["optimizer"]) / (whole["parameters"] + whole["optimizer"])
        print(f"per rank: ddp {whole}, fsdp {part}: {total:.3f}")
        assert whole["optimizer"] == 2 * whole["parameters"]  # AdamW: two moments per weight
        assert 0.49 < total < 0.51


def test_adafactor_under_fsdp_is_one_sentence() -> None:
    with pytest.raises(SparringError, match=r"^optimizer=adafactor cannot step sharded weights .*\.$"):
        load_config("cpu-demo", ["distributed=fsdp"])  # the preset's optimizer
    assert load_config("cpu-demo", ["distributed=fsdp", "optimizer=adamw"]).distributed == "fsdp"


def test_cuda_asked_for_without_one_is_one_sentence(smol_tokenizer: Any, tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    asked = [load_config(None, [f"out={tmp_path}", "device=cuda"])]
    asked += [load_config(preset, [f"out={tmp_path}"]) for preset in ("gpu-1", "gpu-8")]
    for config in asked:
        with pytest.raises(SparringError, match=r"^device=cuda but torch sees no CUDA device .*device=cpu\.$"):
            Trainer(config, model=tiny_model(smol_tokenizer), tokenizer=smol_tokenizer)
