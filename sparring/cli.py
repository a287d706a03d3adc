"""The ``sparring`` command line.

The front door only: each room of the package registers its own commands (``register``) and its
own setup requirements (``requirements``) from a small module, so ``sparring setup`` and
``sparring doctor`` walk one list of checks, and every command imports its heavy parts lazily.
"""

from __future__ import annotations

import importlib
import sys
import time

import typer
from rich.console import Console
from rich.table import Table

from sparring import SparringError, __version__
from sparring.requirement import GOALS, Requirement

console = Console(stderr=True)

#: Modules that contribute commands and requirements, in setup order.
COMMAND_MODULES = [
    "sparring.containers.cli",
    "sparring.envs.search.cli",
    "sparring.agents.cli",
    "sparring.envs.swe.repos.cli",
    "sparring.envs.swe.bugs.cli",
    "sparring.training.cli",
]


def _modules() -> list:
    """The command modules, imported; a missing one is a packaging error, never skipped silently."""
    mods = []
    for name in COMMAND_MODULES:
        try:
            mods.append(importlib.import_module(name))
        except ModuleNotFoundError as e:
            if e.name == name:
                raise ImportError(f"command module {name} listed in COMMAND_MODULES does not exist") from e
            raise
    return mods


app = typer.Typer(no_args_is_help=True, add_completion=False, help="Self-play environments and co-training.")
GROUPS: dict[str, typer.Typer] = {
    "build": typer.Typer(no_args_is_help=True, help="Build images and other artefacts."),
    "bench": typer.Typer(no_args_is_help=True, help="Benchmarks; each prints one JSON object with --json."),
    "eval": typer.Typer(no_args_is_help=True, help="Evaluate a model on held-out tasks."),
    "export": typer.Typer(no_args_is_help=True, help="Export datasets."),
    "repos": typer.Typer(no_args_is_help=True, help="The SWE repository catalog."),
    "bugs": typer.Typer(no_args_is_help=True, help="Stores of validated bugs."),
    "corpus": typer.Typer(no_args_is_help=True, help="Retrieval corpora."),
}
for _name, _group in GROUPS.items():
    app.add_typer(_group, name=_name)


def _print_version(value: bool) -> None:
    if value:
        print(f"sparring {__version__}")
        raise typer.Exit()


@app.callback()
def _main_options(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Self-play environments and co-training."""


def requirements() -> list[Requirement]:
    """Every room's requirements, in setup order."""
    reqs: list[Requirement] = []
    for mod in _modules():
        if hasattr(mod, "requirements"):
            reqs.extend(mod.requirements())
    return reqs


def _check(req: Requirement) -> tuple[bool | None, str]:
    """``req.check()``, with None in place of the verdict when the check itself raised."""
    try:
        return req.check()
    except Exception as e:  # a check must never turn into a traceback
        return None, f"check failed: {e}"


#: Libraries whose versions doctor reports: what a bug report about training or serving needs.
LIBRARIES = ("torch", "transformers", "trl", "accelerate", "vllm", "datasets", "bm25s", "docker", "gymnasium")


def _gpus() -> str:
    """The GPUs torch sees (name and memory), or why there are none."""
    try:
        import torch
    except ImportError:
        return "unknown (torch is not installed: pip install 'sparring[train]')"
    if not torch.cuda.is_available():
        return f"none (torch {torch.__version__} sees no CUDA device; training and vllm: run on the CPU)"
    names = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        names.append(f"{props.name} {props.total_memory / 2**30:.0f} GiB")
    return f"{', '.join(names)} (CUDA {torch.version.cuda})"


def environment() -> list[tuple[str, str]]:
    """What doctor reports besides the pieces: Python, this package, the GPUs and each library's version."""
    import platform
    from importlib import metadata

    rows = [("python", f"{platform.python_version()} ({sys.executable})"), ("sparring", __version__), ("gpu", _gpus())]
    for name in LIBRARIES:
        try:
            rows.append((name, metadata.version(name)))
        except metadata.PackageNotFoundError:
            rows.append((name, "not installed"))
    return rows


@app.command()
def doctor() -> None:
    """Check the Docker engine, images, model and corpus (the fix for each missing piece); show GPUs and versions."""
    versions = Table(title="environment")
    versions.add_column("component")
    versions.add_column("version")
    for name, value in environment():
        versions.add_row(name, value)
    Console().print(versions)
    table = Table(title="sparring doctor")
    for col in ("piece", "status", "detail", "fix"):
        table.add_column(col)
    missing_required = 0
    for req in requirements():
        ok, detail = _check(req)
        if not ok and req.required:
            missing_required += 1
        status = "[green]ok[/]" if ok else ("[red]missing[/]" if req.required else "[yellow]missing[/]")
        table.add_row(req.name, status, detail, "" if ok else req.fix)
    Console().print(table)
    if missing_required:
        console.print(f"[red]{missing_required} required piece(s) missing[/]: run the fix commands above.")
        raise typer.Exit(1)


@app.command()
def setup(
    goal: str = typer.Option("test", "--for", help="What to set up for: demo (the main job) or test."),
) -> None:
    """Set up what --for names needs (Docker engine, base image, corpus, model, repo images); idempotent."""
    if goal not in GOALS:
        raise SparringError(f"unknown setup goal {goal!r}; use one of: {', '.join(GOALS)}.")
    total = time.perf_counter()
    for req in requirements():
        if goal not in req.needed_for:
            continue
        t0 = time.perf_counter()
        ok, detail = _check(req)
        if ok is None:  # the check itself broke: setting the piece up would hit the same cause
            raise SparringError(
                f"{req.name}: {detail}; fix that (`sparring doctor` shows every piece), then run setup again."
            )
        if ok:
            console.print(f"[green]✓[/] {req.name}: {detail} (already there)")
            continue
        console.print(f"[cyan]→[/] {req.name}: setting up ...")
        req.ensure()
        ok, detail = _check(req)
        if not ok:
            raise SparringError(f"setup of {req.name} did not produce it ({detail}); try: {req.fix}")
        console.print(f"[green]✓[/] {req.name}: {detail} ({time.perf_counter() - t0:.1f} s)")
    console.print(f"setup for {goal} done in {time.perf_counter() - total:.1f} s")


for _mod in _modules():
    if hasattr(_mod, "register"):
        _mod.register(app, GROUPS)


def main() -> None:
    """Entry point: run the CLI; a user-fixable error prints one sentence, not a traceback."""
    try:
        code = app(standalone_mode=False)  # without standalone mode, click returns typer.Exit's code
        if isinstance(code, int) and code:
            sys.exit(code)
    except SparringError as e:
        console.print(f"[red]error:[/] {e}")
        sys.exit(2)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        console.print("aborted")
        sys.exit(130)
    except Exception as e:  # usage errors: click's, or the copy of click that newer typer releases carry
        if _is_usage_error(e):
            e.show()  # type: ignore[attr-defined]
            sys.exit(e.exit_code)  # type: ignore[attr-defined]
        raise


def _is_usage_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a click-style error that prints its own one-line message (bad option, no such command)."""
    classes: list[type[BaseException]] = []
    try:
        import click

        classes.append(click.ClickException)
    except ImportError:  # pragma: no cover - typer may carry its own click
        pass
    try:
        from typer._click import ClickException as TyperClickException

        classes.append(TyperClickException)
    except ImportError:  # older typer uses click itself
        pass
    return isinstance(exc, tuple(classes))


if __name__ == "__main__":
    main()
