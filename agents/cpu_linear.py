"""Prepacked oneDNN linear layers for CPU inference.

On CPU, PyTorch runs ``nn.Linear`` through MKL's GEMM, which repacks the weight on every call:
for the few rows of a decode step that costs as much as the arithmetic (SmolLM2's 576 -> 1536
projection: 55 µs for one row, 207 µs for eight, 771 µs for 64 on the project's 2-core machine).
oneDNN with the weight reordered once takes 40, 57 and 285 µs, so a batch-8 decode step costs
little more than a single row's, which is what batching across episodes is for.

:func:`pack_linears` routes every ``nn.Linear`` of a model through
``torch.ops.mkldnn._linear_pointwise`` with its weight packed once; :func:`unpack_linears`
restores them. The packed copies belong to the weights they were made from: after a weight
update, pack again. Where oneDNN is missing (or the op is not in this build) nothing changes.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["pack_linears", "unpack_linears"]


def _packed_forward(packed: torch.Tensor, bias: torch.Tensor | None) -> Any:
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")

    return forward


def pack_linears(model: torch.nn.Module) -> int:
    """Make every CPU float ``nn.Linear`` of ``model`` use a prepacked oneDNN weight; return how many.

    Inference only: the packed weight does not take part in autograd.
    """
    if not torch.backends.mkldnn.is_available():
        return 0
    unpack_linears(model)
    packed = 0
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if not isinstance(module, torch.nn.Linear) or weight is None or weight.device.type != "cpu":
                continue
            if weight.dtype not in (torch.float32, torch.bfloat16):
                continue
            try:
                reordered = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)
            except (RuntimeError, AttributeError):  # not in this build: keep MKL for every layer
                unpack_linears(model)
                return 0
            bias = module.bias.detach() if module.bias is not None else None
            module.forward = _packed_forward(reordered, bias)  # type: ignore[method-assign]
            packed += 1
    return packed


def unpack_linears(model: torch.nn.Module) -> None:
    """Undo :func:`pack_linears` (the modules' own ``forward`` again)."""
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and "forward" in module.__dict__:
            del module.forward
