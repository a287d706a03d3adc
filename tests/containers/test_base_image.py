"""The base image recipe: the host's apt mirror, and what the built image holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparring import SparringError
from sparring.containers.base_image import BASE_IMAGE, apt_mirror, apt_sources, base_image_status, ensure_base_image
from tests.containers.sandbox_helpers import docker_ready

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example.org/debian
Suites: trixie trixie-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example.org/debian-security
Suites: trixie-security
Components: main

Types: deb-src
URIs: http://src.example.org/debian
Suites: trixie
Components: main
"""

ONE_LINE = """\
# a comment
deb [arch=amd64 signed-by=/usr/share/keyrings/nodesource.gpg] https://deb.nodesource.com/node_20.x nodistro main
deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main
"""


def make_root(tmp_path: Path, codename: str, sources: str = "", sources_list: str = "") -> Path:
    (tmp_path / "etc" / "apt" / "sources.list.d").mkdir(parents=True)
    distro = "ubuntu" if codename == "jammy" else "debian"
    (tmp_path / "etc" / "os-release").write_text(f"ID={distro}\nVERSION_CODENAME={codename}\n")
    if sources:
        (tmp_path / "etc" / "apt" / "sources.list.d" / "debian.sources").write_text(sources)
    if sources_list:
        (tmp_path / "etc" / "apt" / "sources.list").write_text(sources_list)
    return tmp_path


def test_mirror_is_the_hosts_debian_source_for_its_release(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARRING_APT_MIRROR", raising=False)
    root = make_root(tmp_path, "trixie", DEB822, ONE_LINE)
    suites = [(s.uri, s.suite) for s in apt_sources(root)]
    assert ("https://deb.nodesource.com/node_20.x", "nodistro") in suites
    assert ("http://src.example.org/debian", "trixie") not in suites  # deb-src is not a binary source
    assert apt_mirror(root) == "http://mirror.example.org/debian"


def test_mirror_from_a_one_line_sources_list(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARRING_APT_MIRROR", raising=False)
    root = make_root(tmp_path, "bookworm", sources_list=ONE_LINE + "deb http://ftp.example.net/debian/ bookworm main\n")
    assert apt_mirror(root) == "http://ftp.example.net/debian/"


def test_an_ubuntu_mirror_is_not_taken_for_debian(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARRING_APT_MIRROR", raising=False)
    root = make_root(tmp_path, "jammy", sources_list="deb http://archive.ubuntu.com/ubuntu jammy main restricted\n")
    with pytest.raises(SparringError, match="found no Debian mirror"):
        apt_mirror(root)


def test_no_mirror_is_one_clear_error_and_the_variable_overrides(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARRING_APT_MIRROR", raising=False)
    root = make_root(tmp_path, "bookworm", sources_list=ONE_LINE)
    with pytest.raises(SparringError, match="set SPARRING_APT_MIRROR"):
        apt_mirror(root)
    monkeypatch.setenv("SPARRING_APT_MIRROR", "http://local.example/debian")
    assert apt_mirror(root) == "http://local.example/debian"


@pytest.mark.docker
def test_base_image_holds_python_git_pytest_and_the_user():
    docker_ready()
    from sparring.containers.sandbox import Sandbox

    with Sandbox.create(BASE_IMAGE) as box:
        r = box.exec(
            "command -v python3 pytest git; python3 --version; pytest --version; "
            "python3 -c 'import pytest_timeout'; stat -c '%U %u' /repo /home/sparring; pwd"
        )
        assert r.ok, r.stderr
        assert r.stdout.splitlines() == [
            "/opt/venv/bin/python3",
            "/opt/venv/bin/pytest",
            "/usr/bin/git",
            "Python 3.11.2",
            "pytest 9.2.0",
            "sparring 1000",
            "sparring 1000",
            "/repo",
        ]
        # The sandbox user cannot change the interpreter the harness relies on.
        r = box.exec("touch /opt/venv/bin/pytest")
        assert r.exit_code == 1 and "Permission denied" in r.stderr


@pytest.mark.docker
def test_ensure_is_idempotent():
    docker_ready()
    from sparring.containers.docker_engine import docker_client, ensure_engine

    before = docker_client().images.get(BASE_IMAGE).id
    ensure_engine()
    assert ensure_base_image() == BASE_IMAGE
    assert docker_client().images.get(BASE_IMAGE).id == before
    ok, detail = base_image_status()
    assert ok and detail.startswith(BASE_IMAGE)
