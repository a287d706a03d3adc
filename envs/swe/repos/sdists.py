"""Source distributions from PyPI: download cache, release dates, and what an sdist contains.

Sdists are downloaded once with ``pip download --no-binary :all: --no-deps`` into
``sparring_home()/sdists/NAME``; release dates come from PyPI's JSON API (offline: the newest
file time in the archive). :func:`inspect_sdist` tells whether an sdist ships tests, whether it is
pure Python, its layout and its test requirements.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath
from typing import Any

from sparring import SparringError, sparring_home

__all__ = [
    "GENERATED",
    "PYPI_JSON_URL",
    "SdistInfo",
    "SdistRelease",
    "canonical_name",
    "download_sdist",
    "fetch_releases",
    "inspect_sdist",
    "latest_versions",
]

#: PyPI's JSON API, used only for release dates and version lists (downloads go through pip).
PYPI_JSON_URL = "https://pypi.org/pypi"

#: Files in an sdist that are packaging output, not the project's source; never committed.
GENERATED = re.compile(r"(^|/)(PKG-INFO|[^/]+\.egg-info(/.*)?|__pycache__(/.*)?|[^/]+\.py[co])$")


def canonical_name(name: str) -> str:
    """PyPI's normalised project name (``Python_Slugify`` -> ``python-slugify``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class SdistRelease:
    """One downloaded release.

    Attributes:
        version: The release's version string.
        path: The cached source distribution.
        date: When the release was uploaded (UTC, ISO 8601).
    """

    version: str
    path: Path
    date: str


def _sdist_dir(name: str) -> Path:
    path = sparring_home() / "sdists" / canonical_name(name)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _pypi_json(name: str, version: str | None = None) -> dict[str, Any] | None:
    import httpx

    url = f"{PYPI_JSON_URL}/{name}/json" if version is None else f"{PYPI_JSON_URL}/{name}/{version}/json"
    try:
        response = httpx.get(url, timeout=30.0, follow_redirects=True)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    data: dict[str, Any] = response.json()
    return data


def latest_versions(name: str, count: int = 3) -> list[str]:
    """The newest COUNT final releases of NAME that have a source distribution, oldest first."""
    from packaging.version import InvalidVersion, Version

    data = _pypi_json(name)
    if data is None:
        raise SparringError(f"could not list the releases of {name!r} on PyPI; check the name or pass --versions.")
    found = []
    for text, files in data.get("releases", {}).items():
        try:
            parsed = Version(text)
        except InvalidVersion:
            continue
        if parsed.is_prerelease or parsed.is_devrelease:
            continue
        if any(f.get("packagetype") == "sdist" and not f.get("yanked") for f in files):
            found.append((parsed, text))
    found.sort()
    if len(found) < count:
        raise SparringError(
            f"{name} has {len(found)} release(s) with a source distribution; at least {count} are needed."
        )
    return [text for _, text in found[-count:]]


def _find_sdist(folder: Path, name: str, version: str) -> Path | None:
    from packaging.utils import InvalidSdistFilename, canonicalize_name, parse_sdist_filename
    from packaging.version import Version

    for path in folder.iterdir():
        try:
            sdist_name, sdist_version = parse_sdist_filename(path.name)
        except InvalidSdistFilename:
            continue
        if canonicalize_name(sdist_name) == canonicalize_name(name) and sdist_version == Version(version):
            return path
    return None


