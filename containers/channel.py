"""The host's side of a sandbox's command server: the attach socket, its framing and its answers.

Requests go to the container's stdin as one ASCII JSON line each; answers come back on its stdout,
wrapped in Docker's stream frames (an 8-byte header: stream, 3 zero bytes, big-endian size), which
:class:`AttachChannel` takes apart. The server itself is ``containers/cmdserver.py``.
"""

from __future__ import annotations

import base64
import json
import select
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Any

from sparring import SparringError

#: Seconds the host waits beyond a command's own timeout before it gives the container up.
REPLY_GRACE_S = 30.0


class AttachChannel:
    """The attach socket of a container: newline-framed JSON requests in, Docker's stream frames out."""

    def __init__(self, attached: Any):
        self._keep = attached  # docker-py's wrapper; keeps the HTTP response (and TLS) alive
        self._sock = getattr(attached, "_sock", attached)
        self._frames = bytearray()  # bytes received, not yet split into Docker frames
        self._stdout = bytearray()  # the server's stdout, not yet split into lines
        self._scanned = 0  # bytes of _stdout already known to hold no newline
        self.stderr = bytearray()  # the last bytes the server wrote to stderr (a crash's traceback)

    def send(self, request: dict[str, Any]) -> None:
        self._sock.settimeout(REPLY_GRACE_S)
        self._sock.sendall(json.dumps(request).encode() + b"\n")

    def receive(self, deadline: float) -> dict[str, Any]:
        while True:
            newline = self._stdout.find(b"\n", self._scanned)
            if newline >= 0:
                line = bytes(self._stdout[:newline])
                del self._stdout[: newline + 1]
                self._scanned = 0
                return json.loads(line)
            self._scanned = len(self._stdout)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no answer in time")
            self._sock.settimeout(remaining)
            data = self._sock.recv(1 << 20)
            if not data:
                raise EOFError("the command server closed its output")
            self._frames += data
            self._split_frames()

    def _split_frames(self) -> None:
        while len(self._frames) >= 8:
            size = int.from_bytes(self._frames[4:8], "big")
            if len(self._frames) < 8 + size:
                return
            stream, payload = self._frames[0], self._frames[8 : 8 + size]
            del self._frames[: 8 + size]
            if stream == 1:
                self._stdout += payload
            else:
                self.stderr = (self.stderr + payload)[-4096:]

    def hung_up(self) -> bool:
        """Whether the engine closed the stream (the container is gone); costs no round trip.

        What is there to read is kept for :meth:`receive` (a TLS socket, a remote engine's, cannot peek).
        """
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
            if not readable:
                return False
            self._sock.settimeout(0)
            data = self._sock.recv(1 << 16)
        except (ssl.SSLWantReadError, BlockingIOError):  # a TLS record not complete yet: the stream is open
            return False
        except (OSError, ValueError):
            return True
        self._frames += data
        self._split_frames()
        return data == b""

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in receive()
        except Exception:
            pass
        for thing in (self._sock, self._keep):
            try:
                thing.close()
            except Exception:
                pass


def server_command() -> list[str]:
    """The container command: the system python running the command server's source (no copy in the image).

    The server is two files, its file operations first, run as one program.
    """
    from sparring.containers.base_image import containers_dir

    global _SERVER_SOURCE
    if _SERVER_SOURCE is None:
        parts = ("cmdserver_files.py", "cmdserver.py")
        _SERVER_SOURCE = "\n".join((containers_dir() / name).read_text() for name in parts)
    return ["/usr/bin/python3", "-I", "-S", "-c", _SERVER_SOURCE]


_SERVER_SOURCE: str | None = None


@dataclass
class ExecResult:
    """What one command did.

    Attributes:
        exit_code: The exit status; None when the command timed out or was killed by a signal.
        stdout: Standard output, decoded with replacement, capped with a "[... N bytes cut ...]" marker.
        stderr: Standard error, the same way; a line saying so is added on a timeout or OOM kill.
        timed_out: The command ran past its timeout and its process group was killed.
        seconds: Wall time of the command inside the container.
        truncated_bytes: Bytes cut from stdout and stderr together.
        oom_killed: The kernel killed a process of the container for exceeding the memory limit.
        signal: The signal that killed the command's shell, if one did.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    seconds: float = 0.0
    truncated_bytes: int = 0
    oom_killed: bool = False
    signal: int | None = None

    @property
    def ok(self) -> bool:
        """The command exited with status 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out

    @property
    def output(self) -> str:
        """Stdout followed by stderr, as an agent's observation shows them."""
        return self.stdout + self.stderr


def exec_result(reply: dict[str, Any], timeout: float, memory: str) -> ExecResult:
    """The :class:`ExecResult` of the server's answer to an ``exec`` of ``timeout`` seconds under ``memory``."""
    stdout, cut_out = decode_stream(reply["out"])
    stderr, cut_err = decode_stream(reply["err"])
    if reply["timed_out"]:
        stderr += f"\n[sparring: the command timed out after {timeout:g} s and its processes were killed]\n"
    elif reply["oom"]:
        stderr += f"\n[sparring: a process was killed for exceeding the memory limit ({memory})]\n"
    exit_code, killed_by = reply["exit"], reply["signal"]
    if reply["oom"] and exit_code == 128 + 9:  # the shell reports its OOM-killed child as 137
        exit_code, killed_by = None, 9
    return ExecResult(
        exit_code=None if reply["timed_out"] else exit_code,
        stdout=stdout,
        stderr=stderr,
        timed_out=reply["timed_out"],
        seconds=reply["seconds"],
        truncated_bytes=cut_out + cut_err,
        oom_killed=reply["oom"],
        signal=killed_by,
    )


def decode_stream(part: dict[str, Any]) -> tuple[str, int]:
    """Text of a capped stream and how many bytes were cut from its middle."""
    head, tail = base64.b64decode(part["head"]), base64.b64decode(part["tail"])
    cut = part["total"] - len(head) - len(tail)
    if cut <= 0:
        return (head + tail).decode(errors="replace"), 0
    marker = f"\n[... {cut} bytes cut ...]\n"
    return head.decode(errors="replace") + marker + tail.decode(errors="replace"), cut


class FileTooLargeError(OSError):
    """A file larger than the caller reads back at most (``Sandbox.get_file(max_bytes=...)``)."""


_REMOTE_ERRORS: dict[str, type[OSError]] = {
    "FileTooLargeError": FileTooLargeError,
    "FileNotFoundError": FileNotFoundError,
    "IsADirectoryError": IsADirectoryError,
    "NotADirectoryError": NotADirectoryError,
    "PermissionError": PermissionError,
    "FileExistsError": FileExistsError,
}


def raise_remote(reply: dict[str, Any], request: dict[str, Any]) -> None:
    """Raise the host-side error for a failed request: the matching OSError, else SparringError.

    A file operation that the container's file systems refuse (read-only, full) is an OSError with
    its errno, like the one the agent's own commands would meet, not an error of the sandbox.
    """
    error = _REMOTE_ERRORS.get(reply["error"])
    if error is not None:
        raise error(reply["message"])
    if reply["error"] == "OSError" and reply.get("errno"):  # e.g. a read-only or full file system
        raise OSError(reply["errno"], reply["message"])
    if reply["error"] == "KeyError" and "getpwnam" in reply["message"]:
        raise SparringError(
            f"the sandbox image has no user {request.get('user')!r}; use an image built on the base image."
        )
    raise SparringError(f"sandbox {request['op']} failed: {reply['error']}: {reply['message']}")
