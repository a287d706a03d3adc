"""``sparring train``: co-train the proposer and solver roles of one policy (the main job).

``sparring train --preset cpu-demo`` runs the quick start's main job; any config key can follow as
``key=value`` (``sparring train --help-config`` lists them with their help). ``--resume``
continues the run in ``out`` from its latest checkpoint.
"""

from __future__ import annotations

import typer

__all__ = ["register"]


def _train(
    overrides: list[str] = typer.Argument(None, help="Config overrides as key=value (see --help-config)."),  # noqa: B008
    preset: str = typer.Option(None, "--preset", help="A bundled preset (cpu-demo, cpu-learn, gpu-1) or a YAML file."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in `out` from its latest checkpoint."),
    help_config: bool = typer.Option(False, "--help-config", help="List every config key with its help and exit."),
) -> None:
    """Warm start, then self-play iterations of every game; checkpoints, metrics, a summary and a plot."""
    from sparring.training.config import config_help, load_config, presets

    if help_config:
        for key, text in config_help().items():
            print(f"{key:>24}  {text}")
        print(f"\npresets: {', '.join(presets())}")
        return
    config = load_config(preset, overrides or [])
    from sparring.training.run import run_training

    run_training(config, resume=resume)


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add ``sparring train`` and ``sparring bench train`` to the CLI."""
    from sparring.training.bench import bench_command

    app.command("train")(_train)
    groups["bench"].command("train")(bench_command)
