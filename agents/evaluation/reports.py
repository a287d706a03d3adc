"""Evaluation reports: ``report.json`` (every instance), ``report.md`` (tables) and PNG plots.

Every rate and mean carries its 95% bootstrap interval over instances
(:mod:`~sparring.agents.evaluation.stats`). The per-instance ``score`` is what the domain's
headline measures (SWE: 1 if solved; search: exact match) and what ``sparring eval compare``
pairs; an instance whose episode failed scores 0 and keeps its reason.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from sparring.agents.evaluation.config import GROUPS, HEADLINE
from sparring.agents.evaluation.stats import auroc, balanced_accuracy, mean_ci, paired_difference, statistic_ci

__all__ = ["headline", "judge_summary", "load_report", "markdown", "summary_line", "summarize", "write_report"]

REPORT_FILE = "report.json"


def _values(records: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in records if r.get(key) is not None]


def judge_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """A judge's balanced accuracy, AUROC of P(solved) and invalid share, each with its bootstrap interval.

    Accuracy is the records' mean ``score``; the balanced accuracy and the AUROC are statistics of the
    whole set, so their intervals resample the episodes and take the statistic of each resample.
    """
    labels = [bool(r["label"]) for r in records]
    right = [bool(r["score"]) for r in records]
    scores = [float(r["p_solved"]) for r in records]
    y, ok, p = (np.asarray(v) for v in (labels, right, scores))
    return {
        "balanced_accuracy": statistic_ci(lambda i: balanced_accuracy(y[i], ok[i]), len(records)),
        "auroc": statistic_ci(lambda i: auroc(y[i], p[i]), len(records)),
        "auroc_from": sorted({str(r.get("p_from")) for r in records}),
        "invalid": mean_ci([0.0 if r.get("valid") else 1.0 for r in records]),
        "solved_episodes": sum(labels),
        "failed_episodes": len(labels) - sum(labels),
    }


def best_of_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Best-of-n: a random pick's solve rate, some attempt's, and the pick's against the random one, paired."""
    picked, random = [float(r["score"]) for r in records], [float(r["random"]) for r in records]
    return {
        "random": mean_ci(random),
        "any": mean_ci([float(r["any"]) for r in records]),
        "pick_vs_random": paired_difference(random, picked),
    }


