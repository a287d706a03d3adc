"""The repository catalog and the real git histories built from PyPI releases.

A catalog entry (:class:`RepoSpec`) names a pure-Python project and at least three consecutive
releases. :func:`fetch_releases` downloads their source distributions once into
``sparring_home()/sdists/NAME`` (``pip download --no-binary :all: --no-deps``) and looks up each
release's date; :func:`build_history` commits the releases in order into one git repository (one
commit per release, dated with the release, tagged ``v<version>``), so the working tree ends at
the newest release and ``git log -p`` shows the project's real changes, which history-aware bug
injection reverts.

Example::

    spec = get_repo("inflection")
    releases = fetch_releases(spec)
    history = build_history(spec, releases, sparring_home() / "repos" / spec.name / "git")
    history.commits[-1].tag  # "v0.5.1"
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from email.parser import HeaderParser
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from sparring import SparringError, sparring_home

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "PYPI_JSON_URL",
    "SPLITS",
    "RepoHistory",
    "ReleaseCommit",
    "RepoSpec",
    "SdistInfo",
    "SdistRelease",
    "build_history",
    "catalog_path",
    "fetch_releases",
    "get_repo",
    "inspect_sdist",
    "latest_versions",
    "load_catalog",
    "save_user_repo",
    "user_catalog_path",
]

#: The splits a repository can belong to.
SPLITS = ("train", "heldout")

#: PyPI's JSON API, used only for release dates and version lists (downloads go through pip).
PYPI_JSON_URL = "https://pypi.org/pypi"

#: Files in an sdist that are packaging output, not the project's source; never committed.
_GENERATED = re.compile(r"(^|/)(PKG-INFO|[^/]+\.egg-info(/.*)?|__pycache__(/.*)?|[^/]+\.py[co])$")

#: Author of the release commits (the releases are the maintainers' work; the importer only orders them).
_COMMITTER = ("Sparring release importer", "releases@sparring.invalid")


@dataclass(frozen=True)
class RepoSpec:
    """One project of the catalog.

    Attributes:
        name: PyPI project name; also the image name ``sparring-repo/<name>``.
        versions: Consecutive releases, oldest first (at least 3); the image is tagged with the last.
        split: ``"train"`` or ``"heldout"`` (split by repository).
        source_dir: Folder holding the import package, relative to the repository root; on PYTHONPATH.
        test_dir: Folder (or single file) holding the test suite.
        test_command: The pytest command that runs the whole suite from the repository root.
        deps: Requirements of the package and its tests besides pytest, installed from wheels.
        flaky: Test ids known to be flaky or to need what the sandbox lacks; always excluded.
        origin: ``"catalog"`` for the packaged catalog, ``"user"`` for ``sparring repos add``.
    """

    name: str
    versions: tuple[str, ...]
    split: str = "train"
    source_dir: str = "."
    test_dir: str = "tests"
    test_command: str = "pytest tests"
    deps: tuple[str, ...] = ()
    flaky: tuple[str, ...] = ()
    origin: str = "catalog"

    @property
    def version(self) -> str:
        """The newest release: the state of the working tree and the image tag."""
        return self.versions[-1]

    @property
    def image(self) -> str:
        """The Docker image holding this repository."""
        return f"sparring-repo/{self.name}:{self.version}"

    @classmethod
    def from_toml(cls, name: str, table: dict[str, Any], origin: str = "catalog") -> RepoSpec:
        """Build a spec from one ``[repos.NAME]`` table, checking every field."""
        known = {"split", "versions", "source_dir", "test_dir", "test_command", "deps", "flaky"}
        unknown = set(table) - known
        where = f"repos.{name} in the {origin} catalog"
        if unknown:
            raise SparringError(f"{where} has unknown field(s) {sorted(unknown)}; the fields are {sorted(known)}.")
        versions = tuple(str(v) for v in table.get("versions", ()))
        if len(versions) < 3 or len(set(versions)) != len(versions):
            raise SparringError(f"{where} needs at least 3 distinct consecutive versions, oldest first.")
        split = table.get("split", "train")
        if split not in SPLITS:
            raise SparringError(f"{where} has split {split!r}; use one of {', '.join(SPLITS)}.")
        command = str(table.get("test_command", "pytest tests"))
        if command.split()[:1] != ["pytest"]:
            raise SparringError(f"{where}: test_command must start with `pytest` (got {command!r}).")
        for key in ("source_dir", "test_dir"):
            value = str(table.get(key, "."))
            if PurePosixPath(value).is_absolute() or ".." in PurePosixPath(value).parts:
                raise SparringError(f"{where}: {key} must be a path inside the repository (got {value!r}).")
        return cls(
            name=name,
            versions=versions,
            split=split,
            source_dir=str(table.get("source_dir", ".")),
            test_dir=str(table.get("test_dir", "tests")),
            test_command=command,
            deps=tuple(str(d) for d in table.get("deps", ())),
            flaky=tuple(str(t) for t in table.get("flaky", ())),
            origin=origin,
        )

    def to_toml(self) -> str:
        """The ``[repos.NAME]`` table for this spec, in the catalog's format."""

        def value(v: Any) -> str:
            if isinstance(v, (tuple, list)):
                return "[" + ", ".join(json.dumps(x) for x in v) + "]"
            return json.dumps(v)

        lines = [f'[repos."{self.name}"]']
        for key in ("split", "versions", "source_dir", "test_dir", "test_command", "deps", "flaky"):
            v = getattr(self, key)
            if v or key in ("versions", "split"):
                lines.append(f"{key} = {value(v)}")
        return "\n".join(lines) + "\n"


