"""The repository catalog and the real git histories built from PyPI releases.

A catalog entry (:class:`RepoSpec`) names a pure-Python project and at least three consecutive
releases. :func:`sparring.envs.swe.repos.sdists.fetch_releases` downloads their source distributions
once (``pip download --no-binary :all: --no-deps``) and looks up each release's date;
:func:`build_history` commits the releases in order into one git repository (one
commit per release, dated with the release, tagged ``v<version>``), so the working tree ends at
the newest release and ``git log -p`` shows the project's real changes, which history-aware bug
injection reverts.

Example::

    spec = get_repo("inflection")
    releases = fetch_releases(spec.name, spec.versions)
    history = build_history(spec, releases, Path("/tmp/inflection"))
    history.commits[-1].tag  # "v0.5.1"
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from sparring import SparringError, sparring_home
from sparring.envs.swe.repos.sdists import (
    GENERATED,
    SdistRelease,
    canonical_name,
    download_sdist,
    inspect_sdist,
    latest_versions,
)

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

__all__ = [
    "SPLITS",
    "RepoHistory",
    "ReleaseCommit",
    "RepoSpec",
    "build_history",
    "catalog_path",
    "get_repo",
    "load_catalog",
    "propose_spec",
    "save_user_repo",
    "user_catalog_path",
]

#: The splits a repository can belong to.
SPLITS = ("train", "heldout")

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
        github: The upstream repository, ``owner/name`` on GitHub ("" when not known).
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
    github: str = ""

    @property
    def version(self) -> str:
        """The newest release: the state of the working tree and the image tag."""
        return self.versions[-1]

    @property
    def owner_name(self) -> str:
        """``owner/name`` of the upstream repository: ``github``, else ``pypi/NAME`` (the PyPI project)."""
        return self.github or f"pypi/{self.name}"

    @property
    def image(self) -> str:
        """The Docker image holding this repository."""
        return f"sparring-repo/{self.name}:{self.version}"

    @classmethod
    def from_toml(cls, name: str, table: dict[str, Any], origin: str = "catalog") -> RepoSpec:
        """Build a spec from one ``[repos.NAME]`` table, checking every field."""
        known = {"github", "split", "versions", "source_dir", "test_dir", "test_command", "deps", "flaky"}
        unknown = set(table) - known
        where = f"repos.{name} in the {origin} catalog"
        if unknown:
            raise SparringError(f"{where} has unknown field(s) {sorted(unknown)}; the fields are {sorted(known)}.")
        versions = tuple(str(v) for v in table.get("versions", ()))
        if len(versions) < 3 or len(set(versions)) != len(versions):
            raise SparringError(f"{where} needs at least 3 distinct consecutive versions, oldest first.")
        check_release_order(versions, where)
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
        github = str(table.get("github", ""))
        if github and (github.count("/") != 1 or not all(github.split("/"))):
            raise SparringError(f"{where}: github must be owner/name (got {github!r}).")
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
            github=github,
        )

    def to_toml(self) -> str:
        """The ``[repos.NAME]`` table for this spec, in the catalog's format."""

        def value(v: Any) -> str:
            if isinstance(v, (tuple, list)):
                return "[" + ", ".join(json.dumps(x) for x in v) + "]"
            return json.dumps(v)

        lines = [f'[repos."{self.name}"]']
        for key in ("github", "split", "versions", "source_dir", "test_dir", "test_command", "deps", "flaky"):
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
    key = canonical_name(name)
    for spec_name, spec in specs.items():
        if canonical_name(spec_name) == key:
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
            if src.is_dir() or GENERATED.search(rel) or src.is_symlink():
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
        if not any(p.is_file() for p in tmp.rglob("*") if ".git" not in p.relative_to(tmp).parts):
            raise SparringError(f"the sdist of {spec.name} {release.version} has no files.")
        # A fresh index: git's stat cache would take a re-created file with the same size, mtime
        # (sdists keep theirs) and a reused inode for unchanged, and drop a real change.
        (tmp / ".git" / "index").unlink(missing_ok=True)
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


# -------------------------------------------------------------------------------- user projects


def check_release_order(versions: Sequence[str], where: str) -> None:
    """Raise unless ``versions`` are valid release numbers, oldest first (each commit follows its parent).

    Raises:
        SparringError: A version that is not a release number, or one out of order.
    """
    from packaging.version import InvalidVersion, Version

    try:
        parsed = [Version(v) for v in versions]
    except InvalidVersion as e:
        raise SparringError(f"{where}: {e}; give release numbers such as 1.2.0.") from None
    for older, newer, text_old, text_new in zip(parsed, parsed[1:], versions, versions[1:], strict=False):
        if newer <= older:
            raise SparringError(
                f"{where}: {text_new} comes after {text_old} but is not newer; list the releases oldest first."
            )


def propose_spec(
    name: str,
    versions: list[str] | None = None,
    *,
    split: str = "train",
    test_command: str | None = None,
    deps: list[str] | None = None,
) -> RepoSpec:
    """A catalog entry for a project a user names, read from its sdists (nothing is built yet).

    The newest release is downloaded and inspected first, so a project without tests, or with
    compiled extensions, is refused before the older releases are fetched; then every older
    release must ship tests too (more-itertools 11.2.0, between two releases with tests, has none).

    Args:
        name: PyPI project name.
        versions: At least 3 consecutive releases, oldest first; default: the newest 3 on PyPI.
        split: ``"train"`` or ``"heldout"``.
        test_command: The suite's pytest command; default ``pytest <test dir>``.
        deps: Requirements besides pytest; default: the sdist's runtime and test requirements.

    Raises:
        SparringError: Unknown project or version, no tests in one of the sdists, not pure Python.
    """
    if split not in SPLITS:
        raise SparringError(f"unknown split {split!r}; use train or heldout.")
    versions = list(versions) if versions else latest_versions(name)
    if len(versions) < 3:
        raise SparringError(f"give at least 3 consecutive versions of {name} (got {len(versions)}).")
    check_release_order(versions, f"the versions of {name}")
    newest = download_sdist(name, versions[-1])
    info = inspect_sdist(newest)
    if not info.test_files or info.test_dir is None:
        raise SparringError(
            f"the source distribution of {name} {versions[-1]} contains no tests, so bugs in it could not be "
            "checked; choose a project whose sdist ships its test suite (a tests/ folder or test_*.py files)."
        )
    if info.extension_files:
        shown = ", ".join(info.extension_files[:3])
        raise SparringError(
            f"{name} is not pure Python (its sdist has compiled sources such as {shown}); "
            "the images install no compilers, so choose a pure-Python project."
        )
    # Every release is a state of the history that bugs may be injected into and reverted to, so
    # each must ship the suite; the sdists are cached, so the build does not download them again.
    untested = [v for v in versions[:-1] if not inspect_sdist(download_sdist(name, v)).test_files]
    if untested:
        raise SparringError(
            f"the source distribution of {name} {', '.join(untested)} contains no tests, so that release of the "
            f"series {', '.join(versions)} could not be checked; choose consecutive releases whose sdists all ship "
            "the test suite (--versions)."
        )
    return RepoSpec(
        name=name,
        versions=tuple(versions),
        split=split,
        source_dir=info.source_dir,
        test_dir=info.test_dir,
        test_command=test_command or f"pytest {info.test_dir}",
        deps=tuple(deps if deps is not None else info.requires),
        origin="user",
    )
