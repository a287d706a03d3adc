"""Speed and memory of the trainer on a CUDA GPU, with a model of realistic size and random weights.

A GPU machine often cannot download weights (and a benchmark of speed and memory does not need
trained ones), so the model is built from the shape of a published config (Qwen2.5 0.5B, 1.5B, 7B)
with random weights, and a word-level tokenizer of the same vocabulary size stands in for its own.
What runs is the project's own code: :class:`~sparring.training.trainer.Trainer` with the HF backend
(``backend=hf``) generates a group of episodes (one turn each, every row decoding its whole budget,
since a random model rarely samples EOS), then ``Trainer.reinforce`` runs the PPO update on them
(old logprobs, micro-batched forwards, gradient checkpointing, the optimizer step) and the generator
moves to the new weights. Printed: one JSON object per setting, with seconds per iteration, rollout
tokens/s and peak GPU memory of each phase. The episodes come in groups of 4 attempts at one prompt,
as in GRPO; ``--shared-prefix both`` measures the update with the group's prompt once per row
(``update_shared_prefix``) and with one padded row per episode.

``--backend vllm`` samples with the colocated vLLM engine instead (the model saved to a folder it loads):
it sleeps through the update (level 2) and takes the new weights after it, so the JSON adds the push's
seconds (``weight_sync_seconds``) and the GPU memory the device reports in use (``peak_gib_device_*``,
polled every 20 ms, the engine's reserved KV cache included), which the allocator's own peaks do not see:
vLLM allocates its sleep-mode memory outside torch's caching allocator.

Under ``torchrun`` each rank runs the same iteration with ``--distributed ddp|fsdp`` (the policy whole
on every rank, or sharded) and the JSON gives every rank's peaks. On a machine with fewer GPUs than
ranks the ranks share them (``tests/training/ranks_worker.py``'s ``share_gpus``: their NCCL traffic then
goes through loopback sockets, so the seconds are not a multi-GPU node's; the memory is each rank's own).

Usage (on the GPU machine, from the repository root)::

    python scripts/bench_cuda.py --size 1.5b --dtype bfloat16 --dtype float32 --episodes 16
    python scripts/bench_cuda.py --size 1.5b --backend vllm --episodes 64
    PYTHONPATH=. torchrun --nproc_per_node 2 scripts/bench_cuda.py --size 1.5b --distributed fsdp
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

import torch

#: Shapes of published configs (Qwen2.5 instruct models); only the sizes matter here.
SHAPES: dict[str, dict[str, Any]] = {
    "0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True),
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                 num_key_value_heads=1, vocab_size=151936, tie_word_embeddings=True),  # a CPU check of this script
    "7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
               num_key_value_heads=4, vocab_size=152064, tie_word_embeddings=False),
}


def random_model(size: str, dtype: str, device: str) -> tuple[Any, Any]:
    """A causal LM of ``size``'s shape with seeded random weights on the GPU, and a tokenizer of its vocabulary."""
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    shape = SHAPES[size]
    config = Qwen2Config(**shape, max_position_embeddings=32768)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(getattr(torch, dtype)).eval()
    vocab = {f"t{i}": i for i in range(shape["vocab_size"])}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t0")), eos_token="t1", pad_token="t2"
    )
    model.generation_config.eos_token_id = 1
    return model, tokenizer


class DevicePeak:
    """The most GPU memory in use on the device (all processes, every allocator) while it runs, polled."""

    def __init__(self, period: float = 0.02):
        self.period, self.peak, self._stop = period, 0, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.is_set():
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            self._stop.wait(self.period)

    def __enter__(self) -> DevicePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        free, total = torch.cuda.mem_get_info()
        self.peak = max(self.peak, total - free)


