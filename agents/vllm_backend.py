"""vLLM in-process backend (GPU). Imported only when ``--backend vllm`` is selected.

Token-id prompts go in as ``TokensPrompt``; the sampled ids and the logprob of each sampled token
come back from ``RequestOutput``. The stop string stays in the output (``include_stop_str_in_output``)
so the ids are exactly what was sampled. vLLM is asked for logprobs after temperature scaling
(``logprobs_mode="processed_logprobs"``), the quantity the HF backend records.

Weight updates reach the engine's own copy of the model in this process
(:meth:`VLLMGenerator.update_weights`), the way colocated RL trainers do; that needs vLLM's engine
in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` for the V1 engine).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
        self._version = 0

    @property
    def weights_version(self) -> int:
        """How many times :meth:`update_weights` has run (0 as built)."""
        return self._version

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Load new weights into the engine's model and drop its prefix cache; returns the new version.

        vLLM keeps its own copy of the weights, so a trainer's in-place optimizer step never reaches
        it: pass the trainer's ``state_dict()``. None means the caller loaded them itself (e.g. via
        ``LLM.collective_rpc``); the prefix cache, computed by the old weights, is dropped either way.

        Raises:
            SparringError: The engine runs in another process, where its model cannot be reached.
        """
        if state_dict is not None:
            self._engine_model().load_weights(list(state_dict.items()))
        self.llm.reset_prefix_cache()
        self._version += 1
        return self._version

    def _engine_model(self) -> Any:
        """The engine's ``nn.Module`` (reachable only when the engine runs in this process)."""
        try:
            return self.llm.llm_engine.model_executor.driver_worker.worker.model_runner.model
        except AttributeError as e:
            raise SparringError(
                "cannot reach the vLLM engine's model to load new weights: it runs in another process; set "
                "VLLM_ENABLE_V1_MULTIPROCESSING=0 before building the generator, or load them through "
                "LLM.collective_rpc and call update_weights() with no argument."
            ) from e

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
