"""``distributed: fsdp``: the policy's parameters, gradients and optimizer state sharded across the ranks (FSDP2).

The trainer calls :func:`torch.distributed.fsdp.fully_shard` itself (on every decoder layer, then the
whole model) rather than through accelerate's FSDP plugin: the update needs the ranks' gradients summed,
not averaged (a token-level mean over every rank's tokens, :mod:`sparring.training.ranks`), which
:func:`shard` asks of FSDP with plain sums so that gloo (CPU) can run them too; accelerate still starts
the processes and wraps the optimizer.

A sharded model's forward and backward are collectives: each layer's weights are all-gathered from
the ranks, its gradients reduce-scattered to them. Ranks hold different numbers of episodes, so a rank
with fewer makes :func:`idle_passes` more passes over :data:`IDLE` (one token, weight 0, its loss
multiplied by 0) and every rank meets the others in the same layers in the same order.

Everything that needs whole weights gathers them: the generator after each update
(:func:`full_state_dict`, every rank; for vLLM :class:`GatheredWeights`, one weight at a time as its
reload reads them, so no rank ever holds the whole weights gathered), a checkpoint (:func:`save_model`,
rank 0 writes the same Hugging Face folder as an unsharded run). The KL reference is a :func:`replica` sharded
across the ranks, under ``ddp`` too (where the policy is whole on each rank): a sharded reference's forwards are
collectives as well.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor

from sparring.training.ranks import all_max
from sparring.training.sequences import Sequence

__all__ = [
    "GatheredWeights",
    "IDLE",
    "full_state_dict",
    "idle_passes",
    "is_sharded",
    "load_model_state",
    "load_optimizer_state",
    "optimizer_state",
    "replica",
    "resident_bytes",
    "save_model",
    "shard",
]


class _Idle(Sequence):
    """A one-token sequence that trains on nothing: ``tokens`` is 0, so no statistic or token count takes it."""

    @property
    def tokens(self) -> int:
        return 0


#: The sequence of an idle pass (token 0 predicting token 0; its loss is multiplied by 0).
IDLE: Sequence = _Idle(
    input_ids=torch.zeros(2, dtype=torch.long),
    targets=torch.ones(1, dtype=torch.long),
    behaviour_logprobs=torch.zeros(1),
    advantages=torch.zeros(1),
    weight=0.0,
)


def is_sharded(model: Any) -> bool:
    """Whether ``model`` is FSDP-sharded (:func:`shard`)."""
    return isinstance(model, FSDPModule)


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """Shard ``model`` in place across the ranks: each decoder layer its own unit, the rest (embeddings,
    tied head, final norm) the root's; returns it.

    The gradients are summed over the ranks, not averaged, and with plain sums (gloo has no pre-scaled
    sum): the trainer's losses already divide by every rank's token count.
    """
    for layer in _decoder_layers(model):
        fully_shard(layer)
    fully_shard(model)
    assert isinstance(model, FSDPModule)
    # The root too (FSDP keeps its weights whole after a forward by default, for the backward that follows):
    # the reference and the no-grad passes have no backward, and would hold the embeddings whole until the next pass.
    model.set_reshard_after_forward(True)
    for unit in model.modules():  # each unit reduces its own gradients
        if isinstance(unit, FSDPModule):
            unit.set_gradient_divide_factor(1.0)
            unit.set_force_sum_reduction_for_comms(True)
    return model


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers: the elements of the model's longest ``ModuleList`` (``model.model.layers`` of an HF
    causal LM), found through torch's public module tree rather than transformers' private ``_no_split_modules``."""
    lists = [list(module) for module in model.modules() if isinstance(module, torch.nn.ModuleList)]
    return max(lists, key=len, default=[])


def idle_passes(passes: int, *models: Any) -> int:
    """How many idle passes this rank makes after its ``passes`` real ones over ``models``: the most any rank
    makes, less its own, where one of them is sharded (every rank calls this); 0 otherwise, without meeting the
    other ranks."""
    sharded = [model for model in models if model is not None and is_sharded(model)]
    return all_max(passes, _device(sharded[0])) - passes if sharded else 0


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole weights of sharded ``model`` on every rank, by parameter name (every rank calls this)."""
    return {name: value.full_tensor() if isinstance(value, DTensor) else value
            for name, value in model.state_dict().items()}  # fmt: skip


class GatheredWeights(Mapping[str, torch.Tensor]):
    """The whole weights of sharded ``model`` by parameter name, each gathered from the ranks when it is read.

    A read is a collective: every rank must read the same names in the same order (a vLLM engine's
    ``reload_weights`` reads each once, in order, on every rank). Names and membership need no gather.
    """

    def __init__(self, model: torch.nn.Module):
        """Hold ``model``'s state dict (its shards; nothing gathered yet)."""
        self._state = model.state_dict()

    def __getitem__(self, name: str) -> torch.Tensor:
        value = self._state[name]
        return value.full_tensor() if isinstance(value, DTensor) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._state)

    def __len__(self) -> int:
        return len(self._state)

    def __contains__(self, name: object) -> bool:
        return name in self._state


