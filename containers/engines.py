"""Which Docker engine a sandbox runs on: the local one, or one of the engines listed in ``docker_hosts``.

A GPU node often has no Docker; its sandboxes can run on other machines' engines instead. The list
comes from an env's ``docker_hosts`` argument, else the training config's ``docker_hosts`` (set for
the process with :func:`use_docker_hosts`), else ``SPARRING_DOCKER_HOSTS`` (comma-separated), else
it is the one engine of the environment (``DOCKER_HOST`` or the local socket). Each new container
goes to the listed engine that runs the fewest containers, by the engine's own count (ties go round
in turn); nothing else is scheduled.

An engine that lacks an image gets it from the local engine (the one ``sparring setup`` built it
in) with ``docker save`` / ``docker load`` through docker-py, once per engine and image.

URLs are docker-py's: ``unix:///path.sock`` and ``tcp://host:port``. A ``tcp://`` engine off this
machine must use TLS (``DOCKER_TLS_VERIFY=1`` and ``DOCKER_CERT_PATH``, as for ``DOCKER_HOST``):
Docker's API without it gives root on that machine to anyone who can reach the port. ``ssh://`` is
refused: docker-py's SSH transport gives no socket the command channel can wait on with a
timeout; forward the remote engine's socket with ``ssh -L`` and list the local end instead.
"""

from __future__ import annotations

import ipaddress
import itertools
import logging
import os
import re
import threading
from collections.abc import Sequence
from urllib.parse import urlsplit

from sparring import SparringError
from sparring.containers.docker_engine import docker_client, shared_client

__all__ = [
    "HOSTS_ENV",
    "check_engine_url",
    "check_engines",
    "engine_hosts",
    "ensure_image",
    "pick_engine",
    "place",
    "use_docker_hosts",
]

logger = logging.getLogger(__name__)

#: Environment variable listing engine URLs, comma-separated.
HOSTS_ENV = "SPARRING_DOCKER_HOSTS"

_configured: tuple[str, ...] = ()
_turn = itertools.count()


def use_docker_hosts(hosts: Sequence[str] | None) -> None:
    """Run this process's sandboxes on ``hosts`` (the training config's ``docker_hosts``); empty: the default.

    Raises:
        SparringError: A URL is malformed or unsafe; the message says which and what to use.
    """
    global _configured
    _configured = tuple(check_engine_url(h) for h in hosts or () if h.strip())


def engine_hosts(hosts: Sequence[str] | None = None) -> tuple[str | None, ...]:
    """The engines sandboxes may run on: ``hosts``, else the process's, else ``SPARRING_DOCKER_HOSTS``.

    Returns:
        Engine URLs, or ``(None,)`` for the environment's one engine.

    Raises:
        SparringError: A URL is malformed or unsafe.
    """
    if hosts and any(h.strip() for h in hosts):
        return tuple(check_engine_url(h) for h in hosts if h.strip())
    if _configured:
        return _configured
    listed = [h for h in re.split(r"[,\s]+", os.environ.get(HOSTS_ENV, "")) if h]
    return tuple(check_engine_url(h) for h in listed) if listed else (None,)


def check_engine_url(url: str) -> str:
    """``url`` if it names an engine sandboxes may run on, else one sentence saying what to use.

    Raises:
        SparringError: Not ``unix://`` or ``tcp://``, or ``tcp://`` off this machine without TLS.
    """
    scheme, sep, rest = url.partition("://")
    if scheme == "ssh":
        raise SparringError(
            f"engine URL {url} is refused: docker-py's ssh:// transport gives the sandbox's command channel no "
            "timeouts; forward the engine's socket (`ssh -NL /tmp/envhost.sock:/var/run/docker.sock USER@HOST`) and "
            "list unix:///tmp/envhost.sock, or use tcp:// with TLS."
        )
    if not sep or scheme not in ("unix", "tcp") or not rest.strip("/"):
        raise SparringError(f"engine URL {url!r} is not unix:///path/to/docker.sock or tcp://HOST:PORT.")
    if scheme == "tcp" and not _loopback(rest) and not _tls_configured():
        raise SparringError(
            f"engine URL {url} is refused without TLS (Docker's API on an open port gives root to anyone who reaches "
            "it); start that engine with --tlsverify and set DOCKER_TLS_VERIFY=1 and DOCKER_CERT_PATH here."
        )
    return url


