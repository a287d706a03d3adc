"""The repository catalog, release histories, sdist inspection and the built repository images.

Histories are built by real git from real tar.gz sdists (made here, or the cached PyPI ones);
image tests open the images setup builds and check their history and clean test suite.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import git
import pytest

from sparring import SparringError
from sparring.envs.swe.repos.catalog import RepoSpec, build_history, get_repo, load_catalog, save_user_repo
from sparring.envs.swe.repos.sdists import SdistRelease, inspect_sdist
from tests.conftest import require

#: Catalog projects whose images setup builds (see cli_repos.SETUP_REPOS) and the tests check.
BUILT_IN_CI = ("inflection", "parse", "isodate")


def _sdist(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A real .tar.gz sdist with a top folder NAME-VERSION holding FILES."""
    path = folder / f"{name}-{version}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for rel, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{rel}")
            info.size, info.mtime = len(data), 1_600_000_000
            tf.addfile(info, io.BytesIO(data))
    return path


RELEASES = {
    "1.0": {"toy/__init__.py": "X = 1\n", "tests/test_toy.py": "def test_x():\n    pass\n", "PKG-INFO": "v1"},
    "1.1": {
        "toy/__init__.py": "X = 2\n",
        "tests/test_toy.py": "def test_x():\n    pass\n",
        "PKG-INFO": "v2",
        ".gitignore": "toy/_version.py\n",
        "toy/_version.py": "V = '1.1'\n",
    },
    "2.0": {
        "toy/__init__.py": "X = 3\n",
        "tests/test_toy.py": "def test_y():\n    pass\n",
        "PKG-INFO": "v3",
        ".gitignore": "toy/_version.py\n",
        "toy/_version.py": "V = '2.0'\n",
        "toy.egg-info/SOURCES.txt": "x\n",
    },
}
DATES = {"1.0": "2020-01-02T03:04:05+00:00", "1.1": "2021-02-03T04:05:06+00:00", "2.0": "2022-03-04T05:06:07+00:00"}


@pytest.fixture
def toy(tmp_path: Path) -> tuple[RepoSpec, list[SdistRelease]]:
    spec = RepoSpec(name="toy", versions=tuple(RELEASES), test_dir="tests", test_command="pytest tests")
    releases = [SdistRelease(v, _sdist(tmp_path, "toy", v, files), DATES[v]) for v, files in RELEASES.items()]
    return spec, releases


def test_history_has_one_dated_tagged_commit_per_release(toy: Any, tmp_path: Path) -> None:
    spec, releases = toy
    history = build_history(spec, releases, tmp_path / "repo")
    repo = git.Repo(history.path)
    commits = list(repo.iter_commits("main"))[::-1]
    assert [c.hexsha for c in commits] == [c.sha for c in history.commits]
    assert [c.authored_datetime.isoformat() for c in commits] == list(DATES.values())
    assert [c.committed_datetime.isoformat() for c in commits] == list(DATES.values())
    assert {t.name: t.commit.hexsha for t in repo.tags} == {f"v{c.version}": c.sha for c in history.commits}
    for older, newer in zip(commits, commits[1:], strict=False):
        assert repo.git.diff(older.hexsha, newer.hexsha), "every release changes something"
    # Working tree at the newest release; packaging output dropped; ignored-but-shipped files kept.
    assert (history.path / "toy/__init__.py").read_text() == "X = 3\n"
    tracked = set(repo.git.ls_files().splitlines())
    assert "toy/_version.py" in tracked
    assert not any(f == "PKG-INFO" or ".egg-info" in f for f in tracked)
    assert repo.git.status("--porcelain") == ""
    assert history.commits[1].files_changed == 3  # toy/__init__.py, .gitignore, toy/_version.py


def test_history_is_deterministic(toy: Any, tmp_path: Path) -> None:
    spec, releases = toy
    first = build_history(spec, releases, tmp_path / "a")
    second = build_history(spec, releases, tmp_path / "b")
    assert [c.sha for c in first.commits] == [c.sha for c in second.commits]


