"""Collectives between training ranks that hold whatever work each rank got.

Ranks play their own episodes, so they differ in how many sequences, tokens, demonstrations and
metrics they hold. A collective that every rank must enter the same number of times (DDP's buffer
broadcast in every forward, its gradient all-reduce in a backward) hangs or mixes up tensors when
one rank has less to do. The trainer therefore runs its forwards on the unwrapped model and meets
the other ranks only here, in calls that every rank makes once per optimizer step or per metrics
reduction, whatever it holds. With one process each function is the identity (missing gradients become zeros).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

__all__ = [
    "all_sum", "all_max", "barrier", "close_ranks", "gather_objects", "mean_by_key", "rank", "sum_gradients",
    "world_size",
]  # fmt: skip

#: Elements per flattened all-reduce of the gradients (64 MiB of float32): few calls, bounded extra memory.
BUCKET = 1 << 24


def _active() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's rank (0 with one process)."""
    return dist.get_rank() if _active() else 0


def world_size() -> int:
    """How many ranks the run has (1 with one process)."""
    return dist.get_world_size() if _active() else 1


def close_ranks() -> None:
    """End this process's part of a multi-rank run: the process group is torn down here, in order, rather than
    by the interpreter's exit (a gloo group left to it can abort the process after the run has ended).

    Call it once the run's trainers are dropped. A DDP model's gradient reducer holds the process group, and
    frees it holding the interpreter's lock: were it the group's last holder, the group's end would wait for
    gloo's threads while one of them waits for that lock to free a tensor of the last collective (a run that
    finished, hanging at exit). So whatever still holds a reducer in a reference cycle is collected first,
    while the group is registered, and the group ends last, through its own release of the lock.

    A vLLM engine in this process (``backend=vllm``; with one process it made the group itself) ends its own
    groups when it is shut down, at the latest at exit: a group already destroyed here made that exit print a
    traceback ("Invalid process group specified"). Its groups therefore end by vLLM's own teardown, which the
    engine's shutdown then finds done, and with them the run's group.
    """
    if not (dist.is_available() and dist.is_initialized()):
        return
    gc.collect()
    dist.barrier()
    engine_groups = sys.modules.get("vllm.distributed.parallel_state")
    if engine_groups is not None:
        engine_groups.destroy_model_parallel()
        engine_groups.destroy_distributed_environment()  # the run's group too, as below
    if dist.is_initialized():
        dist.destroy_process_group()


def barrier() -> None:
    """Return once every rank has called this (at once with one process)."""
    if _active():
        dist.barrier()


def all_sum(values: list[float], device: torch.device | str = "cpu") -> list[float]:
    """Element-wise sum of ``values`` over the ranks (every rank passes the same length)."""
    if not _active():
        return list(values)
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return [float(v) for v in tensor.tolist()]


def all_max(value: int, device: torch.device | str = "cpu") -> int:
    """The largest ``value`` of any rank."""
    if not _active():
        return value
    tensor = torch.tensor([value], dtype=torch.int64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def gather_objects(value: object) -> list[object]:
    """Every rank's ``value`` (picklable), in rank order, on every rank."""
    if not _active():
        return [value]
    gathered: list[object] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def mean_by_key(values: dict[str, float], device: torch.device | str = "cpu") -> dict[str, float]:
    """Each key's mean over the ranks that logged it; the same dict on every rank.

    Ranks log different keys (a rank that kept no demonstration of a role, or trained on nothing, has
    no value for it), so the keys are agreed first and each value is paired with the key, not a position.

    Example:
        >>> mean_by_key({"a": 1.0})
        {'a': 1.0}
    """
    if not _active():
        return dict(values)
    gathered: list[list[str]] = gather_objects(sorted(values))  # type: ignore[assignment]
    keys = sorted({key for rank_keys in gathered for key in rank_keys})
    sums = all_sum([float(values.get(k, 0.0)) for k in keys] + [float(k in values) for k in keys], device)
    return {k: sums[i] / sums[len(keys) + i] for i, k in enumerate(keys)}


def sum_gradients(parameters: Iterable[torch.nn.Parameter]) -> None:
    """Replace each trainable parameter's gradient by its sum over the ranks (a missing one counts as zero).

    Every rank calls this once per optimizer step, also a rank that had nothing to backpropagate: it
    steps with the other ranks' sum. When no rank backpropagated anything, every gradient stays None,
    so the optimizer leaves the weights alone on every rank (zeros would move them by the optimizer's
    momentum and weight decay: an update with nothing to train would change the policy). A sharded
    parameter's gradient (``distributed: fsdp``) was summed by FSDP's reduce-scatter in the backward already.
    """
    params = [p for p in parameters if p.requires_grad]
    device = params[0].device if params else "cpu"
    if not all_max(int(any(p.grad is not None for p in params)), device=device):
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    params = [p for p in params if not isinstance(p, DTensor)]
    if not _active():
        return
    start = 0
    while start < len(params):
        bucket: list[torch.nn.Parameter] = []
        size = 0
        while start < len(params) and (not bucket or size + params[start].numel() <= BUCKET):
            bucket.append(params[start])
            size += params[start].numel()
            start += 1
        flat = torch.cat([p.grad.reshape(-1) for p in bucket])  # type: ignore[union-attr]
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in bucket:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))  # type: ignore[union-attr]
            offset += p.numel()
