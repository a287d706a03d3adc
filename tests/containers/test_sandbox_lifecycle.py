"""Sandbox containers never outlive their owner: exit hooks, signals, ``sparring gc``, and doctor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sparring.containers.base_image import BASE_IMAGE
from sparring.containers.sandbox import SandboxPool
from tests.containers.sandbox_helpers import docker_ready, labelled

pytestmark = pytest.mark.docker

SPARRING = str(Path(sys.executable).with_name("sparring"))

HOLDER = """
import json, signal, sys, time
# A shell starting a job in the background without job control ignores SIGINT in it, and a child
# inherits that: stand in for an interactive user, whose Ctrl-C the process receives.
signal.signal(signal.SIGINT, signal.default_int_handler)
from sparring.containers.sandbox import SandboxPool
from sparring.containers.cleanup import reaper
pool = SandboxPool(sys.argv[1], size=2, labels={"sparring.test": sys.argv[2]})
held = pool.acquire()
pool.wait_ready()
print(json.dumps(sorted(reaper().live)), flush=True)
time.sleep(600)
"""


def start_holder(tag: str) -> tuple[subprocess.Popen, list[str]]:
    """A process holding three containers (one acquired, two ready), and their ids."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, BASE_IMAGE, tag], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    ids = json.loads(line)
    assert len(ids) == 3
    assert sorted(c["Id"] for c in labelled(tag)) == ids
    return proc, ids


def wait_until_gone(tag: str, seconds: float = 30) -> list[dict]:
    deadline = time.monotonic() + seconds
    while labelled(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    return labelled(tag)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_removes_the_containers(sig):
    docker_ready()
    tag = uuid.uuid4().hex
    proc, _ = start_holder(tag)
    proc.send_signal(sig)
    proc.wait(timeout=60)
    assert proc.returncode == -sig  # the signal still ends the process (SIGINT through KeyboardInterrupt)
    assert labelled(tag) == []


@pytest.mark.timeout(180)
def test_gc_removes_the_containers_of_a_killed_process_only():
    docker_ready()
    tag = uuid.uuid4().hex
    with SandboxPool(BASE_IMAGE, size=1, labels={"sparring.test": tag + "-alive"}) as mine:
        mine.wait_ready()
        proc, ids = start_holder(tag)
        proc.kill()
        proc.wait(timeout=30)
        assert sorted(c["Id"] for c in labelled(tag)) == ids  # SIGKILL: nobody cleaned up
        done = subprocess.run([SPARRING, "gc"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "removed" in done.stdout
        assert int(done.stdout.split()[1]) >= 3
        assert labelled(tag) == []
        assert len(labelled(tag + "-alive")) == 1  # a live owner's containers stay


DEAD_ENGINE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock", "COLUMNS": "250"}  # wide: no wrapped lines


@pytest.mark.timeout(300)
def test_doctor_reports_an_unreachable_engine_clearly():
    done = subprocess.run(
        [SPARRING, "doctor"],
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, **DEAD_ENGINE},
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1
    assert "Traceback" not in out
    engine_row = next(line for line in out.splitlines() if "docker engine" in line)
    assert (
        "missing" in engine_row and "not reachable: no Docker socket at unix:///nonexistent/docker.sock" in engine_row
    )
    base_row = next(line for line in out.splitlines() if "base image" in line)
    assert "missing" in base_row and "needs the Docker engine" in base_row


@pytest.mark.timeout(120)
def test_doctor_reports_a_stopped_engine_whose_socket_is_left(tmp_path):
    """A stopped dockerd can leave its socket file behind: connecting is refused, not 'no socket'."""
    import socket

    path = tmp_path / "docker.sock"
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(path))  # bound, never listening: what a dead daemon's socket answers
    try:
        done = subprocess.run(
            [SPARRING, "doctor"],
            capture_output=True,
            text=True,
            timeout=100,
            env={**os.environ, "DOCKER_HOST": f"unix://{path}", "COLUMNS": "250"},
        )
    finally:
        stale.close()
    out = done.stdout + done.stderr
    assert done.returncode == 1
    assert "Traceback" not in out
    engine_row = next(line for line in out.splitlines() if "docker engine" in line)
    assert "missing" in engine_row and f"not reachable: connection refused at unix://{path}" in engine_row


def test_commands_needing_the_engine_say_how_to_start_it():
    done = subprocess.run(
        [SPARRING, "gc"], capture_output=True, text=True, timeout=60, env={**os.environ, **DEAD_ENGINE}
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "the Docker engine is not reachable (no Docker socket at unix:///nonexistent/docker.sock)" in done.stderr
    assert "start the engine DOCKER_HOST=unix:///nonexistent/docker.sock points at, or unset DOCKER_HOST" in done.stderr


def test_setup_does_not_try_to_start_an_engine_that_docker_host_points_elsewhere(monkeypatch):
    from sparring import SparringError
    from sparring.containers.docker_engine import ensure_engine

    monkeypatch.setenv("DOCKER_HOST", DEAD_ENGINE["DOCKER_HOST"])
    with pytest.raises(SparringError, match="the Docker engine at DOCKER_HOST is not reachable: no Docker socket at"):
        ensure_engine()
