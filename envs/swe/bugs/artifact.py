"""The bug artifact an injector submits (after Self-play SWE-RL; docs/swe.md).

Five files, as in SSR:

* ``test_script.sh`` — runs the tests, from the repository root (``/repo``);
* ``test_files.txt`` — the oracle test files, one path per line; grading restores them;
* ``test_parser.py`` — optional: reads the script's output on stdin and prints a JSON object
  ``{test_id: "passed" | "failed" | "error" | "skipped"}``. Without it the built-in parser reads
  the JUnit XML report the script writes to ``$SPARRING_JUNIT`` (``pytest --junitxml=...``);
* ``bug_inject.diff`` — a unified diff that introduces the bug into non-test files;
* ``test_weaken.diff`` — a unified diff over test files that hides the bug from the tests.

The module also holds the small unified-diff helpers the rest of the SWE room shares.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "ARTIFACT_FILES",
    "DEFAULT_TEST_SCRIPT",
    "JUNIT_PATH",
    "BugArtifact",
    "diff_files",
    "file_diff",
    "reverse_diff",
    "split_diff",
]

#: Where the script writes the JUnit report the built-in parser reads (also in ``$SPARRING_JUNIT``).
JUNIT_PATH = "/tmp/sparring-junit.xml"

#: The script a procedural bug uses: pytest over the oracle test files, JUnit report for the parser.
DEFAULT_TEST_SCRIPT = """#!/bin/bash
# Runs the oracle test files; the built-in parser reads the JUnit report.
cd /repo
python -m pytest -p no:cacheprovider -q -o addopts="" -o junit_family=xunit1 --junitxml="$SPARRING_JUNIT" {files}
"""

#: File names of an artifact, in the order SSR lists them; ``test_parser.py`` may be absent.
ARTIFACT_FILES = ("test_script.sh", "test_files.txt", "test_parser.py", "bug_inject.diff", "test_weaken.diff")


@dataclass
class BugArtifact:
    """An injected bug: how to run and parse the tests, the bug, and the weakening of the tests.

    Attributes:
        test_script: Contents of ``test_script.sh``.
        test_files: The oracle test files (repository-relative paths).
        bug_inject_diff: Unified diff introducing the bug (non-test files only).
        test_weaken_diff: Unified diff over test files that hides the bug.
        test_parser: Contents of ``test_parser.py``, or None for the built-in JUnit parser.
        repo: Catalog name of the repository the bug lives in.
        version: Release of the repository (its image tag).
        order: 1 for an injected bug, 2+ for a bug state left by a failed repair (higher-order).
        origin: How it was made: ``"procedural:<operator>"``, ``"agent:<strategy>"``, ``"order2"``.
        meta: Anything else worth keeping (the mutation, the parent bug's id, ...).
    """

    test_script: str
    test_files: list[str]
    bug_inject_diff: str
    test_weaken_diff: str
    test_parser: str | None = None
    repo: str = ""
    version: str = ""
    order: int = 1
    origin: str = ""
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def bug_id(self) -> str:
        """A stable id: repository, version and a hash of the five files."""
        digest = hashlib.sha256(json.dumps(self.files(), sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.repo or 'repo'}-{self.version or 'v'}-{digest}"

    def files(self) -> dict[str, str]:
        """The artifact as its files, name -> text (``test_parser.py`` only when given)."""
        files = {
            "test_script.sh": self.test_script,
            "test_files.txt": "".join(f"{p}\n" for p in self.test_files),
            "bug_inject.diff": self.bug_inject_diff,
            "test_weaken.diff": self.test_weaken_diff,
        }
        if self.test_parser is not None:
            files["test_parser.py"] = self.test_parser
        return files

    @classmethod
    def from_files(cls, files: dict[str, str], **extra: Any) -> BugArtifact:
        """Build from file name -> text; raises ValueError naming a missing required file."""
        missing = [n for n in ARTIFACT_FILES if n != "test_parser.py" and n not in files]
        if missing:
            raise ValueError(f"the bug artifact lacks {', '.join(missing)}")
        parser = files.get("test_parser.py")
        return cls(
            test_script=files["test_script.sh"],
            test_files=parse_test_files(files["test_files.txt"]),
            bug_inject_diff=files["bug_inject.diff"],
            test_weaken_diff=files["test_weaken.diff"],
            test_parser=parser if parser and parser.strip() else None,
            **extra,
        )

    def save(self, folder: Path) -> Path:
        """Write the files plus ``artifact.json`` (metadata) into ``folder``; returns it."""
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in self.files().items():
            (folder / name).write_text(text)
        (folder / "artifact.json").write_text(json.dumps(self.to_dict(), indent=1))
        return folder

    @classmethod
    def load(cls, folder: Path) -> BugArtifact:
        """Inverse of :meth:`save`."""
        return cls.from_dict(json.loads((folder / "artifact.json").read_text()))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BugArtifact:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def parse_test_files(text: str) -> list[str]:
    """Paths of ``test_files.txt``: one per line, blank lines and ``#`` comments ignored, ``./`` stripped."""
    paths: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            line = line.removeprefix("./")
            if line not in paths:
                paths.append(line)
    return paths


# --------------------------------------------------------------------------- diffs

_HEADER_RE = re.compile(r"^(---|\+\+\+) (?:[ab]/)?(\S+)")
_HUNK_RE = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")


def file_diff(path: str, old: str, new: str) -> str:
    """Unified diff of one file (``a/path`` -> ``b/path``), as ``git apply`` takes it; "" if equal."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=3
    )
    out = []
    for line in lines:
        out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def split_diff(diff: str) -> dict[str, str]:
    """The per-file parts of a unified diff, by the path they change (``/dev/null`` sides ignored).

    Hunk line counts are followed, so a removed line that reads ``-- x`` is not taken for a header.
    """
    parts: dict[str, list[str]] = {}
    lines = diff.splitlines(keepends=True)
    preamble: list[str] = []
    current: list[str] | None = None
    old_left = new_left = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        in_hunk = old_left > 0 or new_left > 0
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if not in_hunk and line.startswith("--- ") and nxt.startswith("+++ "):
            old_path, new_path = _header_path(line), _header_path(nxt)
            path = new_path if new_path != "/dev/null" else old_path
            current = parts.setdefault(path, [])
            current.extend(preamble + [line, nxt])
            preamble = []
            i += 2
            continue
        m = _HUNK_RE.match(line.rstrip("\n"))
        if m and not in_hunk:
            old_left, new_left = _count(m.group(1)), _count(m.group(2))
        elif in_hunk and line[:1] in "-+ \n":
            old_left -= line[:1] in "- \n"
            new_left -= line[:1] in "+ \n"
        if current is not None and (in_hunk or m or line.startswith("\\")):
            current.append(line)
        elif line.startswith(("diff --git", "index ", "new file", "deleted file")):
            preamble.append(line)
        i += 1
    return {p: "".join(ls) for p, ls in parts.items()}


def _header_path(line: str) -> str:
    m = _HEADER_RE.match(line)
    return m.group(2) if m else "?"


def _count(span: str) -> int:
    return int(span.split(",")[1]) if "," in span else 1


def diff_files(diff: str) -> list[str]:
    """The files a unified diff changes, in order."""
    return list(split_diff(diff))


def reverse_diff(diff: str) -> str:
    """The diff that undoes ``diff``: old/new headers, hunk ranges and +/- lines swapped.

    Hunk line counts are followed, as in :func:`split_diff`: inside a hunk a removed ``-- x`` line
    reads ``--- x`` and an added ``++ y`` line reads ``+++ y``, which are content, not file headers.
    """
    out: list[str] = []
    lines = diff.splitlines(keepends=True)
    old_left = new_left = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        in_hunk = old_left > 0 or new_left > 0
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if not in_hunk and line.startswith("--- ") and nxt.startswith("+++ "):
            out.append("--- " + _swap_prefix(nxt[4:], "b/", "a/"))
            out.append("+++ " + _swap_prefix(line[4:], "a/", "b/"))
            i += 2
            continue
        m = None if in_hunk else _HUNK_RE.match(line.rstrip("\n"))
        if m:
            old_left, new_left = _count(m.group(1)), _count(m.group(2))
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}\n")
        elif line.startswith("+"):
            new_left -= in_hunk
            out.append("-" + line[1:])
        elif line.startswith("-"):
            old_left -= in_hunk
            out.append("+" + line[1:])
        elif in_hunk and line[:1] in " \n":
            old_left, new_left = old_left - 1, new_left - 1
            out.append(line)
        elif line.startswith("new file mode"):
            out.append(line.replace("new file mode", "deleted file mode"))
        elif line.startswith("deleted file mode"):
            out.append(line.replace("deleted file mode", "new file mode"))
        else:
            out.append(line)
        i += 1
    return "".join(out)


def _swap_prefix(path: str, old: str, new: str) -> str:
    return new + path[len(old) :] if path.startswith(old) else path
