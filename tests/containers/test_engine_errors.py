"""Docker refusals become one sentence, and races with another removal are no error.

``sparring gc`` meets a container whose removal someone else has started (the engine answers
409 "removal already in progress"); a build the engine refuses is reported with what to check.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from pathlib import Path

import docker
import pytest

from sparring import SparringError
from sparring.containers.base_image import BASE_IMAGE, build_image
from sparring.containers.cleanup import OWNER_LABEL, collect_garbage
from sparring.containers.docker_engine import docker_client
from tests.containers.sandbox_helpers import docker_ready

pytestmark = pytest.mark.docker

#: Files written into the container's layer so that deleting it takes a good part of a second.
FILES = 60_000


def _slow_to_remove(api: docker.APIClient) -> str:
    """A container of a dead owner whose writable layer holds FILES files (ready when it returns)."""
    labels = {"sparring": "1", OWNER_LABEL: f"{socket.gethostname()}:0:0", "sparring.test": uuid.uuid4().hex}
    script = f"mkdir /tmp/many && cd /tmp/many && seq 1 {FILES} | xargs touch && touch /tmp/ready && sleep 600"
    cid = api.create_container(BASE_IMAGE, ["sh", "-c", script], labels=labels,
                               host_config=api.create_host_config(network_mode="none"))["Id"]  # fmt: skip
    api.start(cid)
    while not _ready(api, cid):
        time.sleep(0.2)
    return cid


def _ready(api: docker.APIClient, cid: str) -> bool:
    exec_id = api.exec_create(cid, ["test", "-e", "/tmp/ready"])["Id"]
    api.exec_start(exec_id)
    return api.exec_inspect(exec_id)["ExitCode"] == 0


def _status(api: docker.APIClient, cid: str) -> str:
    try:
        return str(api.inspect_container(cid)["State"]["Status"])
    except docker.errors.NotFound:
        return "gone"


@pytest.mark.timeout(300)
def test_gc_leaves_a_container_whose_removal_is_under_way() -> None:
    docker_ready()
    api = docker_client().api
    for _ in range(3):  # the race is only shown when gc's call lands inside the other removal
        cid = _slow_to_remove(api)
        other = threading.Thread(target=api.remove_container, args=(cid,), kwargs={"force": True})
        other.start()
        while _status(api, cid) == "running":
            time.sleep(0.005)
        collect_garbage()  # must not raise
        raced = _status(api, cid) == "removing"  # gc's own removal would have finished before returning
        other.join(timeout=120)
        assert _status(api, cid) == "gone"
        if raced:
            return
    pytest.fail("gc never met the container while its removal was under way (the machine is too fast?)")


def test_a_build_the_engine_refuses_says_what_to_check(tmp_path: Path) -> None:
    docker_ready()
    tag = f"sparring-test/refused:{uuid.uuid4().hex[:12]}"
    with pytest.raises(SparringError) as caught:
        build_image(tmp_path, tag, {})  # a context with no Dockerfile: the engine answers 500
    message = str(caught.value)
    assert f"docker build of {tag} failed because the Docker engine answered: " in message
    assert "Dockerfile" in message and "sparring doctor" in message and "docker system df" in message
