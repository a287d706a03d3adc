"""``sparring train``: co-train the proposer and solver roles of one policy (the main job).

``sparring train --preset cpu-demo`` runs the quick start's main job; any config key can follow as
``key=value`` (``sparring train --help-config`` lists them with their help). ``--resume``
continues the run in ``out`` from its latest checkpoint.
"""

from __future__ import annotations

import dataclasses
import textwrap
import typing
from typing import Any

import typer

__all__ = ["config_table", "register"]


def _shown(value: Any) -> str:
    """A config value as it is written after ``key=`` (lists comma-separated)."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return "none" if value is None else str(value)


def config_table(preset_names: list[str]) -> str:
    """Every config key: its type, its default, its value in each preset of ``preset_names``, then its help."""
    from sparring.training.config import TrainConfig, config_help, load_config

    hints = typing.get_type_hints(TrainConfig)
    helps = config_help()
    defaults = TrainConfig()
    loaded = [load_config(name) for name in preset_names]
    rows = [["key", "type", "default", *preset_names]]
    for f in dataclasses.fields(TrainConfig):
        default = getattr(defaults, f.name)
        kind = getattr(hints[f.name], "__name__", None) if not typing.get_args(hints[f.name]) else None
        rows.append([f.name, kind or str(hints[f.name]).replace("typing.", ""), _shown(default)]
                    + [_shown(getattr(config, f.name)) for config in loaded])  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if n:
            lines += textwrap.wrap(helps.get(row[0], ""), 100, initial_indent="    ", subsequent_indent="    ")
    return "\n".join(lines)


def _train(
    overrides: list[str] = typer.Argument(None, help="Config overrides as key=value (see --help-config)."),  # noqa: B008
    preset: str = typer.Option(None, "--preset", help="A bundled preset (cpu-demo, cpu-learn, gpu-1) or a YAML file."),
    resume: bool = typer.Option(False, "--resume", help="Continue the run in `out` from its latest checkpoint."),
    help_config: bool = typer.Option(
        False,
        "--help-config",
        help="List every config key with its type, default, the value in --preset (else in each bundled preset), "
        "and its help; then exit.",
    ),
) -> None:
    """Warm start, then self-play iterations of every game; checkpoints, metrics, a summary and a plot."""
    from sparring.training.config import load_config, presets

    if help_config:
        print(config_table([preset] if preset else presets()))
        return
    config = load_config(preset, overrides or [])
    from pathlib import Path

    from sparring.training.run import run_training

    out = Path(config.out)
    existed = out.exists()
    try:
        run_training(config, resume=resume)
    except BaseException:
        # A start that failed before writing anything (a bad model, a missing corpus) leaves no empty run folder
        # behind for the next `sparring train` to trip over.
        if not existed and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise
    from sparring.training.ranks import close_ranks

    close_ranks()


def register(app: typer.Typer, groups: dict[str, typer.Typer]) -> None:
    """Add ``sparring train`` and ``sparring bench train`` to the CLI."""
    from sparring.training.bench import bench_command

    app.command("train")(_train)
    groups["bench"].command("train")(bench_command)