def download_sdist(name: str, version: str) -> Path:
    """The cached sdist of NAME==VERSION, downloaded with pip the first time."""
    folder = _sdist_dir(name)
    found = _find_sdist(folder, name, version)
    if found is not None:
        return found
    cmd = [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "--quiet"]
    cmd += ["--dest", str(folder), f"{name}=={version}"]
    # pip prepares the sdist's metadata; with the host's build backend that takes a third of the
    # time of an isolated build environment, which is the fallback for other backends.
    proc = subprocess.run([*cmd, "--no-build-isolation"], capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    found = _find_sdist(folder, name, version)
    if proc.returncode != 0 or found is None:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SparringError(
            f"could not download the source distribution of {name}=={version} ({last}); check the name and version."
        )
    return found


def _release_date(name: str, version: str, sdist: Path) -> str:
    data = _pypi_json(name, version)
    for f in (data or {}).get("urls", []):
        if f.get("packagetype") == "sdist" and f.get("upload_time_iso_8601"):
            return str(f["upload_time_iso_8601"]).replace("Z", "+00:00")
    # Offline: the newest file time inside the archive is when the sdist was made.
    newest = max((mtime for _, mtime, _ in _archive_members(sdist)), default=0.0)
    return datetime.fromtimestamp(newest, tz=timezone.utc).isoformat()


def fetch_releases(name: str, versions: Sequence[str], progress: Any = None) -> list[SdistRelease]:
    """Download (once) the sdists of VERSIONS of NAME and find their release dates.

    Args:
        name: PyPI project name.
        versions: Releases, oldest first.
        progress: Optional callable ``progress(version)`` called after each release.
    """
    from concurrent.futures import ThreadPoolExecutor

    folder = _sdist_dir(name)
    dates_file = folder / "releases.json"
    dates: dict[str, str] = json.loads(dates_file.read_text()) if dates_file.exists() else {}

    def fetch(version: str) -> tuple[Path, str]:
        path = download_sdist(name, version)
        date = dates.get(version) or _release_date(name, version, path)
        if progress is not None:
            progress(version)
        return path, date

    # pip spends most of a download preparing metadata; a few at once keep the network busy.
    with ThreadPoolExecutor(max_workers=4) as pool:
        fetched = list(pool.map(fetch, versions))
    releases = [SdistRelease(version=v, path=p, date=d) for v, (p, d) in zip(versions, fetched, strict=True)]
    dates.update({r.version: r.date for r in releases})
    dates_file.write_text(json.dumps(dates, indent=1, sort_keys=True))
    return releases


def _archive_members(path: Path) -> Iterable[tuple[str, float, bytes | None]]:
    """(relative path without the top folder, mtime, content or None for non-files) of an sdist."""
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                rel = "/".join(info.filename.split("/")[1:])
                if rel and not info.is_dir():
                    yield rel, datetime(*info.date_time, tzinfo=timezone.utc).timestamp(), zf.read(info)
        return
    with tarfile.open(path) as tf:
        for member in tf.getmembers():
            rel = "/".join(member.name.split("/")[1:])
            if not rel or not member.isfile():
                continue
            handle = tf.extractfile(member)
            yield rel, float(member.mtime), handle.read() if handle else None


@dataclass(frozen=True)
class SdistInfo:
    """What an sdist contains, as far as the catalog cares.

    Attributes:
        files: Every regular file, relative to the project root.
        test_files: Python files that look like tests (``test_*.py``, ``*_test.py``, under ``tests/``).
        extension_files: C, C++, Cython or Rust sources: the project is not pure Python.
        source_dir: ``"src"`` for a src layout, else ``"."``.
        test_dir: The most likely test folder (or single test file), or None.
        requires: ``Requires-Dist`` entries for running the package and its tests.
    """

    files: tuple[str, ...]
    test_files: tuple[str, ...]
    extension_files: tuple[str, ...]
    source_dir: str
    test_dir: str | None
    requires: tuple[str, ...] = field(default=())


TEST_FILE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|tests?)\.py$|(^|/)tests?/[^/]+\.py$")
_EXTENSION = re.compile(r"\.(c|cc|cpp|cxx|h|pyx|pxd|rs|f90|go)$")
_TEST_EXTRAS = {"test", "tests", "testing"}
_SKIP_REQS = re.compile(r"^(pytest|pytest-cov|coverage|pytest-xdist|pytest-benchmark|pytest-codspeed|tox)\b", re.I)


def inspect_sdist(path: Path) -> SdistInfo:
    """Look inside an sdist: tests, extension sources, layout and test requirements."""
    files, pkg_info = [], ""
    for rel, _, data in _archive_members(path):
        files.append(rel)
        if rel == "PKG-INFO" and data is not None:
            pkg_info = data.decode("utf-8", "replace")
    sources = [f for f in files if not GENERATED.search(f)]
    tests = sorted(f for f in sources if f.endswith(".py") and TEST_FILE.search(f))
    extensions = sorted(f for f in sources if _EXTENSION.search(f) and not f.startswith(("docs/", "doc/")))
    source_dir = "src" if any(f.startswith("src/") and f.endswith(".py") for f in sources) else "."
    test_dir = None
    if tests:
        folders = sorted({str(PurePosixPath(t).parent) for t in tests}, key=lambda d: (d.count("/"), d))
        named = [d for d in folders if PurePosixPath(d).name in ("tests", "test")]
        test_dir = named[0] if named else (tests[0] if folders == ["."] and len(tests) == 1 else folders[0])
    requires = []
    for req in HeaderParser().parsestr(pkg_info).get_all("Requires-Dist") or []:
        marker = req.split(";", 1)[1] if ";" in req else ""
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        if (extra is None or extra.group(1) in _TEST_EXTRAS) and not _SKIP_REQS.match(req.strip()):
            requires.append(re.sub(r"\s*(;|\band\b)\s*extra\s*==\s*['\"][^'\"]+['\"]", "", req).strip().rstrip(";"))
    return SdistInfo(
        files=tuple(sorted(files)),
        test_files=tuple(tests),
        extension_files=tuple(extensions),
        source_dir=source_dir,
        test_dir=test_dir,
        requires=tuple(requires),
    )
