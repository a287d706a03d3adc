"""The ``sparring eval`` commands: ``swe``, ``search``, ``search-propose``, ``judge`` (options from dataclasses),
``compare``."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer

__all__ = ["register"]


def _run(run: Any, config: Any) -> None:
    """Run an evaluation and say its result in one line on stderr (the JSON on stdout is for programs);
    an interrupted one says how to resume and exits with 128 + the signal."""
    from sparring.agents.evaluation.records import EvalInterrupted
    from sparring.agents.evaluation.reports import summary_line

    if config.threads:
        import torch

        torch.set_num_threads(config.threads)
    try:
        report = run(config)
    except EvalInterrupted as e:
        print(str(e), file=sys.stderr)
        raise typer.Exit(128 + e.signum) from None
    print(summary_line(report), file=sys.stderr)


def _eval_swe(config: Any) -> None:
    from sparring.agents.evaluation.swe import run_swe_eval

    _run(run_swe_eval, config)


def _eval_search(config: Any) -> None:
    from sparring.agents.evaluation.search import run_search_eval

    _run(run_search_eval, config)


def _eval_propose(config: Any) -> None:
    from sparring.agents.evaluation.propose import run_propose_eval

    _run(run_propose_eval, config)


def _eval_judge(config: Any) -> None:
    if config.best_of is not None or config.solver is not None:
        from sparring.agents.evaluation.best_of import run_best_of_eval

        _run(run_best_of_eval, config)
    else:
        from sparring.agents.evaluation.judge import run_judge_eval

        _run(run_judge_eval, config)


def _eval_compare(
    a: str = typer.Argument(..., help="Report A: a report.json or an evaluation folder."),
    b: str = typer.Argument(..., help="Report B, compared with A on their common instances."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of Markdown tables."),
    plot: str = typer.Option(
        None,
        "--plot",
        help="Also draw the differences (overall, per group, per kind) with their intervals in this PNG.",
    ),
) -> None:
    """Compare two evaluation reports on their common instances: B − A with a paired-bootstrap 95% interval."""
    from pathlib import Path

    from sparring.agents.evaluation.compare import compare_reports, comparison_markdown
    from sparring.agents.evaluation.plots import draw_comparison

    result = compare_reports(a, b)
    print(json.dumps(result, indent=1) if as_json else comparison_markdown(result))
    if plot and draw_comparison(result, Path(plot)):
        print(f"differences drawn in {plot}", file=sys.stderr)


def register(groups: dict[str, typer.Typer]) -> None:
    """Add ``eval swe``, ``eval search``, ``eval search-propose``, ``eval judge`` and ``eval compare``."""
    from sparring.agents.evaluation.propose import ProposeEvalConfig
    from sparring.agents.evaluation.search import SearchEvalConfig
    from sparring.agents.evaluation.swe import SWEEvalConfig
    from sparring.config_cli import config_command

    swe_help = (
        "Repair a seeded, fixed set of validated bugs from held-out repositories; write report.json, report.md and "
        "plots to --out. Rerun the same command to resume."
    )
    groups["eval"].command("swe")(config_command(SWEEvalConfig, _eval_swe, swe_help))
    search_help = (
        "Answer the held-out questions with search: EM, F1, searches and turns; write report.json, report.md and "
        "plots to --out. Rerun the same command to resume."
    )
    groups["eval"].command("search")(
        config_command(SearchEvalConfig, _eval_search, search_help, all_means_none=["limit"])
    )
    propose_help = (
        "Play the search game's proposer on seed answers drawn from the corpus: the valid-question rate (rule filters "
        "and RAG validation by --validator), its rejection reasons and searches; write report.json, report.md and "
        "plots to --out. Rerun the same command to resume."
    )
    groups["eval"].command("search-propose")(
        config_command(ProposeEvalConfig, _eval_propose, propose_help, all_means_none=["limit"])
    )
    from sparring.agents.evaluation.judge import JudgeEvalConfig

    judge_help = (
        "Play the judge role of --model on held-out solver episodes of --game search or swe (recorded from --solvers "
        "on first use): accuracy, balanced accuracy, AUROC and invalid share, with intervals; or, with --best-of N "
        "--solver SPEC, the judge picks one of N attempts per question or bug: the pick's solve rate against a "
        "random pick's, paired. "
        "Writes report.json, report.md and plots to --out. Rerun the same command to resume."
    )
    groups["eval"].command("judge")(config_command(JudgeEvalConfig, _eval_judge, judge_help, all_means_none=["limit"]))
    groups["eval"].command("compare")(_eval_compare)
