"""What a sandbox may use: :class:`SandboxLimits`, the container's configuration, and the disk cap.

Every container has no network, capped memory (no swap), CPU, pids and file size, Docker's init
as PID 1, every capability dropped but :data:`HARNESS_CAPS`, ``no-new-privileges`` and no log
(:func:`host_config`).

The disk cap. The engine this project runs on (Docker 20.10, overlay2 on ext4, cgroup v1) cannot cap a
container's writable layer: ``--storage-opt size`` needs overlay2 on xfs with project quotas, and
cgroup v1 has no byte cap on writes. So a sandbox has no writable layer at all: its root file
system is read-only and every place a process may write is a tmpfs mount with a size and an inode
cap (:data:`WRITABLE`). Together they hold at most ``SandboxLimits.disk`` bytes and
``SandboxLimits.inodes`` files, so neither large files, nor many small ones, nor sparse files
(tmpfs counts the blocks written) can fill the host's disk; tmpfs pages are charged to the
container's memory cgroup too, so what they hold also counts against its memory limit.

A tmpfs starts empty and Docker 20.10 has no ``tmpcopyup``, so the places whose image content
matters (``/repo``, the sandbox user's home) are seeded when a container starts: the image's
content there is read once per image id through the engine's archive API (from a created, never
started container) and handed to the command server as a tar, which it extracts as root with the
owners and modes recorded in the image.
"""

from __future__ import annotations

import io
import tarfile
import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["HARNESS_CAPS", "WRITABLE", "SandboxLimits", "Writable", "host_config", "image_seed", "tmpfs_options"]

#: Capabilities kept for the command server and root harness commands (chown, read any file,
#: switch to the sandbox user, kill its processes); the sandbox user's processes, and the agent's
#: file reads and writes (``as_agent``), get none.
HARNESS_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "SETUID", "SETGID", "KILL"]


@dataclass
class SandboxLimits:
    """Resource limits of one sandbox.

    Attributes:
        memory: Memory limit in Docker's syntax ("2g", "512m"); swap is not allowed on top.
        cpus: CPUs the container may use.
        pids: Most processes and threads alive at once (stops fork bombs).
        exec_timeout: Default seconds a command may run before its process group is killed.
        output_cap: Bytes kept of each of stdout and stderr (the first and last halves).
        file_size: Largest file a process may write, in bytes.
        disk: Bytes every writable place together may hold (:data:`WRITABLE`: ``/repo``, ``/tmp``,
            ``/var/tmp``, the sandbox user's home, ``/dev/shm``); it counts against ``memory``
            too, since the places are tmpfs mounts.
        inodes: Files and folders those places together may hold.
    """

    memory: str = "2g"
    cpus: float = 1.0
    pids: int = 256
    exec_timeout: float = 60.0
    output_cap: int = 16 * 1024
    file_size: int = 1 << 30
    disk: int = 768 << 20
    inodes: int = 200_000


def host_config(api: Any, limits: SandboxLimits) -> dict[str, Any]:
    """The engine's host configuration of a sandbox with ``limits``."""
    from docker.types import LogConfig, Ulimit

    return api.create_host_config(
        network_mode="none",
        mem_limit=limits.memory,
        memswap_limit=limits.memory,
        nano_cpus=int(limits.cpus * 1e9),
        pids_limit=limits.pids,
        init=True,
        cap_drop=["ALL"],
        cap_add=HARNESS_CAPS,
        security_opt=["no-new-privileges"],
        ulimits=[Ulimit(name="fsize", soft=limits.file_size, hard=limits.file_size)],
        read_only=True,  # no writable layer: the capped tmpfs mounts are the only places to write
        tmpfs=tmpfs_options(limits.disk, limits.inodes),
        log_config=LogConfig(type="none"),  # stdout is the protocol; logging it would cost disk and time
    )


@dataclass(frozen=True)
class Writable:
    """One writable place of a sandbox: a tmpfs mount.

    Attributes:
        path: Where it is mounted.
        share: Its part of the sandbox's disk and inode caps.
        mode: Mode of the mount's root when nothing is seeded there (a seeded root takes the image's).
        seed: Copy the image's content at ``path`` in when the container starts.
        exec: Allow running programs from it (scripts in /repo and /tmp, as tests and agents expect).
    """

    path: str
    share: float
    mode: int = 0o755
    seed: bool = False
    exec: bool = True


#: The writable places of every sandbox; the rest of the file system is read-only. /dev/shm is
#: listed so that it is capped like the others (Docker's own is 64 MiB with no inode cap).
WRITABLE = (
    Writable("/repo", 0.5, seed=True),
    Writable("/tmp", 0.25, mode=0o1777),
    Writable("/var/tmp", 0.0625, mode=0o1777),
    Writable("/home/sparring", 0.0625, seed=True),
    Writable("/dev/shm", 0.125, mode=0o1777, exec=False),
)


def tmpfs_options(disk: int, inodes: int) -> dict[str, str]:
    """Docker's ``tmpfs`` host option for :data:`WRITABLE`: path -> mount options.

    Args:
        disk: Bytes all the mounts together may hold.
        inodes: Files and folders all the mounts together may hold.
    """
    options = {}
    for place in WRITABLE:
        size = max(1 << 20, int(disk * place.share)) // 4096 * 4096
        count = max(1024, int(inodes * place.share))
        # Docker adds noexec,nosuid,nodev first; a later "exec" wins over its "noexec".
        options[place.path] = f"size={size},nr_inodes={count},mode={place.mode:o}" + (",exec" if place.exec else "")
    return options


_seeds: dict[str, bytes] = {}
_seed_locks: dict[str, threading.Lock] = {}
_seed_guard = threading.Lock()


def image_seed(api: Any, image_id: str, labels: dict[str, str]) -> bytes:
    """A tar, to extract at ``/``, of the image's content at the seeded places of :data:`WRITABLE`.

    Read once per image id and kept: a created container is never started, so nothing runs, and
    the engine's archive API is much faster than the command server's channel. A place the image
    lacks is left out (its mount starts empty). ``labels`` mark that container for ``sparring gc``
    should this process die before removing it.
    """
    with _seed_guard:
        if image_id in _seeds:
            return _seeds[image_id]
        lock = _seed_locks.setdefault(image_id, threading.Lock())
    with lock:
        if image_id not in _seeds:
            _seeds[image_id] = _read_seed(api, image_id, labels)
    return _seeds[image_id]


def _read_seed(api: Any, image_id: str, labels: dict[str, str]) -> bytes:
    import docker

    out = io.BytesIO()
    container = api.create_container(image_id, command=["true"], network_disabled=True, labels=labels)["Id"]
    try:
        with tarfile.open(fileobj=out, mode="w") as merged:
            for place in WRITABLE:
                if not place.seed:
                    continue
                try:
                    stream, _ = api.get_archive(container, place.path)
                except docker.errors.NotFound:
                    continue
                data = b"".join(stream)
                # The engine names the top entry after the base name; the server extracts at "/".
                parent = place.path.strip("/").rpartition("/")[0]
                with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                    for member in tar:
                        f = tar.extractfile(member) if member.isfile() else None
                        if parent:
                            member.name = f"{parent}/{member.name}"
                            if member.islnk():  # a hard link names another member of the same tar
                                member.linkname = f"{parent}/{member.linkname}"
                        merged.addfile(member, f)
    finally:
        api.remove_container(container, force=True)
    return out.getvalue()
