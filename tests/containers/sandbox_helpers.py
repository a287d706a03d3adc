"""Shared helpers of the sandbox tests."""

from __future__ import annotations

from sparring.containers.base_image import base_image_status
from sparring.containers.docker_engine import engine_status
from tests.conftest import require


def docker_ready() -> None:
    """Skip (locally) or fail (CI) unless the engine runs and the base image is built."""
    ok, detail = engine_status()
    require(ok, f"the Docker engine ({detail})")
    ok, detail = base_image_status()
    require(ok, f"the base image ({detail})")


def labelled(test_tag: str | None = None) -> list[dict]:
    """Containers labelled by the sandbox (optionally only those of one test's tag)."""
    from sparring.containers.docker_engine import docker_client

    label = f"sparring.test={test_tag}" if test_tag else "sparring=1"
    return docker_client().api.containers(all=True, filters={"label": label})
