"""Debian's dictd databases as corpus documents.

Each dictd database is a pair: ``NAME.index`` (one line per headword: ``headword<TAB>offset<TAB>
size``, the numbers in dictd's base-64 alphabet) and ``NAME.dict.dz`` (dictzip, which the
``gzip`` module reads as plain gzip). Several headwords may point at one entry (GCIDE lists
inflections and run-on phrases), so an entry is keyed by its (offset, size) and becomes one
document whose title is the headword the entry itself begins with.

The packages come from Debian with ``apt-get download`` and ``dpkg -x``, neither of which needs
root, and are cached under ``sparring_home()/dictd``.

Cross-references such as FOLDOC's ``{term}`` stay in the text as the plain term and are listed,
in order, in the document's ``links``. A reference that the database wrapped onto a second line
(WordNet's ``{doze\n         off}``, a third of its synonym lists' references) is one term too: its
line break becomes a space, or nothing after a hyphen (``{slate-\n colored junco}`` is
``slate-colored junco``), so no brace or line break reaches a title, a link or an accepted answer.
"""

from __future__ import annotations

import gzip
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sparring import SparringError, sparring_home

__all__ = ["DICTD_PACKAGES", "DictEntry", "decode_offset", "fetch_databases", "read_database"]

#: Database name -> Debian package that ships it. The first five make up the default corpus's
#: required sources; the others are small and add variety.
DICTD_PACKAGES: dict[str, str] = {
    "foldoc": "dict-foldoc",
    "jargon": "dict-jargon",
    "gcide": "dict-gcide",
    "wn": "dict-wn",
    "elements": "dict-elements",
    "vera": "dict-vera",
    "devil": "dict-devil",
}

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64)}
#: What may be a reference: text in braces (see :func:`_reference`).
_BRACES_RE = re.compile(r"\{([^{}]{1,100})\}")
_WRAP_RE = re.compile(r"(-?)\n[ \t]*")
_MAX_LINK_CHARS = 80
_SPACES_RE = re.compile(r"[ \t]+")


@dataclass
class DictEntry:
    """One dictd entry: every headword that points at it, its title, text and cross-references."""

    source: str
    headwords: list[str]
    title: str
    text: str
    links: list[str] = field(default_factory=list)


def decode_offset(value: str) -> int:
    """Decode a number of a dictd index (base 64, most significant digit first).

    Example:
        >>> decode_offset("Gb9L")
        1732427
    """
    n = 0
    for char in value:
        n = n * 64 + _B64_VALUE[char]
    return n


def _debs_dir() -> Path:
    path = sparring_home() / "dictd"
    path.mkdir(parents=True, exist_ok=True)
    return path


def fetch_databases(names: list[str], cache_dir: Path | None = None) -> dict[str, Path]:
    """Download and unpack the Debian packages of ``names``; return each database's folder.

    Already unpacked databases are reused, so a second call does no network access.

    Raises:
        SparringError: a name is unknown, or apt-get/dpkg are missing or fail.
    """
    cache = cache_dir or _debs_dir()
    tree = cache / "root"
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        if name not in DICTD_PACKAGES:
            raise SparringError(f"unknown dictd database {name!r}; known: {', '.join(DICTD_PACKAGES)}.")
        folder = tree / "usr/share/dictd"
        if (folder / f"{name}.index").is_file() and (folder / f"{name}.dict.dz").is_file():
            found[name] = folder
        else:
            missing.append(name)
    if not missing:
        return found
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            raise SparringError(
                f"`{tool}` is not available to fetch the dictd packages; build the corpus on a Debian or "
                "Ubuntu machine, or use `sparring corpus build --source FILE.jsonl`."
            )
    packages = [DICTD_PACKAGES[n] for n in missing]
    run = subprocess.run(["apt-get", "download", *packages], cwd=cache, capture_output=True, text=True)
    if run.returncode != 0 and os.geteuid() == 0:  # a fresh machine may have no package lists yet
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, text=True)
        run = subprocess.run(["apt-get", "download", *packages], cwd=cache, capture_output=True, text=True)
    if run.returncode != 0:
        raise SparringError(
            f"`apt-get download {' '.join(packages)}` failed ({run.stderr.strip()[-300:]}); "
            "run `apt-get update` (as root) and retry."
        )
    for name, package in zip(missing, packages, strict=True):
        debs = sorted(cache.glob(f"{package}_*.deb"))
        if not debs:
            raise SparringError(f"apt-get left no .deb for {package} in {cache}; retry the corpus build.")
        subprocess.run(["dpkg", "-x", str(debs[-1]), str(tree)], check=True, capture_output=True)
        found[name] = tree / "usr/share/dictd"
    return found


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # the Elements database is Latin-1
        return raw.decode("latin-1")


def _clean(text: str) -> str:
    lines = [_SPACES_RE.sub(" ", line).strip() for line in text.replace("\r", "").splitlines()]
    out: list[str] = []
    for line in lines:
        if line or (out and out[-1]):
            out.append(line)
    return "\n".join(out).strip()


def _reference(inside: str) -> str | None:
    """The term of a ``{...}`` reference on one line, or None when the braces hold no reference.

    A reference is on one line or wrapped onto a second (the Jargon File's ``{\\n    worm}``
    included): a wrapped line break is a space, or nothing after a hyphen. Braces around more
    lines, or around more than :data:`_MAX_LINK_CHARS` characters, are code, not a reference.
    """
    if inside.count("\n") > 1:
        return None
    term = _SPACES_RE.sub(" ", _WRAP_RE.sub(lambda m: "-" if m.group(1) else " ", inside.strip())).strip()
    return term if 0 < len(term) <= _MAX_LINK_CHARS else None


def _title(headwords: list[str], text: str) -> str:
    """The headword the entry starts with, in the entry's own spelling."""
    first = next((line for line in text.splitlines() if line.strip()), "").strip()
    lowered = first.lower()
    best: tuple[int, int, str] | None = None
    for word in headwords:
        pos = lowered.find(word.lower())
        if pos >= 0 and (best is None or (pos, -len(word)) < (best[0], best[1])):
            best = (pos, -len(word), first[pos : pos + len(word)])
    return best[2] if best else headwords[0]


def read_database(folder: Path, name: str) -> Iterator[DictEntry]:
    """Yield the entries of database ``name`` in ``folder`` in index order, one per entry.

    Raises:
        SparringError: the index is malformed (the message names the file and line).
    """
    index_path = folder / f"{name}.index"
    with gzip.open(folder / f"{name}.dict.dz") as fh:
        data = fh.read()
    groups: dict[tuple[int, int], list[str]] = {}
    with open(index_path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3:
                raise SparringError(f"{index_path}:{lineno}: a dictd index line needs 3 tab-separated fields.")
            word = parts[0]
            if word.startswith("00-database") or word.startswith("00database"):
                continue
            try:
                key = (decode_offset(parts[1]), decode_offset(parts[2]))
            except KeyError:
                raise SparringError(f"{index_path}:{lineno}: offset or size is not dictd base 64.") from None
            groups.setdefault(key, []).append(word)
    for (offset, size), words in groups.items():
        raw = _decode(data[offset : offset + size])
        terms = [_reference(m) for m in _BRACES_RE.findall(raw)]
        links = list(dict.fromkeys(term for term in terms if term))
        text = _clean(_BRACES_RE.sub(lambda m: _reference(m.group(1)) or m.group(0), raw))
        if not text:
            continue
        yield DictEntry(source=name, headwords=words, title=_title(words, text), text=text, links=links)
