"""Metrics of a run: TensorBoard (and W&B when installed), a JSONL log, a summary table and a plot.

Every value logged at an iteration goes to ``OUT/metrics.jsonl`` (one line per iteration, so a
resumed run continues the same file), to TensorBoard under ``OUT/tb``, and to W&B when ``wandb``
is installed and ``WANDB_PROJECT`` is set. At the end, :func:`summary_table` and :func:`plot`
turn the log into a table of first/last values and a PNG of the curves.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

__all__ = ["MetricsLog", "plot", "read_log", "summary_table"]

#: Curves the plot draws (when logged), one panel each.
PLOT_KEYS = (
    "search/solver/reward_mean",
    "search/proposer/valid_rate",
    "search/solver/solve_rate",
    "swe/solver/reward_mean",
    "swe/proposer/valid_rate",
    "swe/solver/solve_rate",
    "update/loss",
    "update/clip_frac_high",
    "update/kl",
    "update/entropy",
    "update/adv_std",
    "speed/generate_tokens_per_s",
    "speed/train_tokens_per_s",
    "memory/peak_rss_gib",
)


class MetricsLog:
    """Where one run's metrics go (only the main process writes)."""

    def __init__(self, out: Path, enabled: bool = True):
        """Open the log files of run folder ``out``."""
        self.out = out
        self.enabled = enabled
        self.path = out / "metrics.jsonl"
        self._tb: Any = None
        self._wandb: Any = None
        if not enabled:
            return
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(out / "tb"))
        except ImportError:  # tensorboard is part of the train extra; without it the JSONL log still works
            self._tb = None
        if os.environ.get("WANDB_PROJECT"):
            try:
                import wandb

                self._wandb = wandb.init(dir=str(out), resume="allow")
            except ImportError:
                self._wandb = None

    def log(self, step: int, values: dict[str, float]) -> None:
        """Record ``values`` at iteration ``step``."""
        if not self.enabled:
            return
        clean = {k: float(v) for k, v in values.items() if isinstance(v, int | float) and math.isfinite(float(v))}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": step, **clean}) + "\n")
        if self._tb is not None:
            for key, value in clean.items():
                self._tb.add_scalar(key, value, step)
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(clean, step=step)

    def close(self) -> None:
        """Flush and close the writers."""
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_log(out: Path) -> list[dict[str, float]]:
    """The run's logged iterations, in order (a resumed run's repeated steps: the last one wins)."""
    path = out / "metrics.jsonl"
    if not path.is_file():
        return []
    rows: dict[int, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[int(row["step"])] = row
    return [rows[k] for k in sorted(rows)]


def summary_table(rows: list[dict[str, float]], keys: tuple[str, ...] = PLOT_KEYS) -> Any:
    """A rich table: each metric's first and last value and its mean over the run."""
    from rich.table import Table

    table = Table(title="sparring train")
    for col in ("metric", "first", "last", "mean"):
        table.add_column(col)
    for key in keys:
        values = [row[key] for row in rows if key in row]
        if values:
            table.add_row(key, f"{values[0]:.4g}", f"{values[-1]:.4g}", f"{sum(values) / len(values):.4g}")
    return table


def plot(rows: list[dict[str, float]], path: Path, keys: tuple[str, ...] = PLOT_KEYS) -> Path | None:
    """A PNG with one panel per logged curve; None when nothing was logged or matplotlib is missing."""
    present = [k for k in keys if any(k in row for row in rows)]
    if not present:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cols = 3
    lines = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(4 * cols, 2.6 * lines), squeeze=False)
    for ax, key in zip(axes.flat, present, strict=False):
        steps = [row["step"] for row in rows if key in row]
        ax.plot(steps, [row[key] for row in rows if key in row], marker="o", markersize=3)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("iteration", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
