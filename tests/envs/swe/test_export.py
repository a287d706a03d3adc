"""`sparring export swe-instances`: errors a user can cause (an unknown repository, a base install), owner/name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparring import SparringError
from sparring.envs.swe.bugs.export import export_instances


@pytest.fixture()
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private SPARRING_HOME whose bug stores are inflection's (empty) and parse's."""
    monkeypatch.setenv("SPARRING_HOME", str(tmp_path))
    for repo in ("inflection", "parse"):
        (tmp_path / "bugs" / repo).mkdir(parents=True)
    return tmp_path


def test_an_unknown_repository_is_one_sentence_naming_the_stores(home: Path) -> None:
    out = home / "out"
    cmd = [sys.executable, "-m", "sparring.cli", "export", "swe-instances", "--out", str(out), "--repo", "inflectoin"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert "'inflectoin'" in done.stderr and "inflection, parse" in done.stderr, done.stderr
    assert not out.exists()  # refused before writing anything


def test_a_known_repository_exports(home: Path) -> None:
    summary = export_instances(home / "out", ["parse"], hf=False)
    assert summary["instances"] == 0 and (home / "out" / "instances.jsonl").read_text() == ""


def test_without_datasets_the_export_says_how_to_get_it(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # as on a base install: `import datasets` fails
    with pytest.raises(SparringError, match=r"pip install 'sparring\[train\]'.*--no-dataset"):
        export_instances(home / "out", ["inflection"])
    assert not (home / "out").exists()  # refused up front, not after the JSONL
    summary = export_instances(home / "out", ["inflection"], hf=False)
    assert "dataset" not in summary and (home / "out" / "instances.jsonl").is_file()


def test_every_catalog_repository_names_its_upstream_owner_and_name() -> None:
    from sparring.envs.swe.repos.catalog import RepoSpec, load_catalog

    specs = load_catalog(include_user=False)
    assert all(s.github.count("/") == 1 and s.owner_name == s.github for s in specs.values())
    assert specs["munch"].owner_name == "Infinidat/munch"
    assert len({s.github.lower() for s in specs.values()}) == len(specs)
    user = RepoSpec.from_toml("pkg", {"versions": ["1.0", "1.1", "1.2"]}, origin="user")
    assert user.owner_name == "pypi/pkg"  # a user project without one: the PyPI name, said as such
    with pytest.raises(SparringError, match="github must be owner/name"):
        RepoSpec.from_toml("pkg", {"versions": ["1.0", "1.1", "1.2"], "github": "pkg"})
