"""The base image every sandbox and repository image starts from: ``sparring-base:bookworm``.

Debian bookworm with python3, python3-venv and git, a virtualenv at ``/opt/venv`` (first on
``PATH``) with pytest and pytest-timeout, a non-root user ``sparring`` (uid 1000, home
``/home/sparring``) and the working directory ``/repo`` owned by it.

It is built in two layers, each skipped when already there with the same recipe:

1. ``sparring-rootfs:bookworm``, plain Debian with :data:`ROOTFS_PACKAGES`: ``docker pull
   debian:bookworm-slim`` plus ``containers/rootfs-pull.Dockerfile`` where a registry answers,
   else ``debootstrap`` from the apt mirror configured on the host, imported with ``docker import``.
2. ``sparring-base:bookworm`` from ``containers/base.Dockerfile``, built with no network: the
   Python packages come from a wheelhouse downloaded on the host (``pip download``) and are
   installed with ``pip install --no-index``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sparring import SparringError, sparring_home
from sparring.containers.docker_engine import apt_install, docker_client
from sparring.containers.images import build_image, engine_errors

BASE_IMAGE = "sparring-base:bookworm"
ROOTFS_IMAGE = "sparring-rootfs:bookworm"
#: The image pulled where a registry answers.
PULLED_DEBIAN = "debian:bookworm-slim"
SUITE = "bookworm"
#: Debian packages of the root filesystem (both build paths install exactly these).
ROOTFS_PACKAGES = ("python3", "python3-venv", "git", "ca-certificates", "procps")
#: Python version of bookworm's python3, for which the wheelhouse is downloaded.
IMAGE_PYTHON = "3.11"
#: Installed into /opt/venv from the host-side wheelhouse.
BASE_PYTHON_PACKAGES = ("pytest==9.2.0", "pytest-timeout==2.4.0")
#: Label holding a hash of the recipe, so a changed recipe triggers a rebuild.
RECIPE_LABEL = "sparring.recipe"


def containers_dir() -> Path:
    """The folder with the image recipes (``containers/`` in the source tree)."""
    import sparring.containers

    return Path(sparring.containers.__file__).parent


def rootfs_recipe() -> str:
    """Hash of what goes into the root filesystem image."""
    text = " ".join(ROOTFS_PACKAGES) + (containers_dir() / "rootfs-pull.Dockerfile").read_text()
    return hashlib.sha256(f"{SUITE}|{text}".encode()).hexdigest()[:16]


def base_recipe() -> str:
    """Hash of what goes into the base image on top of the root filesystem."""
    text = (containers_dir() / "base.Dockerfile").read_text() + "|".join(BASE_PYTHON_PACKAGES)
    return hashlib.sha256(f"{rootfs_recipe()}|{text}".encode()).hexdigest()[:16]


def _image_recipe(name: str) -> str | None:
    """The recipe label of image ``name``, "" if it has none, None if the image is absent."""
    import docker

    try:
        image = docker_client().images.get(name)
    except docker.errors.ImageNotFound:
        return None
    return (image.labels or {}).get(RECIPE_LABEL, "")


def base_image_status() -> tuple[bool, str]:
    """Whether ``sparring-base:bookworm`` is there and built from the current recipe."""
    try:
        recipe = _image_recipe(BASE_IMAGE)
    except SparringError as e:
        return False, str(e)
    if recipe is None:
        return False, f"{BASE_IMAGE} not built"
    if recipe != base_recipe():
        return False, f"{BASE_IMAGE} is from an older recipe"
    return True, f"{BASE_IMAGE} ({recipe})"


def ensure_base_image(force: bool = False) -> str:
    """Build the base image unless it is there with the current recipe (idempotent).

    Args:
        force: Rebuild both layers even if they are up to date.

    Returns:
        The image tag, :data:`BASE_IMAGE`.

    Raises:
        SparringError: A step failed; the message says which and what to do.
    """
    if not force and base_image_status()[0]:
        return BASE_IMAGE
    if force or _image_recipe(ROOTFS_IMAGE) != rootfs_recipe():
        with _step(f"root filesystem {ROOTFS_IMAGE}"):
            if not _rootfs_by_pull():
                _rootfs_by_debootstrap()
    with _step("wheelhouse for the base image (pip download)"):
        wheels = base_wheelhouse()
    with _step(f"image {BASE_IMAGE} (no network)"):
        context = sparring_home() / "build" / "base"
        shutil.rmtree(context, ignore_errors=True)
        context.mkdir(parents=True)
        shutil.copy(containers_dir() / "base.Dockerfile", context / "Dockerfile")
        shutil.copytree(wheels, context / "wheels")
        build_image(context, BASE_IMAGE, {RECIPE_LABEL: base_recipe()}, buildargs={"ROOTFS": ROOTFS_IMAGE})
        shutil.rmtree(context, ignore_errors=True)
    return BASE_IMAGE


def base_wheelhouse() -> Path:
    """Download the base image's Python packages on the host (skipped when already there).

    Returns:
        The folder with the wheels and a ``requirements.txt`` naming the pinned packages.
    """
    folder = sparring_home() / "wheelhouse" / "base"
    requirements = "\n".join(BASE_PYTHON_PACKAGES) + "\n"
    stamp = folder / "requirements.txt"
    if stamp.exists() and stamp.read_text() == requirements:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:", "--python-version", IMAGE_PYTHON,
           "--dest", str(folder), *BASE_PYTHON_PACKAGES]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        what = ", ".join(BASE_PYTHON_PACKAGES)
        raise SparringError(f"pip download of {what} failed ({_tail(done.stderr)}); check that PyPI is reachable.")
    stamp.write_text(requirements)
    return folder


def _rootfs_by_pull() -> bool:
    """Build the root filesystem from a pulled Debian image; False where no registry answers."""
    client = docker_client()
    try:
        client.images.pull(PULLED_DEBIAN)
    except Exception as e:  # unreachable registry: DNS, TLS, timeouts, 4xx/5xx
        print(f"  docker pull {PULLED_DEBIAN} failed ({str(e)[:120]}); using debootstrap instead", flush=True)
        return False
    context = sparring_home() / "build" / "rootfs-pull"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir(parents=True)
    shutil.copy(containers_dir() / "rootfs-pull.Dockerfile", context / "Dockerfile")
    build_image(context, ROOTFS_IMAGE, {RECIPE_LABEL: rootfs_recipe()}, network=True,
                buildargs={"DEBIAN": PULLED_DEBIAN, "PACKAGES": " ".join(ROOTFS_PACKAGES)})  # fmt: skip
    shutil.rmtree(context, ignore_errors=True)
    return True


def _rootfs_by_debootstrap() -> None:
    """Build the root filesystem with debootstrap from the host's apt mirror and ``docker import`` it."""
    if os.geteuid() != 0:
        raise SparringError("no image registry answers and debootstrap needs root; run `sparring build base` as root.")
    if shutil.which("debootstrap") is None:
        apt_install(["debootstrap"])
    mirror = apt_mirror()
    target = sparring_home() / "build" / f"rootfs-{SUITE}"
    shutil.rmtree(target, ignore_errors=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    print(f"  debootstrap {SUITE} from {mirror}", flush=True)
    cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(ROOTFS_PACKAGES)}", SUITE, str(target), mirror]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        log = target / "debootstrap" / "debootstrap.log"
        raise SparringError(f"debootstrap failed ({_tail(done.stdout + done.stderr)}); see {log}.")
    for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for path in (target / junk).glob("*"):
            if path.is_file():
                path.unlink()
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(target), "-c", "."], stdout=subprocess.PIPE)
    try:
        with engine_errors(f"docker import of {ROOTFS_IMAGE}"):
            docker_client(timeout=1800).api.import_image_from_stream(
                tar.stdout,
                repository=ROOTFS_IMAGE.split(":")[0],
                tag=ROOTFS_IMAGE.split(":")[1],
                changes=[f"LABEL {RECIPE_LABEL}={rootfs_recipe()}", "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]'],
            )
    except SparringError:
        tar.kill()  # nobody reads its output any more: it would block on the full pipe
        raise
    finally:
        tar.wait()
    shutil.rmtree(target, ignore_errors=True)
    if _image_recipe(ROOTFS_IMAGE) != rootfs_recipe():
        raise SparringError(f"docker import did not produce {ROOTFS_IMAGE}; check the Docker engine's log.")


@dataclass
class AptSource:
    """One ``deb`` line (or deb822 paragraph, one entry per suite) of the host's apt sources."""

    uri: str
    suite: str
    components: tuple[str, ...]


def apt_sources(root: Path = Path("/")) -> list[AptSource]:
    """The host's enabled ``deb`` sources from ``sources.list`` and ``sources.list.d`` (both formats)."""
    found: list[AptSource] = []
    apt = root / "etc" / "apt"
    files = [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*.list"))]
    for path in files:
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
                if len(words) >= 3 and words[0] == "deb":
                    found.append(AptSource(words[1], words[2], tuple(words[3:])))
    for path in sorted((apt / "sources.list.d").glob("*.sources")):
        for paragraph in re.split(r"\n\s*\n", path.read_text(errors="replace")):
            fields: dict[str, str] = {}
            for line in paragraph.splitlines():
                if ":" in line and not line.startswith(("#", " ", "\t")):
                    key, value = line.split(":", 1)
                    fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
                continue
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    found.append(AptSource(uri, suite, tuple(fields.get("components", "").split())))
    return found


def apt_mirror(root: Path = Path("/")) -> str:
    """The Debian mirror the host uses (``$SPARRING_APT_MIRROR`` overrides it).

    The first source for the host's own release (or bookworm) with the ``main`` component; its URI
    serves every Debian release, so it is used for bookworm whatever the host runs.

    Raises:
        SparringError: No such source is configured.
    """
    if os.environ.get("SPARRING_APT_MIRROR"):
        return os.environ["SPARRING_APT_MIRROR"]
    suites = {SUITE, _debian_codename(root)}
    for source in apt_sources(root):
        if source.suite in suites and "main" in source.components and source.uri.startswith(("http://", "https://")):
            return source.uri
    raise SparringError("found no Debian mirror in the host's apt sources; set SPARRING_APT_MIRROR to one.")


def _debian_codename(root: Path) -> str:
    """The host's Debian release name; bookworm on other systems (an Ubuntu mirror has no Debian)."""
    release = root / "etc" / "os-release"
    text = release.read_text() if release.is_file() else ""
    if re.search(r"^ID=\"?debian\"?$", text, re.M):
        match = re.search(r"^VERSION_CODENAME=\"?([a-z]+)", text, re.M)
        if match:
            return match.group(1)
    return SUITE


@contextlib.contextmanager
def _step(what: str) -> Iterator[None]:
    print(f"  → {what}", flush=True)
    t0 = time.perf_counter()
    yield
    print(f"  ✓ {what} ({time.perf_counter() - t0:.1f} s)", flush=True)


def _tail(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"
