"""Removing sandbox containers: in the background, at exit, on SIGTERM, and after a crash (``sparring gc``).

Every container the sandbox creates carries ``sparring=1`` and ``sparring.owner=HOST:PID:START``
(the owning process's start time, so a reused pid is not mistaken for the owner). A process
removes its own containers in the background as they are closed, and all that remain when the
interpreter exits or receives SIGTERM (SIGINT ends the program through ``KeyboardInterrupt``, so
the exit hook covers it). A process killed with SIGKILL cannot clean up: :func:`collect_garbage`
removes the containers and networks whose owner is gone.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from sparring import SparringError
from sparring.containers.docker_engine import docker_client, shared_client
from sparring.containers.engines import engine_hosts

#: Label on everything the project creates at run time (images excepted).
LABEL = "sparring"
#: Label naming the owning process, ``HOST:PID:START``.
OWNER_LABEL = "sparring.owner"


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot, None if it does not exist."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def owner_id(pid: int | None = None) -> str:
    """``HOST:PID:START`` of a process (default: this one)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}"


def owner_alive(owner: str) -> bool:
    """Whether the process an owner label names still runs (owners on other hosts count as alive)."""
    try:
        host, pid, start = owner.rsplit(":", 2)
    except ValueError:
        return False
    if host != socket.gethostname():
        return True
    return pid.isdigit() and _start_time(int(pid)) == start


def _removed_or_going(error: Exception) -> bool:
    """Whether removing a container failed only because it is gone or another removal is under way."""
    text = str(error)
    return "No such container" in text or "already in progress" in text


class Reaper:
    """Removes this process's containers: on request in the background, and all of them at exit."""

    def __init__(self) -> None:
        """An empty set of live containers."""
        self._live: dict[str, str | None] = {}  # container id -> its engine (None: the environment's)
        self._engines: set[str | None] = {None}  # every engine this process created containers on
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._pending: set[Future[None]] = set()

    def track(self, container_id: str, engine: str | None = None) -> None:
        """Remember a container this process created on ``engine`` (an engine URL; None: the environment's)."""
        with self._lock:
            self._live[container_id] = engine
            self._engines.add(engine)

    def remove(self, container_id: str, engine: str | None = None) -> None:
        """Remove a container of ``engine`` in the background (force: it may still run)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="sparring-remove")
            try:
                future = self._executor.submit(self.remove_now, container_id, engine)
            except RuntimeError:  # the interpreter is shutting down: do it here
                shutting_down = True
            else:
                shutting_down = False
                self._pending.add(future)
                future.add_done_callback(self._pending.discard)
        if shutting_down:
            self.remove_now(container_id, engine)

    def remove_now(self, container_id: str, engine: str | None = None) -> None:
        """Remove a container of ``engine`` and wait for it (an already removed one is fine)."""
        try:
            shared_client(engine).api.remove_container(container_id, force=True)
        except Exception as e:
            if not _removed_or_going(e):
                raise
        with self._lock:
            self._live.pop(container_id, None)

    def wait(self) -> None:
        """Wait for the background removals requested so far."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            future.exception()

    @property
    def live(self) -> set[str]:
        """Ids of the containers created and not yet removed."""
        with self._lock:
            return set(self._live)

    def remove_all(self) -> None:
        """Remove every container this process owns on the engines it used (tracked, or with its owner label)."""
        with self._lock:
            found, engines = dict(self._live), set(self._engines)
        for engine in engines:
            try:
                client = docker_client(timeout=30, host=engine)
                listed = client.api.containers(all=True, filters={"label": f"{OWNER_LABEL}={owner_id()}"})
            except Exception:
                listed = []
            found |= {c["Id"]: engine for c in listed}
        threads = [threading.Thread(target=self._quietly, args=item) for item in found.items()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)

    def _quietly(self, container_id: str, engine: str | None) -> None:
        try:
            self.remove_now(container_id, engine)
        except Exception:
            pass


_REAPER = Reaper()
_HOOKS: dict[str, Any] = {}


def reaper() -> Reaper:
    """The process-wide :class:`Reaper`."""
    return _REAPER


def install_exit_hooks() -> None:
    """Remove this process's containers at interpreter exit and on SIGTERM (idempotent).

    The SIGTERM handler removes the containers, then hands the signal to the handler that was
    there before (the default one terminates the process). Signal handlers can only be set from
    the main thread; elsewhere only the exit hook is installed until the main thread calls this.
    """
    if "atexit" not in _HOOKS:
        _HOOKS["atexit"] = True
        atexit.register(_REAPER.remove_all)
    if "sigterm" in _HOOKS or threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: Any) -> None:
        _REAPER.remove_all()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    _HOOKS["sigterm"] = on_sigterm


@dataclass
class GarbageReport:
    """What :func:`collect_garbage` removed.

    Attributes:
        containers: Containers removed.
        networks: Networks removed.
    """

    containers: int = 0
    networks: int = 0


def collect_garbage(all_owners: bool = False, hosts: list[str] | None = None) -> GarbageReport:
    """Remove labelled containers and networks whose owning process is gone, on each engine sandboxes use.

    Containers that vanish or start being removed by someone else meanwhile (their owner's exit
    hook, a second ``sparring gc``) are left to that removal and not counted. An owner on another
    machine counts as alive: run ``sparring gc`` where the trainer ran.

    Args:
        all_owners: Remove those of live processes too (every labelled container and network).
        hosts: Engine URLs (default: ``SPARRING_DOCKER_HOSTS``, else the environment's engine).

    Returns:
        How many of each were removed.

    Raises:
        SparringError: An engine refused a listing or a removal; the message says which and why.
    """
    report = GarbageReport()
    for engine in engine_hosts(hosts):
        _collect(docker_client(host=engine).api, all_owners, report)
    return report


def _collect(api: Any, all_owners: bool, report: GarbageReport) -> None:
    import docker

    def orphaned(labels: dict[str, str] | None) -> bool:
        return all_owners or not owner_alive((labels or {}).get(OWNER_LABEL, ""))

    try:
        for c in api.containers(all=True, filters={"label": f"{LABEL}=1"}):
            if orphaned(c.get("Labels")):
                try:
                    api.remove_container(c["Id"], force=True)
                    report.containers += 1
                except docker.errors.APIError as e:
                    if not _removed_or_going(e):
                        raise
        for n in api.networks(filters={"label": f"{LABEL}=1"}):
            if orphaned(n.get("Labels")):
                try:
                    api.remove_network(n["Id"])
                    report.networks += 1
                except docker.errors.APIError:  # removed meanwhile, or still used by a live container
                    pass
    except docker.errors.APIError as e:
        raise SparringError(
            f"sparring gc stopped after removing {report.containers} container(s): the Docker engine answered "
            f"{e.explanation or e}; check the engine with `sparring doctor` and run `sparring gc` again."
        ) from None