def catalog_path() -> Path:
    """The packaged catalog, ``containers/repos.toml``."""
    return Path(str(resources.files("sparring.containers").joinpath("repos.toml")))


def user_catalog_path() -> Path:
    """Projects a user added with ``sparring repos add``: ``sparring_home()/repos.toml``."""
    return sparring_home() / "repos.toml"


def _read_catalog(path: Path, origin: str) -> dict[str, RepoSpec]:
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise SparringError(f"the {origin} catalog {path} is not valid TOML ({e}); fix or remove it.") from None
    return {name: RepoSpec.from_toml(name, table, origin) for name, table in data.get("repos", {}).items()}


def load_catalog(split: str = "all", include_user: bool = True) -> dict[str, RepoSpec]:
    """The catalog: packaged projects, then the user's (a user entry replaces a packaged one).

    Args:
        split: ``"train"``, ``"heldout"`` or ``"all"``.
        include_user: Whether to include projects added with ``sparring repos add``.
    """
    if split not in (*SPLITS, "all"):
        raise SparringError(f"unknown split {split!r}; use train, heldout or all.")
    specs = _read_catalog(catalog_path(), "catalog")
    if include_user:
        specs.update(_read_catalog(user_catalog_path(), "user"))
    return {name: s for name, s in specs.items() if split == "all" or s.split == split}


def get_repo(name: str) -> RepoSpec:
    """The catalog entry called NAME (PyPI names compare case- and separator-insensitively)."""
    specs = load_catalog()
    key = _canonical(name)
    for spec_name, spec in specs.items():
        if _canonical(spec_name) == key:
            return spec
    raise SparringError(
        f"no repository {name!r} in the catalog; `sparring repos list` shows them, "
        f"`sparring repos add {name}` adds one."
    )


def save_user_repo(spec: RepoSpec) -> Path:
    """Add or replace SPEC in the user catalog; other user entries are kept as they were."""
    path = user_catalog_path()
    specs = _read_catalog(path, "user")
    specs[spec.name] = spec
    text = "# Projects added with `sparring repos add`; same format as the packaged containers/repos.toml.\n\n"
    text += "\n".join(s.to_toml() for s in specs.values())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return path


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


# ---------------------------------------------------------------------------------------- sdists


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
    path = sparring_home() / "sdists" / _canonical(name)
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


def _download_sdist(name: str, version: str, folder: Path) -> Path:
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


def fetch_releases(spec: RepoSpec, progress: Any = None) -> list[SdistRelease]:
    """Download (once) the sdists of every version of SPEC and find their release dates.

    Args:
        spec: The project.
        progress: Optional callable ``progress(version)`` called after each release.
    """
    from concurrent.futures import ThreadPoolExecutor

    folder = _sdist_dir(spec.name)
    dates_file = folder / "releases.json"
    dates: dict[str, str] = json.loads(dates_file.read_text()) if dates_file.exists() else {}

    def fetch(version: str) -> tuple[Path, str]:
        path = _download_sdist(spec.name, version, folder)
        date = dates.get(version) or _release_date(spec.name, version, path)
        if progress is not None:
            progress(version)
        return path, date

    # pip spends most of a download preparing metadata; a few at once keep the network busy.
    with ThreadPoolExecutor(max_workers=4) as pool:
        fetched = list(pool.map(fetch, spec.versions))
    releases = [SdistRelease(version=v, path=p, date=d) for v, (p, d) in zip(spec.versions, fetched, strict=True)]
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


_TEST_FILE = re.compile(r"(^|/)(test_[^/]*|[^/]*_test|tests?)\.py$|(^|/)tests?/[^/]+\.py$")
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
    sources = [f for f in files if not _GENERATED.search(f)]
    tests = sorted(f for f in sources if f.endswith(".py") and _TEST_FILE.search(f))
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


# --------------------------------------------------------------------------------------- history


