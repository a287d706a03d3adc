"""Metrics of a run: TensorBoard (and W&B when installed), a JSONL log, a summary table and a plot.

Every value logged at an iteration goes to ``OUT/metrics.jsonl`` (one line per iteration, so a
resumed run continues the same file), to TensorBoard under ``OUT/tb``, and to W&B when ``wandb``
is installed and ``WANDB_PROJECT`` is set. At the end, :func:`summary_table` and :func:`plot`
turn the log into a table of first/last values and a PNG of the curves, and
:func:`write_summary` saves the table with the run's wall-clock time as ``summary.md`` and
``summary.json``.

Names say whose value it is: ``GAME/...`` is one game's (``search/update/loss`` is the loss of
the search game's update: each game has its own update), ``eval/GAME/...`` a held-out evaluation,
``warm_start/...`` the warm start's, and ``speed/...``, ``memory/...``, ``seconds_iteration``,
``weights_version`` the whole iteration's.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from sparring.training.config import GAMES

__all__ = ["MetricsLog", "expand_keys", "plot", "read_log", "summary_table", "summary_rows", "write_summary"]

#: Curves the plot draws and rows the summary shows (when logged), one panel each; ``{game}`` stands
#: for each game, drawn as one line per game in one panel.
PLOT_KEYS = (
    "{game}/solver/reward_mean",
    "{game}/proposer/valid_rate",
    "{game}/solver/solve_rate",
    "eval/search/em",
    "eval/swe/solve_rate",
    "{game}/update/loss",
    "{game}/update/clip_frac_high",
    "{game}/update/kl",
    "{game}/update/entropy",
    "{game}/update/adv_std",
    "speed/generate_tokens_per_s",
    "speed/train_tokens_per_s",
    "memory/peak_rss_gib",
)

#: The held-out figures ``summary.md`` tabulates per evaluated step (summary.json keeps them all).
EVAL_COLUMNS = ("/em", "/f1", "/judged", "/solve_rate", "/instances")


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

    def text(self, tag: str, text: str, step: int) -> None:
        """Record markdown ``text`` under ``tag`` at iteration ``step`` (TensorBoard's text tab)."""
        if self.enabled and self._tb is not None:
            self._tb.add_text(tag, text, step)
            self._tb.flush()

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


def expand_keys(keys: tuple[str, ...], rows: list[dict[str, float]]) -> list[tuple[str, list[str]]]:
    """Each key with the logged keys it stands for: itself, or per game where it holds ``{game}``.

    Keys that nothing logged are left out.

    Example:
        >>> expand_keys(("{game}/update/loss", "memory/peak_rss_gib"), [{"swe/update/loss": 1.0}])
        [('{game}/update/loss', ['swe/update/loss'])]
    """
    logged = {k for row in rows for k in row}
    out = []
    for key in keys:
        concrete = [key.format(game=g) for g in GAMES] if "{game}" in key else [key]
        present = [k for k in concrete if k in logged]
        if present:
            out.append((key, present))
    return out


def summary_rows(rows: list[dict[str, float]], keys: tuple[str, ...] = PLOT_KEYS) -> list[dict[str, Any]]:
    """Each logged metric of ``keys``: its first, last and mean value, at which steps (JSON-ready)."""
    table = []
    for _, names in expand_keys(keys, rows):
        for name in names:
            points = [(int(row["step"]), row[name]) for row in rows if name in row]
            values = [v for _, v in points]
            table.append({"metric": name, "first": values[0], "last": values[-1], "mean": sum(values) / len(values),
                          "first_step": points[0][0], "last_step": points[-1][0]})  # fmt: skip
    return table


def summary_table(rows: list[dict[str, float]], keys: tuple[str, ...] = PLOT_KEYS) -> Any:
    """A rich table: each metric's first and last value and its mean over the run."""
    from rich.table import Table

    table = Table(title="sparring train")
    for col in ("metric", "first", "last", "mean"):
        table.add_column(col)
    for row in summary_rows(rows, keys):
        table.add_row(row["metric"], f"{row['first']:.4g}", f"{row['last']:.4g}", f"{row['mean']:.4g}")
    return table


def write_summary(out: Path, rows: list[dict[str, float]], facts: dict[str, Any]) -> tuple[Path, Path]:
    """Save the summary table and the run's ``facts`` (wall-clock time, iterations, ...) as summary.md and .json.

    The held-out evaluations (``eval/GAME/...``) get a table of their own, one row per evaluated
    step: the scores of :data:`EVAL_COLUMNS` with their 95% intervals.

    Returns:
        The two files' paths.
    """
    table = summary_rows(rows)
    evals = [
        {"step": int(row["step"]), **{k: v for k, v in row.items() if k.startswith("eval/")}}
        for row in rows
        if any(k.startswith("eval/") for k in row)
    ]
    data = {**facts, "metrics": table, "evaluations": evals}
    json_path, md_path = out / "summary.json", out / "summary.md"
    json_path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    lines = ["# sparring train: summary", ""]
    lines += [f"- {key}: {_fmt(value)}" for key, value in facts.items()]
    lines += ["", "| metric | first | last | mean |", "|---|---|---|---|"]
    lines += [f"| {r['metric']} | {r['first']:.4g} | {r['last']:.4g} | {r['mean']:.4g} |" for r in table]
    scores = sorted({k for e in evals for k in e if k.endswith(EVAL_COLUMNS)})
    if evals:
        lines += ["", "## Held-out evaluation", "", "| step | " + " | ".join(scores) + " |"]
        lines.append("|---" * (len(scores) + 1) + "|")
        for e in evals:
            cells = [_with_interval(e, k) for k in scores]
            lines.append(f"| {e['step']} | " + " | ".join(cells) + " |")
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return md_path, json_path


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _with_interval(row: dict[str, Any], key: str) -> str:
    """``0.62 [0.48, 0.74]``, or the value alone, or ``-`` when the step did not evaluate it."""
    if key not in row:
        return "-"
    low, high = row.get(f"{key}_ci_low"), row.get(f"{key}_ci_high")
    return f"{row[key]:.3g}" + (f" [{low:.3g}, {high:.3g}]" if low is not None and high is not None else "")


def plot(rows: list[dict[str, float]], path: Path, keys: tuple[str, ...] = PLOT_KEYS) -> Path | None:
    """A PNG with one panel per logged curve (a line per game, 95% bands where logged); None when nothing
    was logged or matplotlib is missing."""
    present = expand_keys(keys, rows)
    if not present:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return None
    cols = 3
    lines = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(lines, cols, figsize=(4 * cols, 2.6 * lines), squeeze=False)
    for ax, (key, names) in zip(axes.flat, present, strict=False):
        for name in names:
            steps = [row["step"] for row in rows if name in row]
            label = name.split("/", 1)[0] if "{game}" in key else None
            ax.plot(steps, [row[name] for row in rows if name in row], marker="o", markersize=3, label=label)
            band = [(row["step"], row[f"{name}_ci_low"], row[f"{name}_ci_high"]) for row in rows
                    if f"{name}_ci_low" in row and f"{name}_ci_high" in row]  # fmt: skip
            if band:
                ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band], alpha=0.2)
        ax.set_title(key.replace("{game}", "GAME"), fontsize=9)
        ax.set_xlabel("iteration", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        if "{game}" in key:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(present) :]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
