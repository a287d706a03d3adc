"""OpenAI-compatible HTTP backend (httpx): ``vllm serve``, ``sparring serve-policy``, hosted APIs.

Where the server's completions API takes token-id prompts and returns the sampled ids (vLLM and
``sparring serve-policy`` do: ``prompt`` as a list of ids; ids from ``token_ids`` or from
``"token_id:N"`` logprob tokens), episodes stay token-exact and can be trained on. A chat-only
hosted API is reached with ``chat_only=True``: it plays episodes for evaluation from messages and
text, and training refuses it (:func:`~sparring.agents.generation.require_token_exact`).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparring import SparringError
from sparring.agents.generation import (
    ChatGenerator,
    Generation,
    Generator,
    SamplingParams,
    row_seed,
    weights_to_push,
)
from sparring.http import HTTPPolicy, JSONClient, ServerRefused

__all__ = ["HTTPChatGenerator", "HTTPGenerator", "VLLMServerGenerator", "connect", "layer_runs"]

#: How a vLLM server must be started for training (the dev endpoints and the logprob contract).
VLLM_SERVE = "VLLM_SERVER_DEV_MODE=1 vllm serve MODEL --logprobs-mode processed_logprobs"


class _Client(JSONClient):
    """The project's JSON client (:mod:`sparring.http`) for one OpenAI-compatible base URL."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float):
        super().__init__(
            base_url,
            "the policy server",
            "start it (e.g. `sparring serve-policy` or `vllm serve MODEL`) or fix --base-url",
            HTTPPolicy(timeout_s=timeout),
            api_key=api_key,
        )

    def model_id(self) -> str:
        data = self.get("/models").get("data") or []
        if not data:
            raise SparringError(f"the policy server at {self.base_url} lists no model; pass --model.")
        return str(data[0]["id"])


def _unless_refused(ask: Callable[[], Generation]) -> Generation:
    """``ask()``; when the server refuses that one request (not its URL, model or key), an empty generation
    that fails its episode (the runner reads ``extra["error"]``) and lets the run go on."""
    try:
        return ask()
    except ServerRefused as e:
        if not e.request_specific:
            raise
        return Generation(token_ids=[], logprobs=[], text="", finish_reason="stop", extra={"error": str(e)})


def _token_ids(choice: dict[str, Any]) -> list[int] | None:
    """The sampled ids of a completion choice, from ``token_ids`` or ``"token_id:N"`` logprob tokens."""
    if isinstance(choice.get("token_ids"), list):
        return [int(t) for t in choice["token_ids"]]
    tokens = (choice.get("logprobs") or {}).get("tokens") or []
    if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens]
    return None


