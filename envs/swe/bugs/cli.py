"""Commands of the bug room: ``bugs generate``, ``bugs list``, ``export swe-instances``, ``bench validate``.

``requirements()`` adds a small store of validated procedural bugs for the smallest repository,
so the repair env has tasks in the demo and the tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from sparring import print_figures

#: Repository and size of the store setup builds (a single small test file: cheap to validate).
DEMO_REPO = "inflection"
DEMO_BUGS = 3


def requirements() -> list:
    """A small validated bug store for the demo and the tests."""
    from sparring.requirement import Requirement

    def check() -> tuple[bool, str]:
        from sparring.envs.swe.bugs.store import load_bugs

        count = len(load_bugs(DEMO_REPO))
        return count >= DEMO_BUGS, f"{count} validated bug(s) of {DEMO_REPO}"

    def ensure() -> None:
        from sparring.envs.swe.bugs.store import generate_bugs

        generate_bugs(DEMO_REPO, DEMO_BUGS)

    return [
        Requirement(
            name="bug store",
            check=check,
            ensure=ensure,
            fix=f"sparring bugs generate --repo {DEMO_REPO} --n {DEMO_BUGS}",
            required=False,
        )
    ]


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add the commands."""

    @groups["bugs"].command("generate")
    def bugs_generate(
        repo: str = typer.Option(..., "--repo", help="Catalog name of the repository (its image must be built)."),
        n: int = typer.Option(5, "--n", help="Validated bugs to add."),
        seed: int = typer.Option(0, "--seed", help="Seed of the mutation draw."),
        max_tries: int = typer.Option(0, "--max-tries", help="Mutations tried at most (0: 10 per bug)."),
    ) -> None:
        """Add validated procedural bugs (AST mutations) to REPO's bug store."""
        from sparring import SparringError
        from sparring.envs.swe.bugs.store import bug_store_dir, generate_bugs

        if n < 1:
            raise SparringError("--n must be at least 1.")
        report = generate_bugs(repo, n, seed=seed, max_tries=max_tries or None, progress=lambda line: print(line))
        print(
            f"{len(report.saved)} bug(s) added to {bug_store_dir(repo)} from {report.tried} mutation(s) "
            f"in {report.seconds:.0f} s; rejected: {report.rejected or 'none'}"
        )

    @groups["bugs"].command("list")
    def bugs_list() -> None:
        """Count the validated bugs per repository."""
        from sparring.envs.swe.bugs.store import load_bugs, stored_repos

        for name in stored_repos():
            print(f"{name}: {len(load_bugs(name))}")

    @groups["export"].command("swe-instances")
    def export_swe_instances(
        out: str = typer.Option(..., "--out", help="Output folder (instances.jsonl and dataset/)."),
        repo: str = typer.Option("", "--repo", help="Comma-separated repositories (default: all with a store)."),
        split: str = typer.Option("all", "--split", help="train, heldout or all (when no --repo)."),
        dataset: bool = typer.Option(
            True,
            "--dataset/--no-dataset",
            help="Also save a Hugging Face dataset (needs the datasets package: the train extra).",
        ),
    ) -> None:
        """Write validated bugs as SWE-bench instances (JSONL and a Hugging Face dataset), each with its image.

        base_commit is the buggy state in the instance's image (sparring-swe/NAME:DIGEST);
        patch and test_patch apply to it.

        Grade predictions with `sparring eval swe --predictions FILE --instances OUT/instances.jsonl`.
        """
        from sparring.envs.swe.bugs.export import export_instances

        names = [r.strip() for r in repo.split(",") if r.strip()] or None
        print(json.dumps(export_instances(Path(out), names, split, hf=dataset)))

    @groups["bench"].command("validate")
    def bench_validate_cmd(
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
        repo: str = typer.Option("", "--repo", help="Repository (default: the first built train repository)."),
        n: int = typer.Option(4, "--n", help="Procedural bugs to make and time."),
        keep_bugs: bool = typer.Option(
            False, "--keep-bugs", help="Add the bugs to the real bug store (default: a temporary store, removed)."
        ),
    ) -> None:
        """Seconds to validate a procedural bug, its ratio to one test run, validated bugs per minute."""
        from sparring.envs.swe.bench import bench_validate

        figures = bench_validate(repo or None, n, keep_bugs=keep_bugs)
        print_figures(figures, as_json)
