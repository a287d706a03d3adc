"""Evaluation on held-out repositories and questions: ``sparring eval swe|search|search-propose|judge|compare``.

A model SPEC (:mod:`~.specs`) names the policy; an instance set (held-out bugs, held-out
questions) is played through :class:`~sparring.agents.runner.EpisodeRunner`, greedy, with one
fsync'd record per finished instance so an interrupted run resumes (:mod:`~.records`); the report
(:mod:`~.reports`, :mod:`~.plots`) gives every figure a 95% bootstrap interval (:mod:`~.stats`), and
two reports compare on their common instances with a paired bootstrap (:mod:`~.compare`). The judge
role is measured on held-out solver episodes, and by best-of-n picking (:mod:`~.judge`, :mod:`~.best_of`).

Example:
    >>> from sparring.agents.evaluation import SWEEvalConfig, run_swe_eval
    >>> report = run_swe_eval(SWEEvalConfig(model="scripted:oracle", n_bugs=3))  # doctest: +SKIP
    >>> report["summary"]["score"]["mean"]  # doctest: +SKIP
    1.0
"""

from __future__ import annotations

from sparring.agents.evaluation.best_of import evaluate_best_of
from sparring.agents.evaluation.compare import compare_reports, comparison_markdown
from sparring.agents.evaluation.config import EvalConfig
from sparring.agents.evaluation.judge import JudgeEvalConfig, evaluate_judge, run_judge_eval
from sparring.agents.evaluation.propose import ProposeEvalConfig, evaluate_propose, run_propose_eval
from sparring.agents.evaluation.records import EvalInterrupted
from sparring.agents.evaluation.reports import load_report, write_report
from sparring.agents.evaluation.search import SearchEvalConfig, evaluate_search, run_search_eval
from sparring.agents.evaluation.specs import ModelSpec, load_policy, parse_spec
from sparring.agents.evaluation.swe import SWEEvalConfig, evaluate_swe, run_swe_eval

__all__ = [
    "EvalConfig",
    "EvalInterrupted",
    "JudgeEvalConfig",
    "ModelSpec",
    "ProposeEvalConfig",
    "SWEEvalConfig",
    "SearchEvalConfig",
    "compare_reports",
    "comparison_markdown",
    "evaluate_best_of",
    "evaluate_judge",
    "evaluate_propose",
    "evaluate_search",
    "evaluate_swe",
    "load_policy",
    "load_report",
    "parse_spec",
    "run_judge_eval",
    "run_propose_eval",
    "run_search_eval",
    "run_swe_eval",
    "write_report",
]