def test_history_requires_the_test_dir(toy: Any, tmp_path: Path) -> None:
    spec, releases = toy
    wrong = RepoSpec(name="toy", versions=spec.versions, test_dir="testing")
    with pytest.raises(SparringError, match="has no 'testing'"):
        build_history(wrong, releases, tmp_path / "repo")
    assert not (tmp_path / "repo").exists()


def test_inspect_sdist_finds_tests_layout_and_extensions(tmp_path: Path) -> None:
    info = inspect_sdist(
        _sdist(
            tmp_path,
            "lib",
            "1.0",
            {
                "src/lib/__init__.py": "",
                "src/lib/_speed.c": "int x;",
                "tests/test_lib.py": "",
                "PKG-INFO": "Metadata-Version: 2.1\nName: lib\nRequires-Dist: attrs>=20\n"
                'Requires-Dist: freezegun; extra == "tests"\nRequires-Dist: sphinx; extra == "docs"\n'
                'Requires-Dist: pytest-cov; extra == "tests"\n',
            },
        )
    )
    assert info.source_dir == "src"
    assert info.test_dir == "tests"
    assert info.test_files == ("tests/test_lib.py",)
    assert info.extension_files == ("src/lib/_speed.c",)
    assert info.requires == ("attrs>=20", "freezegun")
    bare = inspect_sdist(_sdist(tmp_path, "bare", "1.0", {"bare.py": "", "README": ""}))
    assert bare.test_files == () and bare.test_dir is None


def test_catalog_has_enough_projects_in_each_split() -> None:
    specs = load_catalog(include_user=False)
    train, heldout = load_catalog("train", include_user=False), load_catalog("heldout", include_user=False)
    assert len(train) >= 12 and len(heldout) >= 6
    assert set(train).isdisjoint(heldout) and set(train) | set(heldout) == set(specs)
    for spec in specs.values():
        assert len(spec.versions) >= 3
        assert spec.test_command.startswith("pytest")
        assert spec.image == f"sparring-repo/{spec.name}:{spec.versions[-1]}"
    for name in BUILT_IN_CI:
        assert name in specs


def test_bad_catalog_entries_are_refused() -> None:
    with pytest.raises(SparringError, match="at least 3"):
        RepoSpec.from_toml("x", {"versions": ["1", "2"]})
    with pytest.raises(SparringError, match="split"):
        RepoSpec.from_toml("x", {"versions": ["1", "2", "3"], "split": "test"})
    with pytest.raises(SparringError, match="unknown field"):
        RepoSpec.from_toml("x", {"versions": ["1", "2", "3"], "tests": "t"})
    with pytest.raises(SparringError, match="must start with `pytest`"):
        RepoSpec.from_toml("x", {"versions": ["1", "2", "3"], "test_command": "make test"})
    with pytest.raises(SparringError, match="inside the repository"):
        RepoSpec.from_toml("x", {"versions": ["1", "2", "3"], "source_dir": "../etc"})
    with pytest.raises(SparringError, match="2.0 comes after 2.1 but is not newer; list the releases oldest first"):
        RepoSpec.from_toml("x", {"versions": ["1.0", "2.1", "2.0"]})
    with pytest.raises(SparringError, match="Invalid version: 'latest'"):
        RepoSpec.from_toml("x", {"versions": ["1.0", "2.0", "latest"]})
    with pytest.raises(SparringError, match="no repository 'nope'"):
        get_repo("nope")


def test_user_catalog_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path))
    spec = RepoSpec(name="my-lib", versions=("1", "2", "3"), split="heldout", deps=("attrs",), origin="user",
                    test_command='pytest -k "not slow" tests')  # fmt: skip
    save_user_repo(spec)
    assert get_repo("My_Lib") == spec
    assert load_catalog("heldout")["my-lib"] == spec
    assert "inflection" in load_catalog()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_repos_add_refuses_a_project_without_tests(tmp_path: Path) -> None:
    # docopt's sdists ship the module and examples but no tests.
    env = {**os.environ, "SPARRING_HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "sparring.cli", "repos", "add", "docopt", "--versions", "0.6.0,0.6.1,0.6.2"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "docopt 0.6.2 contains no tests" in message
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "repos.toml").exists()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_repos_add_refuses_a_series_with_one_release_without_tests(tmp_path: Path) -> None:
    # more-itertools 11.2.0 shipped no tests, between two releases that did: the newest alone passes.
    env = {**os.environ, "SPARRING_HOME": str(tmp_path)}
    versions = "11.1.0,11.2.0,11.2.1"
    cmd = [sys.executable, "-m", "sparring.cli", "repos", "add", "more-itertools", "--versions", versions]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=240)
    assert done.returncode == 2, done.stderr
    message = " ".join(done.stderr.split())
    assert "more-itertools 11.2.0 contains no tests" in message and "11.2.1" in message
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "repos.toml").exists()


