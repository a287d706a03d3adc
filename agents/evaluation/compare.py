"""``sparring eval compare A B``: two reports side by side on their common instances, paired.

The difference is B − A of the headline score (SWE: solved; search: EM) over the instances both
reports hold, with a paired-bootstrap 95% interval (instances resampled, each keeping its pair of
scores). Instances that only one report holds are listed, never silently dropped; the same holds
for each repository / question kind row.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sparring import SparringError
from sparring.agents.evaluation.config import GROUPS, HEADLINE
from sparring.agents.evaluation.reports import load_report
from sparring.agents.evaluation.stats import auroc, balanced_accuracy, paired_difference, paired_statistic

__all__ = ["compare_reports", "comparison_markdown"]

#: Instances of one side only named in the Markdown (``--json`` lists them all).
LISTED = 20


def compare_reports(a: str, b: str) -> dict[str, Any]:
    """Compare the reports at ``a`` and ``b`` (``report.json`` files or evaluation folders).

    Raises:
        SparringError: A report is missing, or the two are of different domains or share no instance.
    """
    left, right = load_report(a), load_report(b)
    if left["domain"] != right["domain"]:
        raise SparringError(
            f"{a} is a {left['domain']} report and {b} a {right['domain']} one; compare like with like."
        )
    scores_a = {r["id"]: r for r in left["records"]}
    scores_b = {r["id"]: r for r in right["records"]}
    common = [i for i in scores_a if i in scores_b]
    if not common:
        raise SparringError(
            f"{a} and {b} share no instance; evaluate both on the same set (same --seed or --instances)."
        )

    def paired(ids: list[str]) -> dict[str, Any]:
        return paired_difference([float(scores_a[i]["score"]) for i in ids], [float(scores_b[i]["score"]) for i in ids])

    by: dict[str, dict[str, list[str]]] = {"group": {}, "kind": {}}
    for key in by:
        for i in common:
            by[key].setdefault(str(scores_a[i].get(key) or "?"), []).append(i)
    result: dict[str, Any] = {
        "domain": left["domain"],
        "a": {"report": str(a), "model": left["model"], "split": left["split"], "instances": len(scores_a)},
        "b": {"report": str(b), "model": right["model"], "split": right["split"], "instances": len(scores_b)},
        "common": len(common),
        "overall": paired(common),
        "by_group": {name: paired(ids) for name, ids in sorted(by["group"].items())},
        "by_kind": {name: paired(ids) for name, ids in sorted(by["kind"].items())},
        "changed": {
            "a_only_solved": sorted(i for i in common if scores_a[i]["score"] > scores_b[i]["score"]),
            "b_only_solved": sorted(i for i in common if scores_b[i]["score"] > scores_a[i]["score"]),
        },
        "only_in_a": sorted(i for i in scores_a if i not in scores_b),
        "only_in_b": sorted(i for i in scores_b if i not in scores_a),
    }
    if left["domain"] == "judge":
        result |= _judge_statistics([scores_a[i] for i in common], [scores_b[i] for i in common])
    return result


def _judge_statistics(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> dict[str, Any]:
    """Two judges' balanced accuracy and AUROC on the same episodes, B − A with a paired-bootstrap interval."""
    labels = np.array([bool(r["label"]) for r in a])
    right = [np.array([bool(r["score"]) for r in side]) for side in (a, b)]
    scores = [np.array([float(r["p_solved"]) for r in side]) for side in (a, b)]
    n = len(labels)
    return {
        "balanced_accuracy": paired_statistic(
            lambda i: balanced_accuracy(labels[i], right[0][i]), lambda i: balanced_accuracy(labels[i], right[1][i]), n
        ),
        "auroc": paired_statistic(
            lambda i: auroc(labels[i], scores[0][i]), lambda i: auroc(labels[i], scores[1][i]), n
        ),
    }


def _row(name: str, stat: dict[str, Any]) -> str:
    if stat["difference"] is None or stat["ci"][0] is None:  # undefined: e.g. a balanced accuracy on one class
        return f"| {name} | {stat['n']} | – | – | – | – |"
    low, high = stat["ci"]
    return (
        f"| {name} | {stat['n']} | {stat['a']:.3f} | {stat['b']:.3f} | {stat['difference']:+.3f} "
        f"| [{low:+.3f}, {high:+.3f}] |"
    )


def comparison_markdown(result: dict[str, Any]) -> str:
    """The comparison as Markdown tables."""
    domain = result["domain"]
    headline = HEADLINE[domain]
    group_name, kind_name = GROUPS[domain]
    a, b = result["a"], result["b"]
    head = "| {} | n | A | B | B − A | 95% paired CI |\n| --- | --- | --- | --- | --- | --- |"
    lines = [
        f"# {headline}: B − A on {result['common']} common instances",
        "",
        f"A: `{a['model']}` ({a['split']}, {a['report']}); B: `{b['model']}` ({b['split']}, {b['report']})",
        "",
        head.format("set"),
        _row("all common", result["overall"]),
        *(
            _row(name, result[key])
            for key, name in (("balanced_accuracy", "balanced accuracy"), ("auroc", "AUROC"))
            if key in result
        ),  # fmt: skip
        "",
        head.format(group_name),
        *(_row(f"`{k}`", v) for k, v in result["by_group"].items()),
        "",
        head.format(kind_name),
        *(_row(f"`{k}`", v) for k, v in result["by_kind"].items()),
        "",
    ]
    for key, what in (("only_in_a", "only in A"), ("only_in_b", "only in B")):
        ids = result[key]
        shown = ", ".join(f"`{i}`" for i in ids[:LISTED]) + (
            f" and {len(ids) - LISTED} more" if len(ids) > LISTED else ""
        )
        lines.append(f"{len(ids)} instance(s) {what}" + (f": {shown}" if ids else "."))
    return "\n".join(lines) + "\n"
