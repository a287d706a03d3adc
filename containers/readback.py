"""Caps on what the harness reads back out of a sandbox, and the report of what they kept out.

Whatever an agent leaves in its container may be read back by the harness (a repair's files, an
artifact, a test report), into the host process's memory and through the container's attach
channel (a few MB/s). Unbounded, many files, one huge file, a deep tree or long names cost the
host gigabytes and minutes. :class:`ReadCaps` bounds a tree read (``Sandbox.read_tree``): entries,
bytes of the whole archive, bytes of one file, depth and path length, plus names never read
(``.git``, bytecode caches). What the caps keep out is not an error: :class:`TreeRead` lists it in
sentences (:meth:`TreeRead.notes`) for the agent's observation or the episode's outcome.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["MAX_READ_BYTES", "ReadCaps", "TreeRead"]

#: Bytes of one file ``Sandbox.get_file`` reads at most unless told otherwise.
MAX_READ_BYTES = 32 << 20


@dataclass(frozen=True)
class ReadCaps:
    """Bounds of one tree read (defaults fit a repository of a Python library many times over).

    Attributes:
        entries: Files, folders and links read at most; the walk stops there.
        tar_bytes: Bytes of the archive at most (contents and headers); the walk stops there.
        file_bytes: A regular file larger than this is left out.
        depth: Folders deeper than this below the root are left out (not descended into).
        path_chars: Entries whose path is longer than this are left out.
        exclude: Names left out wherever they are (and not descended into).
    """

    entries: int = 20_000
    tar_bytes: int = 16 << 20
    file_bytes: int = 2 << 20
    depth: int = 32
    path_chars: int = 1024
    exclude: tuple[str, ...] = ()

    def request(self) -> dict[str, Any]:
        """The caps as the command server's ``get_tar`` takes them."""
        return asdict(self) | {"exclude": list(self.exclude)}


#: How a left-out kind reads in a sentence.
_KINDS = {
    "file_bytes": "file(s) larger than {file_bytes} bytes",
    "tar_bytes": "file(s) past the {tar_bytes} bytes read back at most",
    "depth": "folder(s) deeper than {depth} levels (their contents too)",
    "path_chars": "path(s) longer than {path_chars} characters",
    "unreadable": "entry(ies) that changed or vanished while being read",
    "special": "socket(s)",
}


@dataclass
class TreeRead:
    """A capped tree read: the tar, and what the caps kept out of it.

    Attributes:
        data: The tar (top entry: the base name of the path read, like ``docker cp``).
        caps: The caps it was read with.
        left_out: Kind -> ``{"count": n, "examples": [paths]}`` (kinds of :data:`_KINDS`).
        stopped: ``"entries"`` or ``"tar_bytes"`` when the walk stopped early at that cap, else None.
        entries: Entries in the tar.
    """

    data: bytes
    caps: ReadCaps
    left_out: dict[str, dict[str, Any]] = field(default_factory=dict)
    stopped: str | None = None
    entries: int = 0

    @property
    def complete(self) -> bool:
        """Whether everything under the path (but the excluded names) is in the tar."""
        return not self.left_out and self.stopped is None

    def notes(self) -> list[str]:
        """One sentence per kind of thing left out, naming a few examples; empty when complete."""
        caps = asdict(self.caps)
        notes = []
        for kind, entry in sorted(self.left_out.items()):
            what = _KINDS.get(kind, kind).format(**caps)
            examples = ", ".join(entry["examples"])
            notes.append(f"{entry['count']} {what} not read back (e.g. {examples})")
        if self.stopped == "entries":
            notes.append(f"reading stopped after {self.caps.entries} entries; the rest was not read back")
        elif self.stopped == "tar_bytes":
            notes.append(f"reading stopped at {self.caps.tar_bytes} bytes; the rest was not read back")
        return notes
