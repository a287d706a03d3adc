"""vLLM in-process backend (GPU). Imported only when ``--backend vllm`` is selected.

Token-id prompts go in as ``TokensPrompt``; the sampled ids and the logprob of each sampled token
come back from ``RequestOutput``. The stop string stays in the output (``include_stop_str_in_output``)
so the ids are exactly what was sampled. vLLM is asked for logprobs after temperature scaling
(``logprobs_mode="processed_logprobs"``), the quantity the HF backend records.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sparring import SparringError
from sparring.agents.generation import Generation, SamplingParams, row_seed

__all__ = ["VLLMGenerator"]


class VLLMGenerator:
    """A vLLM ``LLM`` as a :class:`~sparring.agents.generation.Generator`.

    Args:
        model: Hub id or local path (None: the default SmolLM2 checkpoint).
        gpu_memory_utilization: Share of GPU memory vLLM may take (leave room for a colocated trainer).
        **engine_args: Further ``vllm.LLM`` arguments.
    """

    def __init__(self, model: str | None = None, *, gpu_memory_utilization: float = 0.5, **engine_args: Any):
        """Start the engine."""
        try:
            from vllm import LLM
        except ImportError as e:
            raise SparringError(
                "the vllm backend needs the vllm package and a GPU; install it with `pip install -e .[vllm]` "
                "on a CUDA machine, or use --backend hf."
            ) from e
        from sparring.agents.model import resolve_model

        self.name = resolve_model(model)
        engine_args.setdefault("logprobs_mode", "processed_logprobs")
        try:
            self.llm = LLM(model=self.name, gpu_memory_utilization=gpu_memory_utilization, **engine_args)
        except TypeError:  # an older vLLM without logprobs_mode
            engine_args.pop("logprobs_mode", None)
            self.llm = LLM(model=self.name, gpu_memory_utilization=gpu_memory_utilization, **engine_args)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """Continue every prompt in one ``LLM.generate`` call."""
        from vllm import SamplingParams as VSampling
        from vllm.inputs import TokensPrompt

        params = [  # one per prompt: a shared seed would sample identical prompts identically
            VSampling(
                temperature=max(0.0, sampling.temperature),
                top_p=sampling.top_p,
                max_tokens=sampling.max_new_tokens,
                stop=list(sampling.stop) or None,
                include_stop_str_in_output=True,
                seed=row_seed(sampling.seed, i),
                logprobs=0,
            )
            for i in range(len(prompts))
        ]
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], params, use_tqdm=False)
        results = []
        for out in outputs:
            comp = out.outputs[0]
            ids = list(comp.token_ids)
            logprobs = [float(step[tok].logprob) for step, tok in zip(comp.logprobs or [], ids, strict=True)]
            results.append(
                Generation(
                    token_ids=ids,
                    logprobs=logprobs,
                    text=comp.text,
                    finish_reason="length" if comp.finish_reason == "length" else "stop",
                )
            )
        return results
