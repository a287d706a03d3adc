"""PNG plots of an evaluation report; every bar and every mean carries its 95% bootstrap interval.

matplotlib comes with the ``train`` extra; without it the report has no plots and says so.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from sparring.agents.evaluation.config import GROUPS, HEADLINE

__all__ = ["bar_labels", "comparison_rows", "draw_comparison", "draw_plots", "usage_panels"]


def bar_labels(stats: dict[str, dict[str, Any]]) -> list[str]:
    """The label under each bar: its name and how many instances it counts.

    A share of the instances (a failure reason) is a mean over every instance, so its ``n`` is
    all of them; the instances it counts are its ``count`` (``wrong_answer (n=22)``, not n=50).
    """
    return [f"{name}\n(n={stat.get('count', stat['n'])})" for name, stat in stats.items() if stat["mean"] is not None]


def usage_panels(report: dict[str, Any]) -> list[str]:
    """The usage histograms worth drawing: those with a value recorded (a scripted agent counts no tokens)."""
    usage = ("turns", "tokens") if report["domain"] == "swe" else ("turns", "tokens", "searches")
    return [key for key in usage if any(r.get(key) is not None for r in report["records"])]


def _bars(ax: Any, stats: dict[str, dict[str, Any]], title: str, ylabel: str, *, rate: bool = True) -> None:
    """One bar per name with its interval as an error bar and the instances it counts under the name."""
    names = [n for n, s in stats.items() if s["mean"] is not None]
    means = [stats[n]["mean"] for n in names]
    lows = [m - stats[n]["ci"][0] for n, m in zip(names, means, strict=True)]
    highs = [stats[n]["ci"][1] - m for n, m in zip(names, means, strict=True)]
    positions = range(len(names))
    ax.bar(positions, means, yerr=[lows, highs], capsize=4, color="#4c72b0")
    ax.set_xticks(list(positions), bar_labels(stats), rotation=30, ha="right", fontsize=8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    if rate:
        ax.set_ylim(0, 1.05)


def _histogram(ax: Any, values: list[float], stat: dict[str, Any], what: str) -> None:
    low_v, high_v = min(values), max(values)
    integral = all(v == int(v) for v in values) and high_v - low_v <= 40
    bins = [b - 0.5 for b in range(int(low_v), int(high_v) + 2)] if integral else 20
    ax.hist(values, bins=bins, color="#55a868")
    ax.axvline(stat["mean"], color="black", linestyle="--", linewidth=1)
    low, high = stat["ci"]
    ax.axvspan(low, high, color="grey", alpha=0.25)
    ax.set_title(f"{what}: mean {stat['mean']:.1f}, 95% CI [{low:.1f}, {high:.1f}]", fontsize=10)
    ax.set_xlabel(what)
    ax.set_ylabel("instances")


def comparison_rows(result: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The rows a comparison plot draws, top to bottom: all common instances, each group, each kind."""
    group_name, kind_name = GROUPS[result["domain"]]
    rows = [("all common", result["overall"])]
    rows += [(f"{group_name} {name}", stat) for name, stat in result["by_group"].items()]
    rows += [(f"{kind_name} {name}", stat) for name, stat in result["by_kind"].items()]
    return [(f"{name} (n={stat['n']})", stat) for name, stat in rows if stat["difference"] is not None]


def draw_comparison(result: dict[str, Any], path: Path) -> Path | None:
    """Draw ``sparring eval compare``'s paired differences B − A, each with its 95% paired interval, to ``path``.

    Returns:
        ``path``, or None without matplotlib.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plot: matplotlib is not installed (pip install 'sparring[train]')", file=sys.stderr)
        return None
    rows = comparison_rows(result)
    fig, ax = plt.subplots(figsize=(8, 1.2 + 0.35 * len(rows)))
    positions = list(range(len(rows)))[::-1]
    diffs = [stat["difference"] for _, stat in rows]
    lows = [d - stat["ci"][0] for d, (_, stat) in zip(diffs, rows, strict=True)]
    highs = [stat["ci"][1] - d for d, (_, stat) in zip(diffs, rows, strict=True)]
    ax.errorbar(diffs, positions, xerr=[lows, highs], fmt="o", color="#4c72b0", capsize=4)
    ax.axvline(0.0, color="black", linewidth=1)
    ax.set_yticks(positions, [name for name, _ in rows], fontsize=8)
    headline = HEADLINE[result["domain"]]
    ax.set_xlabel(f"B − A of {headline} (paired bootstrap 95% CI)")
    ax.set_title(f"A: {result['a']['model']}  ·  B: {result['b']['model']}  ·  {result['common']} common", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_plots(out: Path, report: dict[str, Any]) -> list[str]:
    """Draw the report's plots into ``out``; returns their paths (none without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no plots: matplotlib is not installed (pip install 'sparring[train]')", file=sys.stderr)
        return []
    out.mkdir(parents=True, exist_ok=True)
    domain, model = report["domain"], report["model"]
    headline = HEADLINE[domain]
    group_name, kind_name = GROUPS[domain]
    paths = []

    def save(fig: Any, name: str) -> None:
        fig.suptitle(f"{domain} {report['split']} · {model} · 95% bootstrap CI", fontsize=9)
        fig.tight_layout()
        path = out / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(str(path))

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    if domain != "search":
        _bars(axes[0], report["by_group"], f"{headline} by {group_name}", headline)
    else:
        _bars(axes[0], {"EM": report["summary"]["score"], "F1": report["summary"]["f1"]}, "overall", "score")
    _bars(axes[1], report["by_kind"], f"{headline} by {kind_name}", headline)
    save(fig, "scores.png")

    # A panel with nothing to show is left out, not drawn empty: usage.png holds the recorded
    # histograms, and failures.png exists only when an instance failed.
    usage = usage_panels(report)
    if usage:
        fig, axes = plt.subplots(1, len(usage), figsize=(5.5 * len(usage), 4.2), squeeze=False)
        for ax, key in zip(axes[0], usage, strict=True):
            values = [float(r[key]) for r in report["records"] if r.get(key) is not None]
            _histogram(ax, values, report["summary"][key], key)
        save(fig, "usage.png")

    if report["reasons"]:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        _bars(ax, report["reasons"], "failure reasons (share of instances)", "share")
        save(fig, "failures.png")
    return paths