def replica(model: torch.nn.Module) -> torch.nn.Module:
    """A frozen copy of ``model`` (the KL reference) sharded across the ranks (every rank calls this), so no rank
    ever holds a second whole copy: a sharded ``model``'s ranks copy their own shards; an unsharded one's (``ddp``,
    whole on every rank) each keep their slice of it. Its forwards are then collectives, as a sharded policy's."""
    from transformers import AutoModelForCausalLM

    source = next(model.parameters())
    with torch.device("meta"):
        twin = AutoModelForCausalLM.from_config(model.config, dtype=source.dtype)  # type: ignore[arg-type]
    shard(twin)
    twin.to_empty(device=source.device)
    with torch.no_grad():
        if is_sharded(model):
            for (_, mine), (_, theirs) in zip(twin.named_parameters(), model.named_parameters(), strict=True):
                _local(mine).copy_(_local(theirs))
        else:
            load_model_state(twin, model.state_dict())
        for mine in twin.parameters():
            mine.requires_grad_(False)
        for (_, buffer), (_, source_buffer) in zip(twin.named_buffers(), model.named_buffers(), strict=True):
            buffer.copy_(source_buffer)  # not sharded (rotary frequencies); to_empty left them unset
    return twin.eval()


def load_model_state(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> tuple[list[str], list[str]]:
    """Load whole ``tensors`` (every rank passes them) into sharded ``model``; the missing and unexpected names."""
    keys = set_model_state_dict(model, cast(Any, tensors), options=StateDictOptions(full_state_dict=True, strict=False))
    return list(keys.missing_keys), list(keys.unexpected_keys)


def save_model(model: torch.nn.Module, folder: Path) -> None:
    """Write sharded ``model`` as a Hugging Face folder, as ``save_pretrained`` writes an unsharded one.

    Every rank calls this (the weights are gathered); rank 0 writes. A tied weight is written once, under
    its first name, as ``save_pretrained`` does; ``architectures`` names the model's own class, not FSDP's.
    """
    from safetensors.torch import save_file

    tensors: dict[str, Any] = get_model_state_dict(
        model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )
    if dist.get_rank() != 0:
        return
    names = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
    folder.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items() if k in names}, str(folder / "model.safetensors"),
              metadata={"format": "pt"})  # fmt: skip
    config: Any = model.config
    config.architectures = [next(c for c in type(model).__mro__ if not issubclass(c, FSDPModule)).__name__]
    config.save_pretrained(folder)
    generation = getattr(model, "generation_config", None)
    if generation is not None:
        generation.save_pretrained(folder)


def optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The whole optimizer state by parameter name on rank 0 (every rank calls this; the others get {})."""
    return get_optimizer_state_dict(
        model, _inner(optimizer), options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )


def load_optimizer_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, Any]) -> None:
    """Load a saved optimizer state into ``optimizer`` of ``model``, sharded or not, whichever way it was saved.

    A sharded run saves the state by parameter name (:func:`optimizer_state`), an unsharded one by
    parameter index (``optimizer.state_dict()``): either loads into either.
    """
    groups = saved.get("param_groups") or [{}]
    by_name = any(isinstance(k, str) for k in saved.get("state", {})) or any(
        isinstance(p, str) for p in groups[0].get("params", [])
    )
    if not by_name and not is_sharded(model):
        optimizer.load_state_dict(saved)
        return
    if not by_name:  # the optimizer's parameters are the model's, in order (one group: model.parameters())
        names = [name for name, _ in model.named_parameters()]
        saved = {
            "state": {names[i]: s for i, s in saved["state"].items()},
            "param_groups": [g | {"params": [names[i] for i in g["params"]]} for g in saved["param_groups"]],
        }
    set_optimizer_state_dict(model, _inner(optimizer), saved, options=StateDictOptions(full_state_dict=True))


def resident_bytes(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of ``model``'s parameters and of the optimizer's state that this rank holds (its shards only)."""

    def size(t: torch.Tensor) -> int:
        local = _local(t)
        return local.numel() * local.element_size()

    state = _inner(optimizer).state.values()
    return {
        "parameters": sum(size(p) for p in model.parameters()),
        "optimizer": sum(size(v) for s in state for v in s.values() if torch.is_tensor(v) and v.dim() > 0),
    }


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if isinstance(t, DTensor) else t


def _inner(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside accelerate's wrapper."""
    return getattr(optimizer, "optimizer", optimizer)


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
