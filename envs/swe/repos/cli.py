"""Commands and setup requirements of the repository catalog.

``sparring build repos [NAME...] [--split]``, ``sparring repos add NAME``, ``sparring repos list``
and ``sparring bench repos``; ``requirements()`` gives setup and doctor the images of
:data:`SETUP_REPOS`, the small projects the demo and the tests use (the rest are built on demand).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any

import typer

from sparring import SparringError

if TYPE_CHECKING:
    from sparring.envs.swe.repos.catalog import RepoSpec
    from sparring.envs.swe.repos.images import RepoManifest

#: Images setup builds: small, dependency-free suites (together about a minute to build).
SETUP_REPOS = ("inflection", "parse", "isodate")


def requirements() -> list:
    """One requirement per image in :data:`SETUP_REPOS` (after the base image), and the held-out images.

    The held-out images are what ``sparring eval swe --split heldout`` needs; setup leaves them to
    ``sparring build repos --split heldout`` (minutes each), so doctor shows them as optional.
    """
    from sparring.requirement import Requirement

    return [
        Requirement(
            name=f"repo image {name}",
            check=partial(_image_check, name),
            ensure=partial(_build_one, name),
            fix=f"sparring build repos {name}",
        )
        for name in SETUP_REPOS
    ] + [
        Requirement(
            name="held-out repo images",
            check=_heldout_check,
            ensure=lambda: build_repos(_select([], "heldout")),
            fix="sparring build repos --split heldout (for `sparring eval swe --split heldout`)",
            needed_for=frozenset(),
            required=False,
        )
    ]


def _heldout_check() -> tuple[bool, str]:
    """Whether every held-out repository's image is built: ``eval swe --split heldout`` uses the built ones."""
    from sparring.containers.docker_engine import engine_status
    from sparring.envs.swe.repos.catalog import load_catalog
    from sparring.envs.swe.repos.images import image_status

    if not engine_status()[0]:
        return False, "needs the Docker engine"
    specs = list(load_catalog("heldout").values())
    missing = [spec.name for spec in specs if image_status(spec)[0] != "built"]
    built = len(specs) - len(missing)
    detail = f"{built} of {len(specs)} built" + (f"; not built: {', '.join(missing)}" if missing else "")
    return not missing and bool(specs), detail


def _image_check(name: str) -> tuple[bool, str]:
    from sparring.containers.docker_engine import engine_status
    from sparring.envs.swe.repos.catalog import get_repo
    from sparring.envs.swe.repos.images import image_status

    if not engine_status()[0]:
        return False, "needs the Docker engine"
    spec = get_repo(name)
    try:
        status, manifest = image_status(spec)
    except SparringError as e:  # base image missing
        return False, str(e)
    if status != "built" or manifest is None:
        return False, f"{spec.image} {status}"
    return True, f"{spec.image}: {len(manifest.passed)} tests pass, {len(manifest.excluded)} excluded"


def _build_one(name: str) -> None:
    from sparring.envs.swe.repos.catalog import get_repo
    from sparring.envs.swe.repos.images import ensure_repo_image

    ensure_repo_image(get_repo(name))


def _select(names: list[str], split: str) -> list[RepoSpec]:
    from sparring.envs.swe.repos.catalog import get_repo, load_catalog

    if names:
        return [get_repo(n) for n in names]
    specs = list(load_catalog(split).values())
    if not specs:
        raise SparringError(f"the catalog has no repositories in split {split!r}.")
    return specs


