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

from sparring.agents.evaluation.config import GROUPS, HEADLINE
from sparring.agents.evaluation.stats import mean_ci

__all__ = ["headline", "load_report", "markdown", "summary_line", "summarize", "write_report"]

REPORT_FILE = "report.json"


def _values(records: list[dict[str, Any]], key: str) -> list[float]:
    return [float(r[key]) for r in records if r.get(key) is not None]


def summarize(domain: str, records: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline and usage figures of a set of records, each with its interval."""
    summary: dict[str, Any] = {"instances": len(records), "score": mean_ci(_values(records, "score"))}
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
    metric = {"swe": "solve_rate", "search-propose": "valid_rate"}.get(report["domain"], "em")
    for key, value in report["summary"].items():
        name = metric if key == "score" else key
        if isinstance(value, dict):
            flat[name], flat[f"{name}_ci"] = value["mean"], value["ci"]
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
    for key, name in (("f1", "F1"), ("judged", "judged accuracy"), ("searches", "searches")):
        if key in summary:
            lines.append(_row(name, summary[key], 3 if key != "searches" else 2))
    lines += [_row("turns", summary["turns"], 2), _row("tokens", summary["tokens"], 1)]
    lines += [_row("seconds per instance", summary["seconds"], 2), ""]
    for title, key in ((group_name, "by_group"), (kind_name, "by_kind")):
        lines += [f"## {HEADLINE[domain]} by {title}", "", f"| {title} | {HEADLINE[domain]} | 95% CI | n |"]
        lines += ["| --- | --- | --- | --- |"] + [_row(f"`{k}`", v) for k, v in report[key].items()] + [""]
    lines += ["## Failure reasons", "", "| reason | count | share | 95% CI |", "| --- | --- | --- | --- |"]
    lines += [f"| {k} | {v['count']} | {_fmt(v['mean'])} | {_ci(v)} |" for k, v in report["reasons"].items()]
    if not report["reasons"]:
        lines.append("| none | 0 | – | – |")
    lines += ["", "## Instances", ""]
    extra = {"search": ["question", "gold answers", "answer"], "search-propose": ["question"]}
    columns = extra.get(domain, ["changed files"])
    head = ["id", group_name, kind_name, "score", "turns", "tokens", "seconds", "reason", *columns]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in report["records"]:
        if domain == "search":
            details = [_cell(r.get("question"), 100), _cell(" / ".join(r.get("answers") or []), 60),
                       _cell(r.get("answer"), 60)]  # fmt: skip
        elif domain == "search-propose":
            details = [_cell(f"{r.get('answer') or ''}: {r.get('question') or ''}", 60)]
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