@dataclass(frozen=True)
class ReleaseCommit:
    """One release in the history.

    Attributes:
        version: The release.
        sha: The commit.
        tag: The tag pointing at it (``v<version>``).
        date: The release date (ISO 8601), used as author and committer date.
        files_changed: Files added, changed or removed relative to the previous release.
    """

    version: str
    sha: str
    tag: str
    date: str
    files_changed: int


@dataclass(frozen=True)
class RepoHistory:
    """A built repository: where it is and its release commits, oldest first."""

    path: Path
    commits: tuple[ReleaseCommit, ...]

    @property
    def head(self) -> str:
        """The newest release's commit."""
        return self.commits[-1].sha

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (for manifests)."""
        return {"path": str(self.path), "commits": [asdict(c) for c in self.commits]}


def _clear_worktree(root: Path) -> None:
    for child in root.iterdir():
        if child.name == ".git":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def _unpack(sdist: Path, root: Path) -> None:
    """Write the sdist's source files into ROOT, without its top folder and packaging output."""
    with tempfile.TemporaryDirectory() as tmp:
        if sdist.suffix == ".zip":
            with zipfile.ZipFile(sdist) as zf:
                zf.extractall(tmp)
        else:
            with tarfile.open(sdist) as tf:
                tf.extractall(tmp, filter="data")
        tops = [p for p in Path(tmp).iterdir()]
        top = tops[0] if len(tops) == 1 and tops[0].is_dir() else Path(tmp)
        for src in sorted(top.rglob("*")):
            rel = src.relative_to(top).as_posix()
            if src.is_dir() or _GENERATED.search(rel) or src.is_symlink():
                continue
            dest = root / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest)


def build_history(spec: RepoSpec, releases: list[SdistRelease], dest: Path) -> RepoHistory:
    """Commit RELEASES in order into a fresh git repository at DEST.

    Each release is one commit on ``main`` whose author and committer date is the release date,
    tagged ``v<version>``; the working tree ends at the newest release. Files the project's own
    ``.gitignore`` names are committed too (the release shipped them). The result is deterministic:
    the same releases give the same commit ids.

    Raises:
        SparringError: A release has no files, or the newest lacks the catalog's test_dir.
    """
    import git

    if [r.version for r in releases] != list(spec.versions):
        raise SparringError(f"releases of {spec.name} do not match the catalog's versions {list(spec.versions)}.")
    tmp = dest.with_name(dest.name + ".building")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    repo = git.Repo.init(tmp, initial_branch="main")
    with repo.config_writer() as cfg:
        cfg.set_value("core", "autocrlf", "false")
        cfg.set_value("user", "name", _COMMITTER[0])
        cfg.set_value("user", "email", _COMMITTER[1])
    # Byte-code, caches and tool state made by test runs never show up as changes.
    (tmp / ".git" / "info").mkdir(exist_ok=True)
    (tmp / ".git" / "info" / "exclude").write_text("__pycache__/\n*.py[co]\n.pytest_cache/\n.hypothesis/\n")
    commits: list[ReleaseCommit] = []
    for release in releases:
        _clear_worktree(tmp)
        _unpack(release.path, tmp)
        if not any(p.is_file() for p in tmp.iterdir() if p.name != ".git"):
            raise SparringError(f"the sdist of {spec.name} {release.version} has no files.")
        repo.git.add("--all", "--force", ".")
        changed = (
            len(repo.git.diff("--cached", "--name-only").splitlines())
            if commits
            else len(repo.git.ls_files("--cached").splitlines())
        )
        env = {
            "GIT_AUTHOR_DATE": release.date,
            "GIT_COMMITTER_DATE": release.date,
            "GIT_AUTHOR_NAME": _COMMITTER[0],
            "GIT_AUTHOR_EMAIL": _COMMITTER[1],
            "GIT_COMMITTER_NAME": _COMMITTER[0],
            "GIT_COMMITTER_EMAIL": _COMMITTER[1],
        }
        with repo.git.custom_environment(**env):
            repo.git.commit(
                "--allow-empty",
                "--no-verify",
                "-q",
                "-m",
                f"{spec.name} {release.version}\n\nRelease {release.version} as published on PyPI.",
            )
            repo.git.tag("-a", f"v{release.version}", "-m", f"{spec.name} {release.version}")
        commits.append(
            ReleaseCommit(
                version=release.version,
                sha=repo.head.commit.hexsha,
                tag=f"v{release.version}",
                date=release.date,
                files_changed=changed,
            )
        )
    repo.close()
    newest_test = tmp / spec.test_dir
    if not newest_test.exists():
        shutil.rmtree(tmp, ignore_errors=True)
        raise SparringError(
            f"{spec.name} {spec.version} has no {spec.test_dir!r} in its sdist; "
            "set test_dir to the folder holding its tests."
        )
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return RepoHistory(path=dest, commits=tuple(commits))
