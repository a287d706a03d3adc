"""One Docker image per catalog repository, built offline and checked by running its suite twice.

:func:`ensure_repo_image` builds ``sparring-repo/<name>:<version>`` unless an image built from the
same inputs exists. The steps:

1. the release sdists (cached) and the git history (:mod:`sparring.envs.swe.repos.catalog`);
2. a wheelhouse of the project's dependencies, downloaded on the host for the image's Python
   (``pip download --only-binary=:all:``); the image installs it with ``pip install --no-index``;
3. ``docker build`` of ``containers/repo.Dockerfile`` on the base image, with no network;
4. the test suite, twice, each time in a fresh sandbox (once when the first run alone is over
   the time limit): tests that do not pass in both runs, and the catalog's known-flaky tests,
   are excluded;
5. the image is finished with labels holding the summary and the whole JSON manifest
   (:class:`RepoManifest`), which is also written to ``sparring_home()/repos/NAME/manifest.json``.

The inputs hash (label ``sparring.inputs``) covers the catalog entry, the recipe, the base image,
the release commits and the wheels; an image whose hash matches is not rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from sparring import SparringError, sparring_home
from sparring.containers.images import build_image, image_id, image_labels, remove_image_tag
from sparring.envs.swe.repos.catalog import RepoHistory, RepoSpec, build_history
from sparring.envs.swe.repos.sdists import fetch_releases
from sparring.envs.swe.testing import TestRun, run_tests

__all__ = [
    "INPUTS_LABEL",
    "MANIFEST_LABEL",
    "SUITE_LIMIT_S",
    "RepoManifest",
    "ensure_repo_image",
    "image_status",
    "load_manifest",
    "repo_wheelhouse",
]

#: Label with the hash of everything the image is built from.
INPUTS_LABEL = "sparring.inputs"
#: Label with the JSON manifest (tests passed/excluded, seconds, history).
MANIFEST_LABEL = "sparring.manifest"
#: A catalog project's suite must run within this many seconds (median of the two build runs).
SUITE_LIMIT_S = 60.0
#: Bumped when the build procedure changes in a way the other inputs do not show.
BUILDER_VERSION = "2"  # 2: histories take every change of a release (fresh index per commit)

#: What failing output says when tests try to reach the network the sandbox does not have.
_NETWORK_SIGNS = ("Temporary failure in name resolution", "Network is unreachable", "NewConnectionError",
                  "socket.gaierror", "Name or service not known", "Failed to establish a new connection")  # fmt: skip

Step = Callable[[str], None]


@dataclass
class RepoManifest:
    """What a repository image holds and how its clean test suite behaves.

    Attributes:
        name: Catalog name.
        version: Newest release (the image tag).
        image: Image name.
        split: ``"train"`` or ``"heldout"``.
        inputs: Hash of the build inputs.
        source_dir: Folder on PYTHONPATH, relative to /repo.
        test_dir: Folder (or file) of the test suite.
        test_command: The suite's pytest command (run from /repo).
        history: Release commits, oldest first (version, sha, tag, date, files_changed).
        passed: Test ids that passed in both clean runs and are not known-flaky: the reliable suite.
        skipped: Test ids skipped (or xfailed) in both runs.
        excluded: Test ids left out of every expectation, with the reason.
        suite_seconds: Seconds of each clean run.
        build_seconds: Seconds per build step and in total.
        built_at: When the image was finished (UTC, ISO 8601).
    """

    name: str
    version: str
    image: str
    split: str
    inputs: str
    source_dir: str
    test_dir: str
    test_command: str
    history: list[dict[str, Any]] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    suite_seconds: list[float] = field(default_factory=list)
    build_seconds: dict[str, float] = field(default_factory=dict)
    built_at: str = ""

    @property
    def test_count(self) -> int:
        """Tests the clean suite collects (passed + skipped + excluded)."""
        return len(self.passed) + len(self.skipped) + len(self.excluded)

    def summary(self) -> dict[str, Any]:
        """The per-repo line a build prints: counts and seconds."""
        return {
            "name": self.name,
            "image": self.image,
            "tests": self.test_count,
            "passed": len(self.passed),
            "skipped": len(self.skipped),
            "excluded": len(self.excluded),
            "suite_seconds": round(sorted(self.suite_seconds)[len(self.suite_seconds) // 2], 2)
            if self.suite_seconds
            else None,
            "build_seconds": self.build_seconds.get("total"),
        }

    def to_json(self) -> str:
        """The manifest as JSON."""
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RepoManifest:
        """Read a manifest written by :meth:`to_json`."""
        return cls(**json.loads(text))


def _repo_dir(spec: RepoSpec) -> Path:
    path = sparring_home() / "repos" / spec.name
    path.mkdir(parents=True, exist_ok=True)
    return path


def _manifest_path(spec: RepoSpec) -> Path:
    return _repo_dir(spec) / "manifest.json"


def load_manifest(spec: RepoSpec) -> RepoManifest | None:
    """The manifest of SPEC's image as the image's label holds it (None if there is no image)."""
    labels = image_labels(spec.image)
    if labels is None:
        return None
    text = labels.get(MANIFEST_LABEL)
    return RepoManifest.from_json(text) if text else None


def image_status(spec: RepoSpec) -> tuple[str, RepoManifest | None]:
    """``("built" | "missing" | "stale" | "unfinished", manifest)`` without building anything.

    ``stale`` means the catalog entry, recipe or base image changed since the image was built;
    checking the release commits and wheels would need downloads, so :func:`ensure_repo_image`
    does that.
    """
    manifest = load_manifest(spec)
    if manifest is None:
        if image_labels(spec.image) is None:
            return "missing", None
        return "unfinished", None
    if manifest.inputs.split(":")[0] != _static_inputs(spec):
        return "stale", manifest
    return "built", manifest


# ----------------------------------------------------------------------------------- inputs


def _recipe() -> str:
    from sparring.containers.base_image import containers_dir

    return (containers_dir() / "repo.Dockerfile").read_text()


def _base_image_id() -> str:
    from sparring.containers.base_image import BASE_IMAGE, base_image_status

    ok, detail = base_image_status()
    if not ok:
        raise SparringError(f"the base image is not ready ({detail}); run `sparring build base` first.")
    return image_id(BASE_IMAGE)


def _static_inputs(spec: RepoSpec) -> str:
    """Hash of the inputs known without downloading: entry, recipe, base image, builder."""
    entry = {k: v for k, v in asdict(spec).items() if k not in ("origin", "github")}  # neither changes the image
    text = json.dumps([BUILDER_VERSION, entry, _recipe(), _base_image_id()], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _inputs(spec: RepoSpec, history: RepoHistory, wheels: Path) -> str:
    """``static:dynamic``; the dynamic half covers the release commits and the wheel files."""
    wheel_list = sorted(f"{p.name}:{p.stat().st_size}" for p in wheels.iterdir())
    dynamic = hashlib.sha256(json.dumps([history.head, wheel_list]).encode()).hexdigest()[:16]
    return f"{_static_inputs(spec)}:{dynamic}"


# ---------------------------------------------------------------------------------- wheelhouse


def repo_wheelhouse(spec: RepoSpec, folder: Path) -> Path:
    """Download SPEC's dependencies as wheels for the image's Python into FOLDER (once per deps list).

    The folder gets a ``requirements.txt`` naming the deps, which the image installs with
    ``pip install --no-index --find-links``. Pure-Python dependencies that publish only an sdist
    are built into a wheel on the host.

    Raises:
        SparringError: A dependency cannot be had as a wheel.
    """
    from sparring.containers.base_image import IMAGE_PYTHON

    requirements = "".join(f"{d}\n" for d in spec.deps)
    stamp = folder / "requirements.txt"
    if stamp.exists() and stamp.read_text() == requirements:
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if spec.deps:
        base = [sys.executable, "-m", "pip", "--quiet"]
        download = [*base, "download", "--only-binary=:all:", "--python-version", IMAGE_PYTHON, "--dest", str(folder)]
        done = subprocess.run([*download, *spec.deps], capture_output=True, text=True, errors="replace")
        if done.returncode != 0:
            # Some pure-Python packages publish no wheel: build them here (same Python version).
            built = subprocess.run(
                [*base, "wheel", "--wheel-dir", str(folder), *spec.deps],
                capture_output=True,
                text=True,
                errors="replace",
            )
            if built.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise SparringError(
                    f"could not get wheels for {spec.name}'s dependencies {list(spec.deps)} ({last}); "
                    "check their names."
                )
    stamp.write_text(requirements)
    return folder


# ------------------------------------------------------------------------------------- building


def _build(spec: RepoSpec, context: Path, tag: str, labels: dict[str, str]) -> None:
    from sparring.containers.base_image import BASE_IMAGE

    build_image(context, tag, labels, buildargs={"BASE_IMAGE": BASE_IMAGE, "SOURCE_DIR": spec.source_dir})


def _finish(spec: RepoSpec, built: str, manifest: RepoManifest) -> None:
    """Give the verified image its final labels (a label-only layer on top of the built one)."""
    context = _repo_dir(spec) / "finish"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {built}\n")
    labels = {
        "sparring.repo": spec.name,
        "sparring.version": spec.version,
        "sparring.split": spec.split,
        INPUTS_LABEL: manifest.inputs,
        "sparring.tests.passed": str(len(manifest.passed)),
        "sparring.tests.excluded": str(len(manifest.excluded)),
        "sparring.tests.seconds": str(manifest.summary()["suite_seconds"]),
        MANIFEST_LABEL: manifest.to_json(),
    }
    build_image(context, spec.image, labels)
    shutil.rmtree(context, ignore_errors=True)


def _clean_runs(spec: RepoSpec, image: str, limit_s: float, timeout: float) -> list[TestRun]:
    """The suite run twice, each in a fresh container of IMAGE, each killed after TIMEOUT seconds.

    A first run slower than twice LIMIT_S (a timed-out one included) puts the mean of the two runs
    over the limit whatever the second does, so the second is not run: the verdict is already known.
    """
    from sparring.containers.sandbox import SandboxPool

    runs: list[TestRun] = []
    pool = SandboxPool(image, size=1)
    try:
        for _ in range(2):
            sandbox = pool.acquire()
            try:
                runs.append(run_tests(sandbox, spec.test_command, timeout=timeout))
            finally:
                pool.release(sandbox)
            if runs[0].status == "timeout" or runs[0].seconds > 2 * limit_s:
                break
    finally:
        pool.close()
    return runs


def _judge(spec: RepoSpec, runs: list[TestRun], limit_s: float) -> tuple[list[str], list[str], dict[str, str]]:
    """(passed, skipped, excluded) from the clean runs; raises when the suite is unusable.

    A suite over the time limit is refused first (a timed-out run says at least how slow), then
    one that cannot run at all; a suite whose failures show network errors is refused as needing
    the network before the generic "no test passes", which would hide why.
    """
    too_slow = f"over the {limit_s:.0f} s limit; choose a smaller test_command."
    timed_out = [r for r in runs if r.status == "timeout"]
    if timed_out:
        raise SparringError(
            f"the test suite of {spec.name} takes more than {timed_out[0].seconds:.0f} s (it was stopped there), "
            + too_slow
        )
    for run in runs:
        if run.status in ("crash", "no_report", "no_tests"):
            raise SparringError(
                f"the test suite of {spec.name} {spec.version} is unusable: {run.detail or run.status}; "
                f"check test_command {spec.test_command!r}."
            )
    mean = sum(r.seconds for r in runs) / len(runs)
    if mean > limit_s:
        raise SparringError(f"the test suite of {spec.name} takes {mean:.0f} s, " + too_slow)
    first, second = runs
    passed, skipped, excluded = [], [], {}
    flaky = set(spec.flaky)
    for test_id in sorted(set(first.tests) | set(second.tests)):
        a, b = first.tests.get(test_id, "absent"), second.tests.get(test_id, "absent")
        if test_id in flaky:
            excluded[test_id] = "known flaky (catalog)"
        elif a != b:
            excluded[test_id] = f"differs between runs ({a} then {b})"
        elif a == "passed":
            passed.append(test_id)
        elif a == "skipped":
            skipped.append(test_id)
        else:
            excluded[test_id] = f"{a} on the clean code"
    failing = [r for r in runs if r.failing]
    if len(excluded) > len(passed) and any(sign in r.output for r in failing for sign in _NETWORK_SIGNS):
        raise SparringError(
            f"most tests of {spec.name} fail because they need the network, which the sandbox does not have; "
            "pick another project."
        )
    if not passed:
        raise SparringError(
            f"no test of {spec.name} {spec.version} passes on the clean code in the sandbox; "
            "check deps and test_command."
        )
    return passed, skipped, excluded


def ensure_repo_image(
    spec: RepoSpec, *, force: bool = False, step: Step | None = None, limit_s: float = SUITE_LIMIT_S
) -> RepoManifest:
    """Build and verify SPEC's image unless one built from the same inputs exists.

    Args:
        spec: The catalog entry.
        force: Rebuild even if the image is up to date.
        step: Called with a short description as each step starts (for progress display).
        limit_s: The suite's time limit (mean of the two clean runs; a run killed at
            ``max(3 * limit_s, 120)`` seconds is over it).

    Returns:
        The image's manifest.

    Raises:
        SparringError: Download, build or verification failed; the message says why and what to do.
    """
    say = step or (lambda _: None)
    t_total = time.perf_counter()
    seconds: dict[str, float] = {}

    def timed(name: str, what: str, fn: Callable[[], Any]) -> Any:
        say(f"{spec.name}: {what}")
        t0 = time.perf_counter()
        out = fn()
        seconds[name] = round(time.perf_counter() - t0, 2)
        return out

    if not force:
        # Releases never change on PyPI, so an image whose static inputs match is current.
        status, manifest = image_status(spec)
        if status == "built" and manifest is not None:
            return manifest
    folder = _repo_dir(spec)
    releases = timed("download", "downloading releases", lambda: fetch_releases(spec.name, spec.versions))
    history = timed("history", "building git history", lambda: build_history(spec, releases, folder / "repo"))
    wheels = timed("wheels", "downloading dependency wheels", lambda: repo_wheelhouse(spec, folder / "wheels"))
    shutil.copy(_recipe_path(), folder / "Dockerfile")
    (folder / ".dockerignore").write_text("manifest.json\nfinish\n")
    inputs = _inputs(spec, history, wheels)
    building = f"{spec.image}-unverified"
    timed(
        "image",
        "docker build (no network)",
        lambda: _build(spec, folder, building, {"sparring.repo": spec.name, INPUTS_LABEL: inputs}),
    )
    try:
        runs = timed(
            "suite",
            "running the test suite twice",
            lambda: _clean_runs(spec, building, limit_s, timeout=max(3 * limit_s, 120.0)),
        )
        passed, skipped, excluded = _judge(spec, runs, limit_s)
    except SparringError:
        remove_image_tag(building)  # an image that failed verification is not left behind
        raise
    seconds["total"] = round(time.perf_counter() - t_total, 2)
    manifest = RepoManifest(
        name=spec.name,
        version=spec.version,
        image=spec.image,
        split=spec.split,
        inputs=inputs,
        source_dir=spec.source_dir,
        test_dir=spec.test_dir,
        test_command=spec.test_command,
        history=[asdict(c) for c in history.commits],
        passed=passed,
        skipped=skipped,
        excluded=excluded,
        suite_seconds=[round(r.seconds, 2) for r in runs],
        build_seconds=seconds,
        built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    )
    timed("finish", "labelling the image", lambda: _finish(spec, building, manifest))
    remove_image_tag(building)
    _manifest_path(spec).write_text(manifest.to_json())
    return manifest


def _recipe_path() -> Path:
    from sparring.containers.base_image import containers_dir

    return containers_dir() / "repo.Dockerfile"