def one_setting(args: argparse.Namespace, dtype: str, checkpointing: bool, shared: bool) -> dict[str, object]:
    from sparring.agents.generation import SamplingParams
    from sparring.envs.core import Episode
    from sparring.training.config import TrainConfig
    from sparring.training.outcomes import Rollout
    from sparring.training.trainer import Trainer

    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    reset = torch.cuda.reset_peak_memory_stats if cuda else (lambda: None)
    peak = torch.cuda.max_memory_allocated if cuda else (lambda: 0)
    model, tokenizer = random_model(args.size, dtype, args.device)
    params = sum(p.numel() for p in model.parameters())
    folder = ""
    if args.backend == "vllm":  # the engine loads a folder; the trainer pushes its own weights into it after
        folder = tempfile.mkdtemp()
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    config = TrainConfig(
        device=args.device, dtype=dtype, backend=args.backend, out=tempfile.mkdtemp(),
        gradient_checkpointing=checkpointing, update_tokens_per_batch=args.batch_tokens, kl_coef=0.0,
        update_shared_prefix=shared, distributed=args.distributed, model=folder or "default", vllm_dtype=dtype,
        vllm_gpu_memory_utilization=args.vllm_memory, max_context_tokens=args.prompt_tokens,
        max_new_tokens=args.new_tokens,
    )
    t_start = time.perf_counter()
    trainer = Trainer(config, model=model, tokenizer=tokenizer)
    start_s = time.perf_counter() - t_start
    watch = DevicePeak if cuda else contextlib.nullcontext
    rng = torch.Generator().manual_seed(1)
    # a group of 4 attempts per prompt, as GRPO samples them
    groups = [torch.randint(3, 30000, (args.prompt_tokens,), generator=rng).tolist() for _ in range(args.episodes // 4)]
    prompts = [prompt for prompt in groups for _ in range(4)]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.new_tokens, seed=0)
    rows = []
    for iteration in range(args.iterations + 1):  # the first warms kernels and the allocator up
        sync()
        reset()
        t0 = time.perf_counter()
        with watch() as device_gen:
            generations = trainer.generator.generate(prompts, sampling)
            sync()
        t_gen = time.perf_counter() - t0
        peak_gen = peak()
        rollouts = []
        for i, (prompt, gen) in enumerate(zip(prompts, generations, strict=True)):
            n = len(gen.token_ids)
            episode = Episode(
                env_id="bench", role="solver", domain="search", task_id=str(i // 4), task={}, prompt="",
                token_ids=prompt + gen.token_ids, token_turn=[-1] * len(prompt) + [0] * n,
                action_mask=[False] * len(prompt) + [True] * n, logprobs=[0.0] * len(prompt) + gen.logprobs,
            )
            # groups of 4 with mixed outcomes, so no group is dropped for zero variance
            rollouts.append(Rollout(episode, float(i % 2), [0.0], ("search", "solver", str(i // 4)), "terminated"))
        reset()
        t1 = time.perf_counter()
        with watch() as device_upd:
            stats = trainer.reinforce(rollouts)
            sync()
        t_upd = time.perf_counter() - t1
        generated = sum(len(g.token_ids) for g in generations)
        if iteration:
            rows.append(dict(generate_s=t_gen, update_s=t_upd, tokens=generated, trained_tokens=stats.tokens,
                             peak_generate=peak_gen, peak_update=peak(), sync_s=trainer.weight_sync_seconds,
                             device_generate=getattr(device_gen, "peak", 0),
                             device_update=getattr(device_upd, "peak", 0)))
        print(f"  rank {trainer.rank} {dtype} ckpt={checkpointing} shared={shared} it{iteration}: gen {t_gen:.1f}s "
              f"({generated} tok) "
              f"update {t_upd:.1f}s loss {stats.loss:.4f}", file=sys.stderr, flush=True)
    mean = {k: sum(r[k] for r in rows) / len(rows) for k in rows[0]}
    gib = 2**30
    result = {
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__, "size": args.size,
        "backend": args.backend,
        "parameters": params, "dtype": dtype, "gradient_checkpointing": checkpointing, "shared_prefix": shared,
        "episodes": args.episodes, "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
        "seconds_per_iteration": round(mean["generate_s"] + mean["update_s"], 2),
        "generate_seconds": round(mean["generate_s"], 2), "update_seconds": round(mean["update_s"], 2),
        "rollout_tokens_per_s": round(mean["tokens"] / mean["generate_s"], 1),
        "update_tokens_per_s": round(mean["trained_tokens"] / mean["update_s"], 1),
        "peak_gib_generate": round(mean["peak_generate"] / gib, 2),
        "peak_gib_update": round(mean["peak_update"] / gib, 2),
        "weight_sync_seconds": round(mean["sync_s"], 3),
        "weight_sync_share": round(mean["sync_s"] / (mean["generate_s"] + mean["update_s"]), 4),
        "start_seconds": round(start_s, 1),
    }
    if cuda:  # what the device has in use, every allocator's (vLLM's reserved KV cache too)
        result.update(peak_gib_device_generate=round(mean["device_generate"] / gib, 2),
                      peak_gib_device_update=round(mean["device_update"] / gib, 2))
    if args.backend == "vllm":
        import vllm

        result["vllm"] = vllm.__version__
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # every rank's own seconds, peaks and held state, in rank order
        from sparring.training.fsdp import is_sharded, resident_bytes
        from sparring.training.ranks import gather_objects

        held = resident_bytes(trainer.policy_model, trainer.optimizer)
        result.update({f"gib_{k}": round(v / gib, 2) for k, v in held.items()})  # the policy's, not the generator's
        ranks: list[Any] = gather_objects({k: result[k] for k in result if "seconds" in k or "gib" in k})
        result.update({k: [r[k] for r in ranks] for k in ranks[0]})
        result.update(distributed=args.distributed, ranks=len(ranks), sharded=is_sharded(trainer.policy_model))
    del trainer, model
    if cuda:
        torch.cuda.empty_cache()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SHAPES), default="1.5b")
    parser.add_argument("--dtype", action="append", choices=["bfloat16", "float32"])
    parser.add_argument("--no-checkpointing", action="store_true", help="Also measure without gradient checkpointing.")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--backend", choices=["hf", "vllm"], action="append",
                        help="What samples the episodes (repeat for both; default hf). vLLM's memory is not all "
                        "given back when its engine goes: run one vllm setting per process for its peaks.")
    parser.add_argument("--vllm-memory", type=float, default=0.5,
                        help="vllm_gpu_memory_utilization: the engine's share of the GPU.")
    parser.add_argument("--episodes", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--batch-tokens", type=int, default=4096)
    parser.add_argument("--out", type=Path, help="Also write the JSON lines here.")
    parser.add_argument("--shared-prefix", choices=["on", "off", "both"], default="on",
                        help="update_shared_prefix: a group's prompt once per row (on), a row per episode (off).")
    parser.add_argument("--distributed", choices=["ddp", "fsdp"], default="ddp",
                        help="Under torchrun: the policy whole on every rank (ddp) or sharded (fsdp).")
    args = parser.parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and args.device == "cuda":
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.training.ranks_worker import share_gpus

        share_gpus()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  # the models are built before the trainer
    for backend, dtype in itertools.product(args.backend or ["hf"], args.dtype or ["bfloat16"]):
        args.backend = backend
        for checkpointing, shared in itertools.product(
            [True, False] if args.no_checkpointing else [True],
            {"on": [True], "off": [False], "both": [True, False]}[args.shared_prefix],
        ):
            try:
                result = one_setting(args, dtype, checkpointing, shared)
            except Exception as e:  # noqa: BLE001 - one setting's failure (out of memory, say) is its result
                traceback.print_exc()
                if args.device == "cuda":
                    torch.cuda.empty_cache()
                result = {"size": args.size, "backend": backend, "dtype": dtype,
                          "gradient_checkpointing": checkpointing, "shared_prefix": shared,
                          "error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
            line = json.dumps(result)
            if os.environ.get("RANK", "0") != "0":
                continue
            print(line, flush=True)
            if args.out:
                with args.out.open("a") as f:
                    f.write(line + "\n")


if __name__ == "__main__":
    main()
