"""Docker image operations shared by every image Sparring builds: build a context, read labels, drop a tag.

The recipes live beside this module (``*.Dockerfile``); what goes into an image (the base image's
packages, a repository's sources and wheelhouse) is decided by the callers
(:mod:`sparring.containers.base_image`, :mod:`sparring.envs.swe.repos.images`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from sparring import SparringError
from sparring.containers.docker_engine import docker_client, dockerd_log

__all__ = ["build_image", "engine_errors", "image_id", "image_labels", "remove_image_tag"]


def image_labels(tag: str) -> dict[str, str] | None:
    """The labels of image ``tag`` ({} when it has none), or None when there is no such image."""
    import docker

    try:
        image = docker_client().images.get(tag)
    except docker.errors.ImageNotFound:
        return None
    return dict(image.labels or {})


def image_id(tag: str) -> str:
    """The id of image ``tag`` (raises docker's ImageNotFound when it is missing)."""
    return str(docker_client().images.get(tag).id)


def remove_image_tag(tag: str) -> None:
    """Drop the tag ``tag``; layers that other images build on stay. A missing tag is not an error."""
    try:
        docker_client().images.remove(tag)
    except Exception:  # already gone: nothing to tidy
        pass


def build_image(
    context: Path, tag: str, labels: dict[str, str], buildargs: dict[str, str] | None = None, network: bool = False
) -> None:
    """``docker build`` a context folder (its ``Dockerfile``) into ``tag``.

    Args:
        context: Folder with a ``Dockerfile`` and everything it copies.
        tag: Name of the image.
        labels: Labels of the image (not ``sparring=1``: containers inherit image labels, and that
            label marks containers for ``sparring gc``).
        buildargs: ``ARG`` values.
        network: Whether ``RUN`` steps may use the network (only the pulled-rootfs path needs it).

    Raises:
        SparringError: The build failed (the message has the last build output line) or the engine
            refused it (the message says what to check).
    """
    api = docker_client(timeout=1800).api
    log: list[str] = []
    with engine_errors(f"docker build of {tag}"):
        stream = api.build(
            path=str(context),
            tag=tag,
            rm=True,
            forcerm=True,
            labels=labels,
            buildargs=buildargs or {},
            network_mode=None if network else "none",
            decode=True,
        )
        for chunk in stream:
            if "error" in chunk:
                after = " | ".join(log[-3:])
                raise SparringError(f"docker build of {tag} failed: {chunk['error'].strip()} (after: {after})")
            if chunk.get("stream", "").strip():
                log.append(chunk["stream"].strip())


@contextlib.contextmanager
def engine_errors(what: str) -> Iterator[None]:
    """Turn the engine refusing a build or import (disk full, bad request, engine gone) into one sentence."""
    import docker
    import requests

    try:
        yield
    except (docker.errors.DockerException, requests.exceptions.RequestException) as e:
        why = (getattr(e, "explanation", None) or str(e) or type(e).__name__).strip().splitlines()[0][:300]
        raise SparringError(
            f"{what} failed because the Docker engine answered: {why}; check `sparring doctor`, the engine's free "
            f"disk space (`docker system df`) and its log ({dockerd_log()} when setup started it), then retry."
        ) from None