def _summary_table(manifests: list[RepoManifest], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in ("repository", "image", "tests", "passed", "skipped", "excluded", "suite s", "build s"):
        table.add_column(col, justify="right" if col not in ("repository", "image") else "left")
    for m in manifests:
        s = m.summary()
        table.add_row(m.name, m.image, *(str(s[k]) for k in ("tests", "passed", "skipped", "excluded")),
                      str(s["suite_seconds"]), str(s["build_seconds"]))  # fmt: skip
    Console().print(table)


class StageLog:
    """The ``step`` callback of an image build: each stage is printed with its time as it ends.

    The progress bar shows only the stage under way, so without this a build that took minutes
    left no record of where they went.
    """

    def __init__(self, say: Callable[[str], object], show: Callable[[str], object] = lambda _: None):
        """Print finished stages with ``say``; show the stage under way with ``show``."""
        self.say, self.show = say, show
        self.seen = 0
        self._current: str | None = None
        self._started = self._first = 0.0

    def __call__(self, what: str) -> None:
        """A new stage starts: the one before it has ended."""
        self._end()
        if not self.seen:
            self._first = time.perf_counter()
        self.seen += 1
        self._current, self._started = what, time.perf_counter()
        self.show(what)

    def _end(self) -> None:
        if self._current is not None:
            self.say(f"  {self._current} ({time.perf_counter() - self._started:.1f} s)")
            self._current = None

    def done(self, line: str | None) -> None:
        """The build ended: close the last stage, then say ``line`` (with the total time if a stage ran)."""
        self._end()
        if line:
            self.say(line + (f" in {time.perf_counter() - self._first:.1f} s" if self.seen else ""))


def build_repos(specs: list[RepoSpec], force: bool = False) -> tuple[list[RepoManifest], dict[str, str]]:
    """Build SPECS' images with a progress bar; a failed repository does not stop the others.

    Returns:
        The manifests built or found up to date, and ``{name: error}`` for the failures.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from sparring.containers.base_image import ensure_base_image
    from sparring.containers.docker_engine import ensure_engine
    from sparring.envs.swe.repos.images import ensure_repo_image

    ensure_engine()
    ensure_base_image()
    manifests, failures = [], {}
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
    with Progress(*columns, TimeElapsedColumn(), transient=False) as progress:
        task = progress.add_task("repositories", total=len(specs))
        for spec in specs:
            stages = StageLog(progress.console.print, lambda what: progress.update(task, description=what))
            try:
                manifests.append(ensure_repo_image(spec, force=force, step=stages))
                stages.done(f"{spec.name}: up to date" if not stages.seen else f"{spec.name}: built")
            except SparringError as e:
                stages.done(None)
                failures[spec.name] = str(e)
                progress.console.print(f"[red]✗ {spec.name}[/]: {e}")
            progress.advance(task)
        progress.update(task, description="repositories")
    return manifests, failures


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add ``build repos``, ``repos add``, ``repos list`` and ``bench repos``."""

    @groups["build"].command("repos")
    def build_repos_command(
        names: Annotated[
            list[str] | None, typer.Argument(help="Catalog names (default: every repository of the split).")
        ] = None,
        split: str = typer.Option("all", "--split", help="train, heldout or all (when no NAME is given)."),
        force: bool = typer.Option(False, "--force", help="Rebuild even if an image is up to date."),
    ) -> None:
        """Build the repository images: releases -> git history -> image -> suite run twice."""
        manifests, failures = build_repos(_select(names or [], split), force=force)
        if manifests:
            _summary_table(manifests, "repository images")
        if failures:
            raise SparringError(f"{len(failures)} repository image(s) failed: {', '.join(failures)} (reasons above).")

    @groups["repos"].command("add")
    def repos_add(
        name: str = typer.Argument(..., help="PyPI project name."),
        versions: str | None = typer.Option(
            None, "--versions", help="Releases, comma-separated, oldest first (default: newest 3)."
        ),
        split: str = typer.Option("train", "--split", help="train or heldout."),
        test_command: str | None = typer.Option(None, "--test-command", help="The suite's pytest command."),
        deps: str | None = typer.Option(None, "--deps", help="Comma-separated requirements (default: from the sdist)."),
    ) -> None:
        """Add a project of your choice to your catalog: build its image and check its suite."""
        from sparring.envs.swe.repos.catalog import propose_spec, save_user_repo

        spec = propose_spec(
            name,
            [v.strip() for v in versions.split(",") if v.strip()] if versions else None,
            split=split,
            test_command=test_command,
            deps=[d.strip() for d in deps.split(",") if d.strip()] if deps is not None else None,
        )
        manifests, failures = build_repos([spec], force=True)
        if failures:
            raise SparringError(failures[spec.name])
        path = save_user_repo(spec)
        _summary_table(manifests, f"added {spec.name} to {path}")

    @groups["repos"].command("list")
    def repos_list(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        split: str = typer.Option("all", "--split", help="train, heldout or all."),
    ) -> None:
        """Show the catalog and the build status of each image."""
        from sparring.envs.swe.repos.catalog import load_catalog

        rows = [_list_row(spec) for spec in load_catalog(split).values()]
        if as_json:
            print(json.dumps({"repos": rows}))
            return
        from rich.console import Console
        from rich.table import Table

        table = Table(title="repository catalog")
        for col in ("name", "split", "versions", "status", "passed", "excluded", "suite s"):
            table.add_column(col, no_wrap=True)
        for r in rows:
            versions = f"{r['versions'][0]} .. {r['versions'][-1]} ({len(r['versions'])})"
            table.add_row(r["name"], r["split"], versions, r["status"],
                          *(str(r.get(k, "")) for k in ("passed", "excluded", "suite_seconds")))  # fmt: skip
        Console().print(table)

    @groups["bench"].command("repos")
    def bench_repos(
        names: Annotated[
            list[str] | None, typer.Argument(help="Catalog names (default: the images setup builds).")
        ] = None,
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        all_repos: bool = typer.Option(False, "--all", help="Every catalog repository."),
        rebuild: bool = typer.Option(True, "--rebuild/--no-rebuild", help="Time a fresh build (sdists stay cached)."),
    ) -> None:
        """Per repository: build seconds, test-suite seconds and test count."""
        specs = _select(list(names or ([] if all_repos else SETUP_REPOS)), "all")
        figures = bench(specs, rebuild=rebuild)
        if as_json:
            print(json.dumps(figures))
        else:
            for name, row in figures["repos"].items():
                print(f"{name:16s} {row}")


def _list_row(spec: RepoSpec) -> dict[str, Any]:
    from sparring.envs.swe.repos.images import image_status

    row: dict[str, Any] = {"name": spec.name, "split": spec.split, "versions": list(spec.versions),
                           "image": spec.image, "origin": spec.origin}  # fmt: skip
    try:
        status, manifest = image_status(spec)
    except SparringError as e:
        status, manifest = f"unknown ({e})", None
    row["status"] = status
    if manifest is not None:
        summary = manifest.summary()
        row.update({k: summary[k] for k in ("tests", "passed", "skipped", "excluded", "suite_seconds")})
    return row


def bench(specs: list[RepoSpec], rebuild: bool = True) -> dict[str, Any]:
    """Build (fresh when REBUILD) and time each repository, then time one more suite run.

    Returns:
        ``{"repos": {name: {build_seconds, build_steps, suite_seconds, tests, passed, excluded, suite_ok}}}``;
        ``suite_seconds`` is a fresh run of the whole suite in a new sandbox, after the build, and
        ``suite_ok`` says whether every test the image records as passing passed in it again.
    """
    from sparring.containers.sandbox import Sandbox
    from sparring.envs.swe.repos.images import ensure_repo_image
    from sparring.envs.swe.testing import run_tests

    out: dict[str, Any] = {}
    for spec in specs:
        t0 = time.perf_counter()
        manifest = ensure_repo_image(spec, force=rebuild)
        built = time.perf_counter() - t0
        with Sandbox.create(spec.image) as sandbox:
            run = run_tests(sandbox, spec.test_command, expected=manifest.passed)
        out[spec.name] = {
            "build_seconds": round(built, 2) if rebuild else manifest.build_seconds.get("total"),
            "build_steps": manifest.build_seconds,
            "suite_seconds": round(run.seconds, 2),
            "tests": manifest.test_count,
            "passed": len(manifest.passed),
            "excluded": len(manifest.excluded),
            # Excluded tests (failing on the clean code, or flaky) may fail; every recorded pass must hold.
            "suite_ok": not run.missing and all(run.tests.get(t) == "passed" for t in manifest.passed),
        }
    return {"repos": out}
