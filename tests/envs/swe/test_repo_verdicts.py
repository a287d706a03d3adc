"""What ``sparring repos add`` says about a suite that cannot make a catalog project, from real runs.

A small image on the base image holds two suites: one whose tests all need the network, one that
sleeps past any limit. Their clean runs go through the real sandbox and pytest, and the verdict is
read from those runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparring import SparringError
from sparring.containers.base_image import BASE_IMAGE, build_image
from sparring.containers.docker_engine import docker_client
from sparring.envs.swe.repos.catalog import RepoSpec
from sparring.envs.swe.repos.images import SUITE_LIMIT_S, _clean_runs, _judge
from tests.containers.sandbox_helpers import docker_ready

pytestmark = pytest.mark.docker

NETWORK_TEST = """import socket


def test_{0}():
    socket.create_connection(("pypi.org", 443), timeout=5)
"""
SUITES = {
    "tests/test_net.py": "\n\n".join(NETWORK_TEST.format(name) for name in ("fetch", "upload", "ping")),
    "tests/test_slow.py": "import time\n\n\ndef test_slow():\n    time.sleep(300)\n",
}


@pytest.fixture(scope="module")
def suite_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    docker_ready()
    context: Path = tmp_path_factory.mktemp("suites")
    for rel, text in SUITES.items():
        (context / rel).parent.mkdir(parents=True, exist_ok=True)
        (context / rel).write_text(text)
    (context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY --chown=sparring:sparring tests /repo/tests\n")
    tag = f"sparring-test/verdicts:{uuid.uuid4().hex[:12]}"
    build_image(context, tag, {})
    yield tag
    docker_client().images.remove(tag, force=True)


def _spec(test_file: str) -> RepoSpec:
    return RepoSpec(name="probe", versions=("1.0", "1.1", "1.2"), test_command=f"pytest {test_file}")


@pytest.mark.timeout(300)
def test_a_suite_that_needs_the_network_is_told_so(suite_image: str) -> None:
    spec = _spec("tests/test_net.py")
    runs = _clean_runs(spec, suite_image, SUITE_LIMIT_S, timeout=120)
    assert [r.status for r in runs] == ["failed", "failed"]
    assert all(r.passing == set() for r in runs)  # nothing passes: the generic message must not win
    with pytest.raises(SparringError, match="fail because they need the network, which the sandbox does not have"):
        _judge(spec, runs, SUITE_LIMIT_S)


@pytest.mark.timeout(300)
def test_a_suite_that_times_out_is_over_the_limit_after_one_run(suite_image: str) -> None:
    spec = _spec("tests/test_slow.py")
    runs = _clean_runs(spec, suite_image, limit_s=1.0, timeout=5)
    assert [r.status for r in runs] == ["timeout"]  # the second run could not change the verdict
    with pytest.raises(SparringError, match=r"takes more than \d+ s \(it was stopped there\), over the 1 s limit"):
        _judge(spec, runs, limit_s=1.0)