def _loopback(address: str) -> bool:
    host = urlsplit(f"tcp://{address}").hostname or ""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _tls_configured() -> bool:
    """Whether docker-py will talk TLS to a ``tcp://`` engine (its own reading of the environment)."""
    from docker.utils import kwargs_from_env

    try:
        return "tls" in kwargs_from_env()
    except Exception as e:  # TLSParameterError: DOCKER_CERT_PATH lacks a file
        raise SparringError(f"the Docker TLS settings are not usable ({e}); check DOCKER_CERT_PATH.") from None


def check_engines(hosts: Sequence[str] | None = None) -> None:
    """Make sure every engine sandboxes may run on answers (before a run spends minutes loading).

    Raises:
        SparringError: One does not; the message names it and why.
    """
    for host in engine_hosts(hosts):
        shared_client(host)


def pick_engine(hosts: Sequence[str | None]) -> str | None:
    """The engine of ``hosts`` that runs the fewest containers now (the engines' own count); ties in turn.

    An engine that does not answer is passed over (and logged) while another does.

    Raises:
        SparringError: No engine answers; the message names the first and why.
    """
    if len(hosts) == 1:
        return hosts[0]
    start = next(_turn) % len(hosts)
    best: str | None = None
    fewest: int | None = None
    failures: list[str] = []
    for host in [*hosts[start:], *hosts[:start]]:
        try:
            running = int(shared_client(host).info()["ContainersRunning"])
        except Exception as e:  # unreachable: SparringError on first use, docker-py's errors later
            failures.append(str(e))
            logger.warning("sandboxes skip the Docker engine at %s: %s", host, e)
            continue
        if fewest is None or running < fewest:
            best, fewest = host, running
    if fewest is None:
        raise SparringError(failures[0])
    return best


_present: set[tuple[str, str]] = set()  # (engine, image) known to hold the local engine's image
_copy_locks: dict[tuple[str, str], threading.Lock] = {}
_guard = threading.Lock()


def ensure_image(host: str | None, image: str) -> None:
    """Make ``image`` present on the engine at ``host`` as the local engine has it (``docker save | docker load``).

    Nothing happens for the local engine, or when the engine already holds the same image id.

    Raises:
        SparringError: The image is on neither engine, or the copy failed; the message says what to do.
    """
    if host is None or (host, image) in _present:
        return
    import docker

    with _guard:
        lock = _copy_locks.setdefault((host, image), threading.Lock())
    with lock:
        if (host, image) in _present:
            return
        remote = shared_client(host).api
        try:
            local_id: str | None = shared_client().api.inspect_image(image)["Id"]
        except Exception:  # no such image here, or no engine here at all (a GPU node without Docker)
            local_id = None
        try:
            remote_id: str | None = remote.inspect_image(image)["Id"]
        except docker.errors.ImageNotFound:
            remote_id = None
        if local_id is None and remote_id is None:
            raise SparringError(
                f"image {image} is neither on the Docker engine at {host} nor on a local engine to copy it from; "
                f"build it there (`DOCKER_HOST={host} sparring setup --for test`) or here."
            )
        if local_id is not None and remote_id != local_id:
            _copy(image, host)
            remote_id = remote.inspect_image(image)["Id"]
            if remote_id != local_id:
                raise SparringError(f"copying image {image} to the engine at {host} gave another image; retry.")
        _present.add((host, image))


def _copy(image: str, host: str) -> None:
    """``docker save`` from the local engine streamed into ``docker load`` on ``host``."""
    from sparring.containers.images import engine_errors

    logger.info("copying image %s to the Docker engine at %s", image, host)
    with engine_errors(f"copying image {image} to the engine at {host}"):
        stream = docker_client(timeout=1800).api.get_image(image)
        for status in docker_client(timeout=1800, host=host).api.load_image(stream, quiet=True):
            if "error" in status:
                raise SparringError(f"the engine at {host} refused image {image}: {status['error'].strip()}.")


def place(image: str, hosts: Sequence[str] | None = None) -> str | None:
    """The engine a new container of ``image`` goes to (see :func:`pick_engine`), holding the image.

    Raises:
        SparringError: No listed engine answers, or the image cannot be made present.
    """
    engine = pick_engine(engine_hosts(hosts))
    ensure_image(engine, image)
    return engine