class HTTPGenerator:
    """A token-level :class:`Generator` over an OpenAI-compatible completions API.

    Args:
        base_url: Server root including ``/v1`` (e.g. ``http://127.0.0.1:8000/v1``).
        model: The served model's name (None: the first of ``/v1/models``).
        tokenizer: The tokenizer used to template prompts (None: loaded from ``tokenizer_name``).
        tokenizer_name: Hub id or local path of the tokenizer (None: the served model's name).
        api_key: Bearer token, if the server needs one.
        timeout: Seconds per request.

    The weights live in the server; a trainer that changes them (e.g. through vLLM's weight-sync
    endpoints) calls :meth:`update_weights` with no argument afterwards, so episodes record the
    new :attr:`weights_version`.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        tokenizer: Any = None,
        tokenizer_name: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
    ):
        """Connect and load the tokenizer."""
        from sparring.agents.model import load_tokenizer

        self.client = _Client(base_url, api_key, timeout)
        self.name = model or self.client.model_id()
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(tokenizer_name or self.name)
        self._version = 0

    @property
    def weights_version(self) -> int:
        """How many weight updates the caller has reported with :meth:`update_weights` (0 at connect)."""
        return self._version

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Record that the server now samples from new weights; returns the new :attr:`weights_version`.

        The completions API has no way to take weights, so this only counts: the trainer pushes them
        to the server itself (and resets the server's prefix cache, which holds old KV states) and
        then calls this with no argument.

        Raises:
            NotImplementedError: ``state_dict`` was given; this backend cannot send it to the server.
        """
        if state_dict is not None:
            raise NotImplementedError(
                f"the HTTP backend cannot send weights to the policy server at {self.client.base_url}; push them "
                "to the server yourself (e.g. vLLM's weight-update API), then call update_weights() with no "
                "argument to record the new version, or use --backend hf or vllm, which load a state dict."
            )
        self._version += 1
        return self._version

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """One completions request for the whole batch; with a seed and sampling, one request per prompt.

        A seeded batch request gives every prompt the same seed, so identical prompts (a task's
        G solver attempts) would sample identical answers; each prompt then goes alone, with its
        own :func:`~sparring.agents.generation.row_seed`, concurrently (the server batches them).
        """
        if not prompts:
            return []
        if len(prompts) == 1:
            return [self._one(prompts[0], sampling)]
        if sampling.seed is None or sampling.greedy:
            try:
                return self._complete(prompts, sampling)
            except ServerRefused as e:
                if not e.request_specific:
                    raise
            rows = [sampling] * len(prompts)  # one prompt refused the batch: ask for each alone to find which
        else:
            rows = [replace(sampling, seed=row_seed(sampling.seed, i)) for i in range(len(prompts))]
        with ThreadPoolExecutor(max_workers=min(len(prompts), 32)) as pool:
            return list(pool.map(self._one, prompts, rows))

    def _one(self, prompt: Sequence[int], sampling: SamplingParams) -> Generation:
        """One prompt alone; a refusal of this prompt (not of the server's URL or model) fails only its episode."""
        return _unless_refused(lambda: self._complete([prompt], sampling)[0])

    def _complete(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """One completions request for ``prompts``."""
        body: dict[str, Any] = {
            "model": self.name,
            "prompt": [list(p) for p in prompts],
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "logprobs": 0,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": True,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if sampling.seed is not None:
            body["seed"] = sampling.seed
        choices = sorted(self.client.post("/completions", body).get("choices") or [], key=lambda c: c["index"])
        if len(choices) != len(prompts):
            raise SparringError(
                f"the policy server at {self.client.base_url} answered {len(choices)} completions for "
                f"{len(prompts)} prompts; it does not support batched token-id prompts (use vllm serve)."
            )
        out = []
        for choice in choices:
            ids = _token_ids(choice)
            logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
            if ids is None or logprobs is None or len(logprobs) != len(ids):
                raise SparringError(
                    f"the policy server at {self.client.base_url} returned no token ids or logprobs; it cannot be "
                    "used for token-exact episodes (use vllm serve or sparring serve-policy; "
                    "`sparring eval search --chat-only` evaluates a chat-only API)."
                )
            out.append(
                Generation(
                    token_ids=ids,
                    logprobs=[float(x) for x in logprobs],
                    text=choice.get("text", ""),
                    finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
                )
            )
        return out


def layer_runs(weights: Mapping[str, Any]) -> list[list[str]]:
    """The names of ``weights`` in their order, cut where the decoder layer changes: each run is the weights of one
    layer (``model.layers.3.*``), or of the parts between layers (the embedding; the final norm and output layer).

    A name's layer is its prefix up to its first number; reading the names needs no weight.
    """
    runs: list[list[str]] = []
    last: str | None = None
    for name in weights:
        parts = name.split(".")
        layer = next((".".join(parts[: i + 1]) for i, part in enumerate(parts) if part.isdigit()), "")
        if not runs or layer != last:
            runs.append([])
        runs[-1].append(name)
        last = layer
    return runs


class VLLMServerGenerator(HTTPGenerator):
    """A ``vllm serve`` process (on other GPUs or another machine) as the trainer's generator.

    Generation is :class:`HTTPGenerator`'s (token ids in, ids and logprobs out). The trainer's new
    weights reach the server through a folder both can read: :meth:`update_weights` saves them in a
    new folder there, a safetensors file per decoder layer (:func:`layer_runs`: each weight is read,
    copied to the host and written with its layer, so no more than a layer's weights are held at once,
    and a sharded policy's are gathered one at a time as they are read), then asks the server to reload
    from it with vLLM's own ``reload_weights(weights_path=...)`` through its ``/collective_rpc``
    endpoint, drops the server's prefix cache (``/reset_prefix_cache``), whose KV states came from the
    old weights, and removes the folder of the push before. Those endpoints exist when the server runs
    with ``VLLM_SERVER_DEV_MODE=1``.

    The logprob contract (after temperature, before top-p) holds only on a server started with
    ``--logprobs-mode processed_logprobs`` (read from its ``/server_info`` at connect), and only with
    ``top_p=1``: vLLM's processed logprobs are those of the truncated distribution otherwise. Both
    are refused in one sentence rather than recorded, as is a CPU server for a model with tied
    embeddings (its output layer would keep the old weights after a reload).

    Several training ranks share one server: they hold the same weights after an update, so one of them
    (``pushes=True``) writes the files and asks for the reload, and the others (``pushes=False``) skip the
    push, reading the weights they were given in the same order (a sharded policy's reads are collectives);
    every rank then calls ``wait`` (a barrier of all ranks) before it counts the new version, so no rank
    asks the server for a turn before the new weights are in it.

    Args:
        base_url: Server root including ``/v1``.
        weights_dir: A folder this process writes and the server reads (a shared file system).
        policy: The trainer's model, whose parameters :meth:`update_weights` with no state dict pushes.
        tokenizer: The trainer's tokenizer (None: the served model's).
        model: The served model's name (None: the first of ``/v1/models``).
        timeout: Seconds one request may take before it fails in one sentence (generation included).
        pushes: Whether this process pushes the weights; False: another process (training rank 0) pushes
            the same weights, and ``wait`` returns once it has.
        wait: Called after every push (this process's or another's), before the version counts: with
            several ranks, a barrier of all ranks; by default nothing.

    Raises:
        SparringError: The server is not reachable, lacks the dev endpoints, or returns raw logprobs.
    """

    def __init__(
        self,
        base_url: str,
        weights_dir: str | os.PathLike[str],
        *,
        policy: Any = None,
        tokenizer: Any = None,
        model: str | None = None,
        timeout: float = 600.0,
        pushes: bool = True,
        wait: Callable[[], None] = lambda: None,
    ):
        """Connect, check the server keeps the logprob contract, and push ``policy``'s weights."""
        super().__init__(base_url, model, tokenizer=tokenizer, timeout=timeout)
        root = self.client.base_url.removesuffix("/v1")
        self.admin = JSONClient(root, "the vLLM server", f"start it with `{VLLM_SERVE}`", HTTPPolicy(timeout_s=timeout))
        self._check_server(policy)
        self.policy = policy
        self.pushes, self.wait = pushes, wait
        self.weights_dir = Path(weights_dir)
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        self.weights_path: Path | None = None  # the folder of the last push, which the server loaded
        self._pushed = 0
        if policy is not None and pushes:  # the trainer's weights, not the served checkpoint's (a resumed run)
            self._push(dict(policy.named_parameters()))
        wait()

    def _check_server(self, policy: Any) -> None:
        """Refuse a server that cannot keep the logprob contract or would keep stale weights after a reload."""
        try:
            info = self.admin.get("/server_info?config_format=json")
        except ServerRefused as e:
            raise SparringError(
                f"the vLLM server at {self.admin.base_url} has no /server_info: it must run with its dev endpoints "
                f"(weights are pushed through them); start it with `{VLLM_SERVE}`."
            ) from e
        config = info.get("vllm_config") or {}
        mode = (config.get("model_config") or {}).get("logprobs_mode")
        if mode != "processed_logprobs":
            raise SparringError(
                f"the vLLM server at {self.admin.base_url} returns {mode} logprobs, not those after temperature the "
                f"trainer recomputes; start it with `{VLLM_SERVE}`."
            )
        # vLLM's CPU engine keeps a packed copy of each linear weight; a reload refreshes a tied output
        # layer's copy only in process (vllm_backend._reprocess_tied), which no endpoint can reach.
        device = str((config.get("device_config") or {}).get("device"))  # "cpu", "cuda", "cuda:0", ...
        if device.startswith("cpu") and getattr(getattr(policy, "config", None), "tie_word_embeddings", False):
            raise SparringError(
                f"the vLLM server at {self.admin.base_url} runs on CPU, where a reload leaves the output layer of a "
                "model with tied embeddings on the old weights; serve it on a GPU, or use backend=vllm on CPU."
            )

    def update_weights(self, state_dict: Mapping[str, Any] | None = None) -> int:
        """Push new weights (None: ``policy``'s parameters) to the server; returns the new version.

        Without ``pushes`` nothing is sent (the pushing rank sends the same weights); every rank waits for the
        push (``wait``) before the version counts.

        Raises:
            SparringError: No state dict and no ``policy``, or the server did not reload in time.
        """
        if self.pushes:
            self._push(weights_to_push(self, state_dict))
        elif state_dict is not None:
            for name in state_dict:  # the pushing rank reads them all, in this order: a sharded policy's gather
                state_dict[name]
        self.wait()
        self._version += 1
        return self._version

    def _push(self, state_dict: Mapping[str, Any]) -> None:
        """Save ``state_dict`` in a new folder, a file per layer; the server reloads it and drops its prefix cache."""
        import shutil

        from safetensors.torch import save_file

        self._pushed += 1
        folder = self.weights_dir / f"push-{self._pushed:06d}"
        # the server loads every *.safetensors of the folder it is given: it is named only once it is whole
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for i, names in enumerate(layer_runs(state_dict)):
            tensors = {name: state_dict[name].detach().to("cpu").contiguous() for name in names}
            save_file(tensors, str(partial / f"model-{i + 1:05d}.safetensors"))
            del tensors
        partial.replace(folder)
        self.admin.post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": str(folder)}})
        self.admin.post("/reset_prefix_cache", {})
        if self.weights_path is not None:
            shutil.rmtree(self.weights_path, ignore_errors=True)
        self.weights_path = folder

    def generate(self, prompts: Sequence[Sequence[int]], sampling: SamplingParams) -> list[Generation]:
        """:meth:`HTTPGenerator.generate`, refusing ``top_p`` below 1 (the logprob contract).

        Raises:
            SparringError: ``top_p`` is below 1 while sampling.
        """
        if sampling.top_p < 1.0 and not sampling.greedy:
            raise SparringError(
                f"the server backend cannot sample with top_p={sampling.top_p}: vLLM's logprobs are then those of "
                "the truncated distribution, not the tempered one the trainer recomputes; use top_p=1."
            )
        return super().generate(prompts, sampling)


class HTTPChatGenerator:
    """A chat-only :class:`ChatGenerator` (hosted APIs): text in, text out, for evaluation only.

    Tool calls the API returns as structured ``tool_calls`` are written back as
    ``<tool_call>{json}</tool_call>`` text, the form the envs parse.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        timeout: float = 600.0,
        max_parallel: int = 8,
    ):
        """Connect; ``max_parallel`` bounds concurrent requests (chat APIs take one conversation each)."""
        self.client = _Client(base_url, api_key, timeout)
        self.name = model or self.client.model_id()
        self.max_parallel = max_parallel

    def chat(
        self, conversations: Sequence[list[dict[str, Any]]], sampling: SamplingParams, tools: Any = None
    ) -> list[Generation]:
        """One chat request per conversation, in parallel."""

        def one(messages: list[dict[str, Any]]) -> Generation:
            body: dict[str, Any] = {
                "model": self.name,
                "messages": messages,
                "max_tokens": sampling.max_new_tokens,
                "temperature": sampling.temperature,
                "top_p": sampling.top_p,
            }
            if sampling.stop:
                body["stop"] = list(sampling.stop)[:4]  # hosted APIs accept at most four
            if sampling.seed is not None:
                body["seed"] = sampling.seed
            choice = (self.client.post("/chat/completions", body).get("choices") or [{}])[0]
            message = choice.get("message") or {}
            text = message.get("content") or ""
            for call in message.get("tool_calls") or []:
                fn = call.get("function", {})
                args = fn.get("arguments", "{}")
                payload = {"name": fn.get("name"), "arguments": json.loads(args) if isinstance(args, str) else args}
                text += f"<tool_call>{json.dumps(payload)}</tool_call>"
            length = choice.get("finish_reason") == "length"
            return Generation(token_ids=[], logprobs=[], text=text, finish_reason="length" if length else "stop")

        with ThreadPoolExecutor(max_workers=max(1, min(self.max_parallel, len(conversations)))) as pool:
            return list(pool.map(lambda messages: _unless_refused(lambda: one(messages)), conversations))


def connect(
    model: str | None = None,
    *,
    base_url: str | None = None,
    api_key: str | None = None,
    chat_only: bool = False,
    tokenizer_name: str | None = None,
    timeout: float = 600.0,
) -> Generator | ChatGenerator:
    """A token-level or chat-only HTTP generator.

    ``base_url`` defaults to ``$OPENAI_BASE_URL`` or ``http://127.0.0.1:8000/v1``; ``api_key`` to
    ``$OPENAI_API_KEY``.
    """
    base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "http://127.0.0.1:8000/v1"
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    if chat_only:
        return HTTPChatGenerator(base_url, model, api_key=api_key, timeout=timeout)
    return HTTPGenerator(base_url, model, tokenizer_name=tokenizer_name, api_key=api_key, timeout=timeout)


if TYPE_CHECKING:  # mypy holds the backends to the contracts the runner relies on
    _token_contract: type[Generator] = HTTPGenerator
    _chat_contract: type[ChatGenerator] = HTTPChatGenerator
    _server_contract: type[Generator] = VLLMServerGenerator
