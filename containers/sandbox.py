"""Secure, fast sandboxes: one Docker container per episode, commands through a command server.

Each :class:`Sandbox` is a container with no network, capped memory (no swap), CPU, pids and file
size, a read-only root file system whose only writable places are size- and inode-capped tmpfs
mounts (the disk cap; ``containers/limits.py``), Docker's init as PID 1, every capability dropped
except the few the trusted harness needs when it runs as root, ``no-new-privileges``, no host
mounts, no Docker socket, and the labels ``sparring=1`` and ``sparring.owner`` (host, pid and
start time of the owning process).

Its main process is ``containers/cmdserver.py``, attached over Docker's attach socket: a command
costs one round trip on an open socket instead of a ``docker exec``. The server runs each command
as the non-root user ``sparring`` (or root for the harness) in its own process group, kills the
group at the timeout and when the command ends, and caps its output. What the harness reads back
is capped as well (``containers/readback.py``): one file at ``MAX_READ_BYTES`` unless told
otherwise, a tree within :class:`ReadCaps`, with what was left out reported, never raised.

:class:`SandboxPool` keeps containers started in the background so an episode's reset takes a
ready one; containers are removed in the background, at interpreter exit and on SIGTERM, and
``sparring gc`` removes those a killed process left behind.

Example::

    pool = SandboxPool("sparring-base:bookworm", size=2)
    box = pool.acquire()
    result = box.exec("python3 -c 'print(6 * 7)'")
    assert result.ok and result.stdout == "42\\n"
    pool.release(box)
    pool.close()
"""

from __future__ import annotations

import base64
import contextlib
import posixpath
import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

from sparring import SparringError
from sparring.containers.channel import (
    REPLY_GRACE_S,
    AttachChannel,
    ExecResult,
    FileTooLargeError,
    exec_result,
    raise_remote,
    server_command,
)
from sparring.containers.cleanup import (
    LABEL,
    OWNER_LABEL,
    GarbageReport,
    collect_garbage,
    install_exit_hooks,
    owner_id,
    reaper,
)
from sparring.containers.docker_engine import docker_client, shared_client
from sparring.containers.engines import place
from sparring.containers.limits import HARNESS_CAPS, SandboxLimits, host_config, image_seed
from sparring.containers.readback import MAX_READ_BYTES, ReadCaps, TreeRead

__all__ = [
    "DEFAULT_USER",
    "HARNESS_CAPS",
    "ExecResult",
    "FileTooLargeError",
    "GarbageReport",
    "ReadCaps",
    "Sandbox",
    "SandboxLimits",
    "SandboxPool",
    "TreeRead",
    "collect_garbage",
    "docker_client",
]

#: The account commands run as unless the harness asks for root.
DEFAULT_USER = "sparring"
#: The host name of every sandbox (Docker's default, the container id, would differ per container).
HOSTNAME = "sandbox"
#: Seconds a file or archive transfer may take.
FILE_OP_TIMEOUT_S = 300.0
#: Seconds a new container may take to answer its first request.
START_TIMEOUT_S = 60.0


