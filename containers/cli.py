"""Commands and setup requirements of the sandbox room: the Docker engine and the base image.

``sparring build base``, ``sparring gc`` and ``sparring bench sandbox``; ``requirements()`` gives
setup and doctor "docker engine" and "base image".
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from sparring import SparringError, print_figures

if TYPE_CHECKING:
    from sparring.requirement import Requirement


def requirements() -> list[Requirement]:
    """The Docker engine, then the base image (setup order)."""
    from sparring.containers import base_image, docker_engine
    from sparring.requirement import Requirement

    def base_check() -> tuple[bool, str]:
        if not docker_engine.engine_status()[0]:
            return False, "needs the Docker engine"
        return base_image.base_image_status()

    return [
        Requirement(
            name="docker engine",
            check=docker_engine.engine_status,
            ensure=docker_engine.ensure_engine,
            fix="sparring setup --for test  (as root on Debian; else start dockerd)",
        ),
        Requirement(
            name="base image",
            check=base_check,
            ensure=lambda: base_image.ensure_base_image(),
            fix="sparring build base",
        ),
    ]


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add ``build base``, ``gc`` and ``bench sandbox``."""

    @groups["build"].command("base")
    def build_base(
        force: bool = typer.Option(False, "--force", help="Rebuild even if the image is up to date."),
    ) -> None:
        """Build the base image sparring-base:bookworm (pull where a registry answers, else debootstrap)."""
        from sparring.containers.base_image import base_image_status, ensure_base_image
        from sparring.containers.docker_engine import ensure_engine

        ensure_engine()
        ensure_base_image(force=force)
        print(base_image_status()[1])

    @app.command()
    def gc(
        all_owners: bool = typer.Option(
            False, "--all", help="Also remove containers whose owning process is still alive."
        ),
    ) -> None:
        """Remove the containers and networks Sparring labelled whose owning process is gone."""
        from sparring.containers.sandbox import collect_garbage

        removed = collect_garbage(all_owners=all_owners)
        print(f"removed {removed.containers} container(s) and {removed.networks} network(s)")

    @groups["bench"].command("sandbox")
    def bench_sandbox(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        rounds: int = typer.Option(50, help="Samples per figure."),
    ) -> None:
        """Exec overhead vs docker-py and the docker CLI, reset vs cold start, containers/s."""
        from sparring.containers.bench import run_sandbox_bench

        if rounds < 5:
            raise SparringError("--rounds must be at least 5 for a meaningful median.")
        figures = run_sandbox_bench(rounds=rounds)
        print_figures(figures, as_json)
