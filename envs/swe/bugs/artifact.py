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
    "diff_problem",
    "file_diff",
    "reverse_diff",
    "shown_diff",
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
#: A file header as ``git diff``, ``diff -u`` and difflib write it: a path, at most a timestamp after a tab.
_STRICT_HEADER = re.compile(r"^(?:---|\+\+\+) (\S+)(?:\t\d{4}-\d\d-\d\d[\d :.+-]*)?$")
_GIT_HEADER = re.compile(r"^diff --git (\S+) (\S+)$")
#: What ``git diff`` writes between its ``diff --git`` line and the file header (no rename, copy or binary).
_GIT_EXTENDED = re.compile(
    r"^(?:index [0-9a-f]+\.\.[0-9a-f]+(?: [0-7]{6})?|(?:new|deleted) file mode [0-7]{6}|(?:old|new) mode [0-7]{6})$"
)
_NO_NEWLINE = "\\ No newline at end of file"


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
    """The diff that undoes ``diff``: old/new headers, hunk ranges and +/- lines swapped, any other text left out.

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
        elif line.startswith("\\") or _GIT_HEADER.match(line.rstrip("\n")) or _GIT_EXTENDED.match(line.rstrip("\n")):
            out.append(line)  # what git apply skips (text around the files' parts) is left out
        i += 1
    return "".join(out)


def _swap_prefix(path: str, old: str, new: str) -> str:
    return new + path[len(old) :] if path.startswith(old) else path


# --------------------------------------------------------------------------- diffs as data

# A diff reaches agents (the repair prompt shows the reversed weakening) and consumers of the export,
# while ``git apply`` skips what lies outside a file's part (as it skips an e-mail's text) and ignores
# a hunk header's tail. So validation refuses a diff that holds anything but headers and hunks
# (:func:`diff_problem`), and what an agent is shown is rebuilt from the hunks alone (:func:`shown_diff`).


@dataclass
class _Hunk:
    old: str  # a line range as its header gives it: "start" or "start,count" (digits only)
    new: str
    lines: list[str]


@dataclass
class _FilePatch:
    old: str
    new: str
    hunks: list[_Hunk]


def _parse_patch(diff: str, strict: bool) -> list[_FilePatch]:
    """The files and hunks of a unified diff, its lines split at newlines as ``git apply`` splits them.

    Raises:
        ValueError: ``strict`` and a line is neither part of a file header (``git diff``'s extended
            lines included; no rename, copy or binary part), of a hunk with the line counts its
            header gives, nor blank: one sentence naming the line.
    """
    lines = diff.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    patches: list[_FilePatch] = []
    current: _FilePatch | None = None
    git_path: str | None = None  # the path of a ``diff --git`` line whose file header is still to come

    def refuse(at: int, why: str) -> None:
        if strict:
            raise ValueError(f"line {at + 1} ({lines[at][:60]!r}) {why}")

    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        hunk_header = _HUNK_RE.match(line)
        git_header = _GIT_HEADER.match(line)
        if line.startswith("--- ") and nxt.startswith("+++ "):
            old, new = _STRICT_HEADER.match(line), _STRICT_HEADER.match(nxt)
            current = _FilePatch(old.group(1), new.group(1), []) if old and new else None
            if current is None:
                refuse(i if old is None else i + 1, "is not a file header: a path, at most a timestamp after a tab")
                i += 1
                continue
            if git_path is not None and {_unprefixed(current.old), _unprefixed(current.new)} - {"/dev/null"} != {
                git_path
            }:
                refuse(i, f"names another file than its diff --git line ({git_path})")
            patches.append(current)
            git_path = None
            i += 2
            continue
        if hunk_header:
            if current is None:
                refuse(i, "is a hunk before any file header")
            hunk = _Hunk(hunk_header.group(1), hunk_header.group(2), [])
            old_left, new_left = _count(hunk.old), _count(hunk.new)
            i += 1
            while (old_left > 0 or new_left > 0) and i < len(lines):
                kind = lines[i][:1]  # an empty line is a context line, as git apply reads it
                if kind not in ("", " ", "-", "+") or (kind != "+" and not old_left) or (kind != "-" and not new_left):
                    break
                old_left, new_left = old_left - (kind != "+"), new_left - (kind != "-")
                hunk.lines.append(lines[i])
                i += 1
                if i < len(lines) and lines[i] == _NO_NEWLINE:
                    hunk.lines.append(lines[i])
                    i += 1
            if old_left or new_left:
                refuse(min(i, len(lines) - 1), "cuts short a hunk: its lines do not match the counts its header gives")
            elif current is not None:
                current.hunks.append(hunk)
            continue
        if git_header and _unprefixed(git_header.group(1)) == _unprefixed(git_header.group(2)):
            git_path, current = _unprefixed(git_header.group(1)), None
        elif line.strip() and not (git_path is not None and _GIT_EXTENDED.match(line)):
            refuse(i, "is neither a file header nor part of a hunk: a diff holds headers and hunks only")
        i += 1
    empty = next((p for p in patches if not p.hunks), None)
    if strict and empty is not None:
        raise ValueError(f"the file header of {_unprefixed(empty.new)} has no hunk")
    return patches


def _unprefixed(path: str) -> str:
    return path[2:] if path.startswith(("a/", "b/")) else path


def diff_problem(diff: str) -> str | None:
    """Why ``diff`` is more than file headers and hunks (one sentence), or None when it is only those.

    Example:
        >>> diff = file_diff("x.py", "a\\n", "b\\n")
        >>> diff_problem(diff) is None
        True
        >>> diff_problem("x.py is right; edit y.py.\\n" + diff)[:47]
        "line 1 ('x.py is right; edit y.py.') is neither"
    """
    try:
        _parse_patch(diff, strict=True)
    except ValueError as e:
        return str(e)
    return None


def shown_diff(diff: str, *, reverse: bool = False) -> str:
    """``diff`` (or the diff undoing it) as an agent is shown it: rebuilt from its file headers and hunks alone.

    The headers are written anew from the paths (``a/``, ``b/``), the hunk headers from their line
    ranges (no section text), and the hunks' lines are kept: nothing else of the text reaches the
    reader, so a diff that ``git apply`` took cannot carry words outside the files it changes.
    """
    out: list[str] = []
    for patch in _parse_patch(diff, strict=False):
        old, new = (patch.new, patch.old) if reverse else (patch.old, patch.new)
        out.append(f"--- {_side(old, 'a/')}\n+++ {_side(new, 'b/')}\n")
        for hunk in patch.hunks:
            old_span, new_span = (hunk.new, hunk.old) if reverse else (hunk.old, hunk.new)
            out.append(f"@@ -{old_span} +{new_span} @@\n")
            swap = {"-": "+", "+": "-"} if reverse else {}
            out += [swap.get(line[:1], line[:1]) + line[1:] + "\n" for line in hunk.lines]
    return "".join(out)


def _side(path: str, prefix: str) -> str:
    return path if path == "/dev/null" else prefix + _unprefixed(path)