class Sandbox:
    """One running container and its command server; made by :meth:`create` or a :class:`SandboxPool`.

    Attributes:
        id: The container id.
        image: The image it runs.
        limits: Its resource limits.
        engine: The URL of the engine it runs on (None: the environment's engine).
    """

    def __init__(
        self, container_id: str, image: str, limits: SandboxLimits, channel: AttachChannel, engine: str | None = None
    ):
        """Wrap a started container whose command server answers on ``channel`` (use :meth:`create`)."""
        self.id = container_id
        self.image = image
        self.limits = limits
        self.engine = engine
        self._channel = channel
        self._lock = threading.Lock()  # one request at a time on the channel
        self._close_lock = threading.Lock()
        self._closed = False
        self._broken: str | None = None

    @classmethod
    def create(
        cls,
        image: str,
        limits: SandboxLimits | None = None,
        labels: dict[str, str] | None = None,
        hosts: list[str] | None = None,
    ) -> Sandbox:
        """Create and start a container of ``image`` and wait until its command server answers.

        ``hosts``: engine URLs to run it on (default: the process's, see :mod:`~sparring.containers.engines`).

        Raises:
            SparringError: The engine is not running, the image is missing, or the container failed to start.
        """
        import docker

        limits = limits or SandboxLimits()
        install_exit_hooks()
        engine = place(image, hosts)
        api = shared_client(engine).api
        all_labels = {**(labels or {}), LABEL: "1", OWNER_LABEL: owner_id()}
        try:
            image_id = api.inspect_image(image)["Id"]
            seed = image_seed(api, image_id, all_labels)
        except docker.errors.ImageNotFound:
            raise SparringError(
                f"image {image} is not there; build it (`sparring build base` for the base image)."
            ) from None
        except Exception as e:  # the engine went away
            raise SparringError(f"could not read the image {image} ({e}); check `sparring doctor`.") from None
        try:
            created = api.create_container(
                image_id,
                command=server_command(),
                stdin_open=True,
                user="0",
                hostname=HOSTNAME,  # the same in every container: no per-container value for code to key on
                labels=all_labels,
                host_config=host_config(api, limits),
            )
        except docker.errors.ImageNotFound:
            raise SparringError(
                f"image {image} is not there; build it (`sparring build base` for the base image)."
            ) from None
        except Exception as e:  # the engine went away, or refused the configuration
            raise SparringError(f"could not create a sandbox of {image} ({e}); check `sparring doctor`.") from None
        container_id = created["Id"]
        reaper().track(container_id, engine)
        try:
            channel = AttachChannel(
                api.attach_socket(container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            )
            api.start(container_id)
            sandbox = cls(container_id, image, limits, channel, engine)
            sandbox._call({"op": "ping"}, START_TIMEOUT_S)
            if seed:
                sandbox._call({"op": "put_tar", "dest": "/", "data": base64.b64encode(seed).decode(), "user": None})
        except Exception as e:
            reaper().remove(container_id, engine)
            if isinstance(e, SparringError):
                raise
            raise SparringError(f"a sandbox of {image} did not start ({e}); check the image and the engine.") from None
        return sandbox

    def exec(
        self,
        command: str,
        *,
        timeout: float | None = None,
        workdir: str = "/repo",
        env: dict[str, str] | None = None,
        user: str | None = None,
    ) -> ExecResult:
        """Run ``bash -c command`` in the container.

        Args:
            command: A bash command line (pipes, redirections and ``&&`` work).
            timeout: Seconds before the command's whole process group is killed (default: the limits').
            workdir: Working directory.
            env: Variables added to the image's environment.
            user: Account to run as; None is the non-root sandbox user, "root" is for the trusted harness.

        Returns:
            The result; a dead or unresponsive container gives a failed result saying so, not an exception.
        """
        timeout = self.limits.exec_timeout if timeout is None else float(timeout)
        request = {"op": "exec", "cmd": command, "user": user or DEFAULT_USER, "cwd": workdir,
                   "env": dict(env or {}), "timeout": timeout, "cap": self.limits.output_cap}  # fmt: skip
        try:
            reply = self._call(request, timeout + REPLY_GRACE_S)
        except (SparringError, OSError) as e:  # a dead or wrecked container is the agent's observation
            return ExecResult(exit_code=None, stdout="", stderr=f"[sparring: {e}]\n")
        return exec_result(reply, timeout, self.limits.memory)

    def put_file(
        self, path: str, data: bytes | str, mode: int = 0o644, user: str | None = None, *, as_agent: bool = False
    ) -> None:
        """Write a file (parents are created), owned by ``user`` (default: the sandbox user).

        A symbolic link at ``path`` is replaced, never written through. The harness writes as
        root; with ``as_agent`` the sandbox user writes it, with no supplementary groups and no
        capabilities, so what its ``bash`` commands could not write is refused here too (an
        existing file keeps its owner, and its mode unless the sandbox user owns it).

        Raises:
            PermissionError: ``as_agent`` and the sandbox user may not write there.
        """
        if as_agent and user not in (None, DEFAULT_USER):
            raise ValueError(f"as_agent writes as {DEFAULT_USER}, not as {user}")
        raw = data.encode() if isinstance(data, str) else data
        request = {"op": "write", "path": self._abs(path), "data": base64.b64encode(raw).decode(), "mode": mode,
                   "user": user or DEFAULT_USER}  # fmt: skip
        if as_agent:
            request["as_user"] = DEFAULT_USER
        self._call(request)

    def get_file(self, path: str, *, as_agent: bool = False, max_bytes: int | None = MAX_READ_BYTES) -> bytes:
        """The bytes of a file in the container, read as root, or as the sandbox user with ``as_agent``.

        Only regular files are read. As root, a link in the last component is refused, not followed
        (root reads paths the agent's processes may have replaced: a FIFO there fails at once). With
        ``as_agent`` the read has the sandbox user's rights alone (no supplementary groups, no
        capabilities).

        Args:
            path: The file.
            as_agent: Read with the sandbox user's rights.
            max_bytes: Refuse a larger file (None: no cap); the file is never read past it.

        Raises:
            FileNotFoundError: There is no such file.
            PermissionError: ``as_agent`` and the sandbox user may not read it.
            OSError: It is not a regular file, or (as root) it is a link.
            FileTooLargeError: The file holds more than ``max_bytes``.
        """
        request = {"op": "read", "path": self._abs(path), "max_bytes": max_bytes}
        if as_agent:
            request["as_user"] = DEFAULT_USER
        return base64.b64decode(self._call(request)["data"])

    def put_archive(self, dest: str, tar_bytes: bytes, user: str | None = None) -> None:
        """Extract a tar into folder ``dest`` (created if missing), like ``docker cp``.

        Args:
            dest: Folder in the container.
            tar_bytes: The tar archive.
            user: Owner of what is extracted; None keeps the owners recorded in the tar (usually root).
        """
        self._call(
            {"op": "put_tar", "dest": self._abs(dest), "data": base64.b64encode(tar_bytes).decode(), "user": user}
        )

    def get_archive(self, path: str, max_file_bytes: int | None = None) -> bytes:
        """A tar of ``path`` (file or folder) whose top entry is its base name, like ``docker cp``.

        Read within the default :class:`ReadCaps` (what they keep out is simply absent; use
        :meth:`read_tree` to learn what that was).

        Args:
            path: File or folder in the container.
            max_file_bytes: Leave out regular files larger than this (default: the caps' own).

        Raises:
            FileNotFoundError: There is no such path.
        """
        caps = ReadCaps() if max_file_bytes is None else ReadCaps(file_bytes=max_file_bytes)
        return self.read_tree(path, caps).data

    def read_tree(self, path: str, caps: ReadCaps | None = None) -> TreeRead:
        """A tar of ``path`` read within ``caps``, and what they kept out (see :mod:`~sparring.containers.readback`).

        An agent's files never make this raise or take the host's memory: huge or sparse files,
        many files, deep trees and long names are left out and counted in the result.

        Raises:
            FileNotFoundError: There is no such path.
        """
        caps = caps or ReadCaps()
        reply = self._call({"op": "get_tar", "path": self._abs(path), "caps": caps.request()})
        return TreeRead(base64.b64decode(reply["data"]), caps, reply["left_out"], reply["stopped"], reply["entries"])

    def close(self) -> None:
        """Stop using the container; it is removed in the background (idempotent).

        Safe from another thread while a command runs: that command then returns a failed result.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._channel.close()
        reaper().remove(self.id, self.engine)

    def alive(self) -> bool:
        """Whether the container still runs: not closed, not broken, its stream still open."""
        if self._closed or self._broken:
            return False
        if not self._lock.acquire(blocking=False):  # a request is in flight: its answer says
            return True
        try:
            return not self._channel.hung_up()
        finally:
            self._lock.release()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Sandbox({self.id[:12]}, {self.image})"

    @staticmethod
    def _abs(path: str) -> str:
        return path if path.startswith("/") else posixpath.join("/repo", path)

    def _call(self, request: dict[str, Any], seconds: float = FILE_OP_TIMEOUT_S) -> dict[str, Any]:
        with self._lock:
            if self._closed:
                raise SparringError(f"sandbox {self.id[:12]} is closed; acquire a new one.")
            if self._broken:
                raise SparringError(self._broken)
            try:
                self._channel.send(request)
                reply = self._channel.receive(time.monotonic() + seconds)
            except (OSError, EOFError, ValueError) as e:
                why = "did not answer in time" if isinstance(e, TimeoutError) else f"stopped ({e})"
                crash = self._channel.stderr.decode(errors="replace").strip().splitlines()[-1:]
                self._broken = f"sandbox {self.id[:12]} {why}{': ' + crash[0] if crash else ''}; reset the episode"
                raise SparringError(self._broken) from None
        if "error" in reply:
            raise_remote(reply, request)
        return reply


class SandboxPool:
    """Containers of one image, started in the background so :meth:`acquire` rarely waits.

    Every container handed out is fresh; :meth:`release` (or the sandbox's ``close``) removes it in
    the background while the pool starts a replacement.
    """

    def __init__(
        self,
        image: str,
        size: int = 2,
        limits: SandboxLimits | None = None,
        labels: dict[str, str] | None = None,
        workers: int | None = None,
        hosts: list[str] | None = None,
    ):
        """Start filling the pool.

        Args:
            image: Image of every container.
            size: Containers kept ready (or starting).
            limits: Their limits (defaults: :class:`SandboxLimits`).
            labels: Extra labels.
            workers: Containers started at once (default: ``min(size, 2)``).
            hosts: Engine URLs to start them on (default: the process's; :mod:`~sparring.containers.engines`).
        """
        if size < 1:
            raise SparringError(f"a sandbox pool needs size >= 1, got {size}.")
        self.image = image
        self.size = size
        self.limits = limits or SandboxLimits()
        self.labels = dict(labels or {})
        self.hosts = list(hosts) if hosts else None
        install_exit_hooks()
        self._ready: queue.Queue[Sandbox] = queue.Queue()
        self._slots = threading.Semaphore(size)
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._error: Exception | None = None
        self._quiet = 0  # callers inside quiet(): no replacement starts unless an acquire waits
        self._waiting = 0  # acquire calls waiting for a container
        self._threads = [
            threading.Thread(target=self._fill, name=f"sparring-pool-{i}", daemon=True)
            for i in range(workers or min(size, 2))
        ]
        for thread in self._threads:
            thread.start()

    def _fill(self) -> None:
        while not self._closed.is_set():
            if not self._slots.acquire(timeout=0.5):
                continue
            while self._quiet and not self._waiting and not self._closed.is_set():
                self._closed.wait(0.02)
            if self._closed.is_set():
                self._slots.release()
                break
            try:
                sandbox = Sandbox.create(self.image, self.limits, self.labels, self.hosts)
            except Exception as e:
                self._error = e
                self._slots.release()
                self._closed.wait(1.0)
                continue
            self._error = None
            with self._lock:
                if not self._closed.is_set():
                    self._ready.put(sandbox)
                    continue
            sandbox.close()  # the pool was closed while this one was starting

    def acquire(self, timeout: float = START_TIMEOUT_S) -> Sandbox:
        """A fresh started container (a ready one if there is one); the caller releases or closes it.

        Raises:
            SparringError: The pool is closed, or no container could be started (the reason is given).
        """
        deadline = time.monotonic() + timeout
        while True:
            if self._closed.is_set():
                raise SparringError("the sandbox pool is closed.")
            try:
                sandbox = self._ready.get_nowait()
            except queue.Empty:
                with self._lock:
                    self._waiting += 1
                try:
                    sandbox = self._ready.get(timeout=0.1)
                except queue.Empty:
                    if self._error is not None:
                        raise SparringError(str(self._error)) from None
                    if time.monotonic() > deadline:
                        raise SparringError(f"no sandbox of {self.image} started within {timeout:.0f} s.") from None
                    continue
                finally:
                    with self._lock:
                        self._waiting -= 1
            self._slots.release()
            if sandbox.alive():
                return sandbox
            sandbox.close()  # removed behind the pool's back: take the next one

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Hold back replacements while the block runs, unless an :meth:`acquire` is waiting.

        Starting a container costs the engine CPU time; a caller whose wall time matters (the runs
        of one validation, side by side) keeps it for the block, and the pool catches up after.
        An :meth:`acquire` never waits longer for it: one that finds no container ready gets one started.
        """
        with self._lock:
            self._quiet += 1
        try:
            yield
        finally:
            with self._lock:
                self._quiet -= 1

    @property
    def ready(self) -> int:
        """Containers started and waiting to be acquired."""
        return self._ready.qsize()

    def wait_ready(self, count: int | None = None, timeout: float = START_TIMEOUT_S) -> bool:
        """Wait until ``count`` (default: the pool's size) containers are ready; False on timeout."""
        deadline = time.monotonic() + timeout
        while self.ready < min(count or self.size, self.size):
            if time.monotonic() > deadline or self._closed.is_set():
                return False
            time.sleep(0.01)
        return True

    def release(self, sandbox: Sandbox) -> None:
        """Give a container back: it is removed in the background (each episode gets a fresh one)."""
        sandbox.close()

    def close(self) -> None:
        """Stop filling, remove the ready containers and wait for those being started (idempotent)."""
        with self._lock:
            self._closed.set()
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                break
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=START_TIMEOUT_S)

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
