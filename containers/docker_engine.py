"""Find, install and start the Docker engine the sandboxes run on.

Setup calls :func:`ensure_engine`: if the engine answers, nothing happens; else, on a Debian
machine where we are root, Debian's ``docker.io`` is installed with apt and ``dockerd`` is started
in the background with its log in ``sparring_home()/dockerd.log``; anywhere else the error says
what to do. :func:`docker_client` is the one way the package talks to the engine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from sparring import SparringError, sparring_home

if TYPE_CHECKING:
    import docker

#: Seconds to wait for a freshly started ``dockerd`` to answer.
START_TIMEOUT_S = 90.0


def _engine_hint() -> str:
    host = os.environ.get("DOCKER_HOST")
    if host:
        return f"start the engine DOCKER_HOST={host} points at, or unset DOCKER_HOST"
    return "run `sparring setup --for test` (as root on Debian it installs and starts docker.io) or start dockerd"


def docker_client(timeout: float = 120.0, host: str | None = None) -> docker.DockerClient:
    """A docker-py client for the engine at ``host``, else the environment's (``DOCKER_HOST`` or the local socket).

    A ``tcp://`` host uses TLS as the environment says (``DOCKER_TLS_VERIFY``, ``DOCKER_CERT_PATH``),
    exactly as for ``DOCKER_HOST``.

    Args:
        timeout: Seconds an API call may take before docker-py gives up.
        host: An engine URL (``unix:///path.sock``, ``tcp://host:2376``); None: the environment's engine.

    Raises:
        SparringError: The engine does not answer; the message says how to start it.
    """
    import docker

    environment = {**os.environ, "DOCKER_HOST": host} if host else None
    try:
        if host and host.startswith("tcp://"):
            client = _tls_aware_client(environment or {}, timeout)
        else:
            client = docker.from_env(timeout=timeout, environment=environment)
        client.ping()
    except Exception as e:  # docker-py raises DockerException, requests' errors or OSError
        if host:
            raise SparringError(
                f"the Docker engine at {host} is not reachable ({_short(e, host)}); start it there, check the URL "
                "(and DOCKER_CERT_PATH for tcp:// with TLS), or drop it from docker_hosts."
            ) from None
        raise SparringError(f"the Docker engine is not reachable ({_short(e)}); {_engine_hint()}.") from None
    return client


def _tls_aware_client(environment: dict[str, str], timeout: float) -> docker.DockerClient:
    """A client of a ``tcp://`` engine whose TLS trusts ``DOCKER_CERT_PATH``'s CA, whatever the environment says.

    requests lets ``REQUESTS_CA_BUNDLE`` / ``CURL_CA_BUNDLE`` (set on many machines, this one too) replace a
    session's own CA file, so docker-py's TLS would check the engine against the system's CAs and fail;
    sessions that ignore the environment keep the engine's CA. The API version is asked for first, as
    ``docker.from_env`` does, on such a session.
    """
    import docker
    from docker.constants import DEFAULT_DOCKER_API_VERSION, MINIMUM_DOCKER_API_VERSION
    from docker.utils import kwargs_from_env

    kwargs = kwargs_from_env(environment=environment)
    probe = docker.APIClient(**kwargs, version=MINIMUM_DOCKER_API_VERSION, timeout=timeout)
    probe.trust_env = False
    served = probe.version(api_version=False)["ApiVersion"]
    probe.close()
    version = min(served, DEFAULT_DOCKER_API_VERSION, key=lambda v: tuple(int(p) for p in v.split(".")))
    client = docker.DockerClient(**kwargs, version=version, timeout=timeout)
    client.api.trust_env = False
    return client


_SHARED: dict[str | None, docker.DockerClient] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(host: str | None = None) -> docker.DockerClient:
    """One client per process and engine (``host``, else ``DOCKER_HOST``), checked once, for frequent calls.

    Sandboxes are created and removed many times an episode batch; a fresh client each time would
    cost a connection and a ping per call.

    Raises:
        SparringError: The engine does not answer on first use.
    """
    key = host or os.environ.get("DOCKER_HOST")
    with _SHARED_LOCK:
        client = _SHARED.get(key)
        if client is None:
            client = _SHARED[key] = docker_client(host=host)
    return client


def engine_status() -> tuple[bool, str]:
    """Whether the engine answers, and its version and storage details (or why not)."""
    import docker

    try:
        client = docker.from_env(timeout=10)
        info = client.info()
    except Exception as e:
        return False, f"not reachable: {_short(e)}"
    cgroup = info.get("CgroupVersion", "?")
    return True, f"Docker {info.get('ServerVersion', '?')} ({info.get('Driver', '?')}, cgroup v{cgroup})"


def ensure_engine() -> None:
    """Make the engine answer: install Debian's docker.io and start dockerd if needed (idempotent).

    Raises:
        SparringError: The engine cannot be started here; the message says what to do.
    """
    ok, detail = engine_status()
    if ok:
        return
    if os.environ.get("DOCKER_HOST"):
        raise SparringError(f"the Docker engine at DOCKER_HOST is {detail}; {_engine_hint()}.")
    if os.geteuid() != 0:
        raise SparringError(
            "the Docker engine is not running and installing it needs root; run `sudo apt-get install docker.io && "
            "sudo systemctl start docker` (or start dockerd) and add yourself to the docker group."
        )
    if shutil.which("dockerd") is None:
        apt_install(["docker.io"])
    if not engine_status()[0]:  # apt may have started it through systemd already
        start_dockerd()


def apt_install(packages: list[str]) -> None:
    """Install Debian packages with apt (as root), refreshing the package lists once if needed.

    Raises:
        SparringError: apt is not available or the install failed.
    """
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise SparringError(f"{' '.join(packages)} is not installed and apt as root is not available; install it.")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
    print(f"  apt-get install {' '.join(packages)}", flush=True)
    if subprocess.run(cmd, env=env, capture_output=True).returncode == 0:
        return
    subprocess.run(["apt-get", "update"], env=env, capture_output=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        raise SparringError(f"apt-get install {' '.join(packages)} failed ({tail[0]}); check the apt sources.")


def dockerd_log() -> Path:
    """Where a dockerd started by setup writes its log."""
    return sparring_home() / "dockerd.log"


def start_dockerd(timeout: float = START_TIMEOUT_S) -> None:
    """Start ``dockerd`` in the background (log in :func:`dockerd_log`) and wait until it answers.

    Raises:
        SparringError: dockerd exited or did not answer in time; the message points at its log.
    """
    log = dockerd_log()
    print(f"  starting dockerd in the background (log: {log})", flush=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            ["dockerd"], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if engine_status()[0]:
            return
        if proc.poll() is not None:
            raise SparringError(f"dockerd exited with status {proc.returncode}; see {log} for why.")
        time.sleep(0.5)
    raise SparringError(f"dockerd did not answer within {timeout:.0f} s; see {log} for why.")


def _short(e: BaseException, host: str | None = None) -> str:
    """Why the engine did not answer, in a few words."""
    where = host or os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    text = str(e).strip()
    if "FileNotFoundError" in text or "No such file" in text:
        return f"no Docker socket at {where}"
    if "Connection refused" in text:
        return f"connection refused at {where}"
    if "Permission denied" in text or "PermissionError" in text:
        return f"permission denied on {where} (add your user to the docker group)"
    return (text.splitlines()[0] if text else type(e).__name__)[:200]