def summarize(domain: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline and usage figures of a set of records, each with its interval."""
    summary: dict[str, Any] = {"instances": len(records), "score": mean_ci(_values(records, "score"))}
    if domain == "judge":
        summary |= judge_summary(records)
    if domain == "best-of-n":
        summary |= best_of_summary(records)
    if domain == "search":
        summary["f1"] = mean_ci(_values(records, "f1"))
        if any("judged" in r for r in records):
            summary["judged"] = mean_ci([float(r.get("judged") or 0.0) for r in records])
    if domain in ("search", "search-propose"):
        summary["searches"] = mean_ci(_values(records, "searches"))
    summary["turns"] = mean_ci(_values(records, "turns"))
    summary["tokens"] = mean_ci(_values(records, "tokens"))
    summary["seconds"] = mean_ci(_values(records, "seconds"))
    summary["errors"] = sum(1 for r in records if r.get("error"))
    return summary


def _breakdown(records: list[dict[str, Any]], key: str) -> dict[str, Any]:
    by: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by.setdefault(str(record.get(key) or "?"), []).append(record)
    return {name: mean_ci(_values(rs, "score")) for name, rs in sorted(by.items())}


def _reasons(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Share of the instances that failed for each reason, with its interval."""
    counts = Counter(str(r["reason"]) for r in records if r.get("reason"))
    return {
        reason: mean_ci([1.0 if r.get("reason") == reason else 0.0 for r in records]) | {"count": count}
        for reason, count in counts.most_common()
    }


def write_report(
    out: Path, run: dict[str, Any], records: list[dict[str, Any]], *, plots: bool = True
) -> dict[str, Any]:
    """Write ``report.json``, ``report.md`` and (``plots``) the PNG plots into ``out``; returns the report."""
    domain = str(run["domain"])
    report: dict[str, Any] = {
        "domain": domain,
        "model": run["model"],
        "split": run["split"],
        "run": {k: v for k, v in run.items() if k != "instances"},
        "out": str(out),
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "instances": [r["id"] for r in records],
        "summary": summarize(domain, records),
        "by_group": _breakdown(records, "group"),
        "by_kind": _breakdown(records, "kind"),
        "reasons": _reasons(records),
        "records": records,
    }
    report["plots"] = []
    if plots:
        from sparring.agents.evaluation.plots import draw_plots

        report["plots"] = draw_plots(out, report)
    out.mkdir(parents=True, exist_ok=True)
    work = out / (REPORT_FILE + ".tmp")
    work.write_text(json.dumps(report, indent=1, ensure_ascii=False))
    work.replace(out / REPORT_FILE)
    (out / "report.md").write_text(markdown(report))
    return report


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The figures a command prints: each mean with its interval, flat (``turns``, ``turns_ci``, ...)."""
    flat: dict[str, Any] = {"out": report["out"], "model": report["model"], "split": report["split"]}
    metric = {"swe": "solve_rate", "search-propose": "valid_rate", "judge": "accuracy",
              "best-of-n": "pick_solve_rate"}.get(report["domain"], "em")  # fmt: skip
    for key, value in report["summary"].items():
        name = metric if key == "score" else key
        if isinstance(value, dict):
            flat[name], flat[f"{name}_ci"] = value.get("mean", value.get("difference")), value["ci"]
        else:
            flat[name] = value
    return flat


def summary_line(report: dict[str, Any]) -> str:
    """The report in one rounded line a person reads (the JSON keeps every digit).

    Example: ``EM 0.667 [0.333, 1.000] on 6 instances (heldout) · F1 0.70 · searches 1.0 · turns 2.0 ·
    9.1 s each · 0 errors · evals/x/report.md``.
    """
    domain, summary = report["domain"], report["summary"]
    parts = [
        f"{HEADLINE[domain]} {_fmt(summary['score']['mean'])} {_ci(summary['score'])} "
        f"on {summary['instances']} instances ({report['split']})"
    ]
    for key, name in (("balanced_accuracy", "balanced accuracy"), ("auroc", "AUROC"), ("random", "random pick")):
        if key in summary and summary[key]["mean"] is not None:
            parts.append(f"{name} {summary[key]['mean']:.3f} {_ci(summary[key])}")
    if "pick_vs_random" in summary and summary["pick_vs_random"]["difference"] is not None:
        gain = summary["pick_vs_random"]
        parts.append(f"pick − random {gain['difference']:+.3f} [{gain['ci'][0]:+.3f}, {gain['ci'][1]:+.3f}]")
    if "invalid" in summary:
        parts.append(f"invalid {summary['invalid']['mean']:.2f}")
    for key, name in (("judged", "judged"), ("f1", "F1"), ("searches", "searches"), ("turns", "turns")):
        if key in summary and summary[key]["mean"] is not None:
            parts.append(f"{name} {summary[key]['mean']:.{2 if key in ('f1', 'judged') else 1}f}")
    if summary["seconds"]["mean"] is not None:
        parts.append(f"{summary['seconds']['mean']:.1f} s each")
    parts.append(f"{summary['errors']} error{'' if summary['errors'] == 1 else 's'}")
    parts.append(str(Path(report["out"]) / "report.md"))
    return " · ".join(parts)


def load_report(path: str | Path) -> dict[str, Any]:
    """A report from its ``report.json`` or its evaluation folder.

    Raises:
        SparringError: There is no report there, or the file is not one.
    """
    from sparring import SparringError

    path = Path(path)
    file = path / REPORT_FILE if path.is_dir() else path
    if not file.is_file():
        raise SparringError(f"no evaluation report at {file}; write one with `sparring eval swe|search --out FOLDER`.")
    try:
        report = json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise SparringError(f"{file} is not JSON ({e.msg}); it is not an evaluation report.") from None
    if not isinstance(report, dict) or not {"domain", "records"} <= set(report):
        raise SparringError(f"{file} is not an evaluation report (no domain or records).")
    return report


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ci(stat: dict[str, Any], digits: int = 3) -> str:
    low, high = stat["ci"]
    return "–" if low is None else f"[{low:.{digits}f}, {high:.{digits}f}]"


def _row(name: str, stat: dict[str, Any], digits: int = 3) -> str:
    return f"| {name} | {_fmt(stat['mean'], digits)} | {_ci(stat, digits)} | {stat['n']} |"


def _cell(text: Any, limit: int) -> str:
    """``text`` as one Markdown table cell: on one line, pipes escaped, at most ``limit`` characters."""
    flat = " ".join(str(text or "").split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    return flat.replace("|", "\\|")


def markdown(report: dict[str, Any]) -> str:
    """``report.md``: the summary, the breakdowns, the failure reasons and every instance."""
    domain, summary = report["domain"], report["summary"]
    group_name, kind_name = GROUPS[domain]
    lines = [
        f"# Evaluation: {domain}, {report['split']} split",
        "",
        f"Model `{report['model']}`, {summary['instances']} instances, {summary['errors']} failed with an error "
        "(counted unsolved). Intervals: 95% bootstrap over instances.",
        "",
        "| metric | mean | 95% CI | n |",
        "| --- | --- | --- | --- |",
        _row(HEADLINE[domain], summary["score"]),
    ]
    extras = (("f1", "F1"), ("judged", "judged accuracy"), ("searches", "searches"),
              ("balanced_accuracy", "balanced accuracy"), ("auroc", "AUROC of P(solved)"),
              ("invalid", "invalid judgements"), ("random", "random pick's solve rate"),
              ("any", "some attempt solved"))  # fmt: skip
    for key, name in extras:
        if key in summary:
            lines.append(_row(name, summary[key], 3 if key != "searches" else 2))
    if "pick_vs_random" in summary:
        gain = summary["pick_vs_random"]
        lines.append(f"| pick − random (paired) | {_fmt(gain['difference'])} | {_ci(gain)} | {gain['n']} |")
    lines += [_row("turns", summary["turns"], 2), _row("tokens", summary["tokens"], 1)]
    lines += [_row("seconds per instance", summary["seconds"], 2), ""]
    if "solved_episodes" in summary:
        lines += [f"Judged episodes: {summary['solved_episodes']} solved, {summary['failed_episodes']} failed; "
                  f"P(solved) from: {', '.join(summary['auroc_from'])}.", ""]  # fmt: skip
    for title, key in ((group_name, "by_group"), (kind_name, "by_kind")):
        lines += [f"## {HEADLINE[domain]} by {title}", "", f"| {title} | {HEADLINE[domain]} | 95% CI | n |"]
        lines += ["| --- | --- | --- | --- |"] + [_row(f"`{k}`", v) for k, v in report[key].items()] + [""]
    lines += ["## Failure reasons", "", "| reason | count | share | 95% CI |", "| --- | --- | --- | --- |"]
    lines += [f"| {k} | {v['count']} | {_fmt(v['mean'])} | {_ci(v)} |" for k, v in report["reasons"].items()]
    if not report["reasons"]:
        lines.append("| none | 0 | – | – |")
    lines += ["", "## Instances", ""]
    extra = {
        "search": ["question", "gold answers", "answer"],
        "search-propose": ["question"],
        "judge": ["solved", "verdict", "P(solved)"],
        "best-of-n": ["question", "picked", "attempts solved"],
    }
    columns = extra.get(domain, ["changed files"])
    head = ["id", group_name, kind_name, "score", "turns", "tokens", "seconds", "reason", *columns]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in report["records"]:
        if domain == "search":
            details = [_cell(r.get("question"), 100), _cell(" / ".join(r.get("answers") or []), 60),
                       _cell(r.get("answer"), 60)]  # fmt: skip
        elif domain == "search-propose":
            details = [_cell(f"{r.get('answer') or ''}: {r.get('question') or ''}", 60)]
        elif domain == "judge":
            details = [str(r["label"]), str(r.get("verdict") or "invalid"), f"{r['p_solved']:.3f}"]
        elif domain == "best-of-n":
            tries = "".join("1" if t["solved"] else "0" for t in r["attempts_detail"])
            details = [_cell(r.get("question"), 80), str(r["picked"]), tries]
        else:
            details = [_cell(", ".join(r.get("changed_files") or []), 60)]
        tokens = "–" if r.get("tokens") is None else str(r["tokens"])
        lines.append(
            f"| `{r['id']}` | {r.get('group', '')} | {r.get('kind', '')} | {_fmt(r.get('score'), 2)} | {r['turns']} "
            f"| {tokens} | {r['seconds']:.1f} | {_cell(r.get('reason'), 60)} | {' | '.join(details)} |"
        )
    if report.get("plots"):
        lines += ["", "## Plots", ""] + [f"![{Path(p).stem}]({Path(p).name})" for p in report["plots"]]
    return "\n".join(lines) + "\n"