# ----------------------------------------------------------------------------------- images


def _manifest(name: str) -> Any:
    from sparring.envs.swe.repos.images import load_manifest

    spec = get_repo(name)
    manifest = load_manifest(spec)
    require(manifest is not None, f"the image {spec.image}")
    return spec, manifest


@pytest.mark.docker
@pytest.mark.parametrize("name", BUILT_IN_CI)
def test_image_repository_has_the_release_history(name: str) -> None:
    from sparring.containers.sandbox import Sandbox

    spec, manifest = _manifest(name)
    with Sandbox.create(spec.image) as box:
        log = box.exec("git log --format='%H %aI' main", timeout=30)
        tags = box.exec("git tag --points-at HEAD; git tag | wc -l; git status --porcelain", timeout=30)
        stats = [box.exec(f"git diff --shortstat v{a} v{b}", timeout=30).stdout for a, b in
                 zip(spec.versions, spec.versions[1:], strict=False)]  # fmt: skip
        owner = box.exec("stat -c %U /repo /repo/.git; id -un", timeout=30)
    lines = log.stdout.split()
    shas, dates = lines[0::2][::-1], lines[1::2][::-1]
    assert shas == [c["sha"] for c in manifest.history]
    assert len(shas) == len(spec.versions)
    assert [d[:19] for d in dates] == [c["date"][:19] for c in manifest.history]
    assert tags.stdout.split() == [f"v{spec.version}", str(len(spec.versions))], "HEAD is the newest, a tag per release"
    assert all("changed" in s for s in stats), stats
    assert owner.stdout.split() == ["sparring", "sparring", "sparring"]


@pytest.mark.docker
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", BUILT_IN_CI)
def test_clean_suite_passes_with_recorded_exclusions(name: str) -> None:
    from sparring.containers.sandbox import Sandbox
    from sparring.envs.swe.testing import run_tests

    spec, manifest = _manifest(name)
    with Sandbox.create(spec.image) as box:
        run = run_tests(box, spec.test_command, expected=manifest.passed, timeout=180)
    assert run.missing == []
    assert set(manifest.passed) <= run.passing
    unexpected = run.failing - set(manifest.excluded)
    assert not unexpected, f"tests failing beyond the recorded exclusions: {sorted(unexpected)[:5]}"
    counts, reported = run.counts(), run.reported
    assert counts["passed"] == reported.get("passed", 0) + reported.get("xpassed", 0)
    assert counts["failed"] == reported.get("failed", 0)
    assert counts["skipped"] == reported.get("skipped", 0) + reported.get("xfailed", 0)
    assert counts["error"] == reported.get("error", 0)
    assert manifest.test_count == len(run.tests)


@pytest.mark.docker
def test_unchanged_inputs_are_not_rebuilt_and_changed_ones_are_stale() -> None:
    from dataclasses import replace

    from sparring.containers.docker_engine import docker_client
    from sparring.envs.swe.repos.images import ensure_repo_image, image_status

    spec, manifest = _manifest("parse")
    require(image_status(spec)[0] == "built", f"an up-to-date {spec.image}")
    before = docker_client().images.get(spec.image).id
    again = ensure_repo_image(spec)
    assert again.built_at == manifest.built_at
    assert docker_client().images.get(spec.image).id == before
    assert image_status(replace(spec, flaky=("tests/test_parse.py::test_no_match",)))[0] == "stale"
    assert image_status(replace(spec, versions=(*spec.versions, "9.9")))[0] == "missing"
