"""``sparring eval judge``: the judge role on held-out solver episodes of the real corpus, and best-of-n."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from sparring.agents.evaluation import compare_reports
from sparring.agents.evaluation.best_of import evaluate_best_of, pick
from sparring.agents.evaluation.judge import (
    JudgeEvalConfig,
    evaluate_judge,
    judge_instances,
    set_episodes,
    verdict_probability,
)
from sparring.agents.evaluation.reports import judge_summary
from sparring.agents.evaluation.stats import auroc, balanced_accuracy, paired_statistic, statistic_ci
from sparring.config_cli import field_docs
from sparring.envs.core import Episode
from sparring.envs.search.corpus import Corpus
from sparring.envs.search.judge_env import SearchJudgeEnv
from tests.agents.test_evaluation import sparring

SOLVERS = "scripted:definition-match,scripted:retrieval-floor"


def _config(tmp_path: Path, name: str, **options: Any) -> JudgeEvalConfig:
    base = {"limit": 8, "concurrency": 4, "solvers": SOLVERS, "episodes": str(tmp_path / "set"),
            "out": str(tmp_path / name), "plots": False}  # fmt: skip
    return JudgeEvalConfig(**base | options)


# --------------------------------------------------------------------------- metrics, by hand


def test_the_metrics_on_a_hand_built_set() -> None:
    # 2 solved, 3 failed. Verdicts: solved ✓, solved ✗(→not), failed ✓, ✓, ✗(→solved).
    labels = [True, True, False, False, False]
    right = [True, False, True, True, False]
    assert balanced_accuracy(labels, right) == pytest.approx((1 / 2 + 2 / 3) / 2)
    # positives 0.9, 0.4; negatives 0.1, 0.4, 0.8: 0.9 beats 3; 0.4 beats 1, ties 1 → (3 + 1.5) / 6
    assert auroc(labels, [0.9, 0.4, 0.1, 0.4, 0.8]) == pytest.approx(4.5 / 6)
    assert np.isnan(balanced_accuracy([True, True], [True, False])) and np.isnan(auroc([False], [0.3]))
    scores, valid = [0.9, 0.4, 0.1, 0.4, 0.8], [1, 1, 1, 0, 1]
    records = [{"label": y, "score": float(r), "p_solved": p, "valid": v, "p_from": "token"}
               for y, r, p, v in zip(labels, right, scores, valid, strict=True)]  # fmt: skip
    summary = judge_summary(records)
    assert summary["balanced_accuracy"]["mean"] == pytest.approx(7 / 12)
    assert summary["auroc"]["mean"] == pytest.approx(0.75)
    assert summary["invalid"]["mean"] == pytest.approx(0.2)
    assert (summary["solved_episodes"], summary["failed_episodes"]) == (2, 3)
    low, high = summary["balanced_accuracy"]["ci"]
    assert 0.0 <= low <= 7 / 12 <= high <= 1.0 and low < high
    # paired: B − A of the same statistic is exact on the whole set, and 0 with a 0-wide interval for equal sides
    same = paired_statistic(lambda i: float(np.mean(i)), lambda i: float(np.mean(i)), 5)
    assert same["difference"] == 0.0 and same["ci"] == [0.0, 0.0]
    assert statistic_ci(lambda i: float(len(i)), 4)["ci"] == [4.0, 4.0]


def test_the_pick_rule() -> None:
    tries = [{"verdict": "not solved", "p_solved": 0.45}, {"verdict": None, "p_solved": 0.5},
             {"verdict": "solved", "p_solved": 0.7}, {"verdict": "solved", "p_solved": 0.9}]  # fmt: skip
    assert pick(tries) == 3  # judged solved, and surest
    assert pick(tries[:3] + [{"verdict": "solved", "p_solved": 0.7}]) == 2  # a tie goes to the earlier
    assert pick(tries[:2]) == 1  # none judged solved: the highest P(solved), an invalid one's 0.5 included
    assert pick([{"verdict": "not solved", "p_solved": 0.0}] * 3) == 0


def test_the_verdict_probability_is_read_at_the_token_where_the_verdicts_part(smollm2: Any) -> None:
    tokenizer = smollm2.tokenizer
    for verdict in ("solved", "not solved"):
        arguments = json.dumps({"verdict": verdict, "assessments": "good"})
        call = f'<tool_call>{{"name": "judge", "arguments": {arguments}}}</tool_call>'
        ids = tokenizer.encode(call, add_special_tokens=False)
        prefix = len(tokenizer.decode(ids)) - len(call)
        start = call.index(verdict) + prefix
        k = next(k for k in range(len(ids)) if len(tokenizer.decode(ids[: k + 1])) > start)
        logprobs = [-5.0] * len(ids)
        logprobs[k] = float(np.log(0.8))
        episode = Episode("x", "judge", "search", "t", {}, "p", token_ids=[1, *ids], token_turn=[-1] + [0] * len(ids),
                          action_mask=[False] + [True] * len(ids), logprobs=[0.0, *logprobs])  # fmt: skip
        assert verdict_probability(episode, tokenizer) == pytest.approx(0.8)
    assert verdict_probability(Episode("x", "judge", "search", "t", {}, "p"), tokenizer) is None


# --------------------------------------------------------------------------- on the real corpus


@pytest.mark.timeout(300)
def test_the_judge_view_carries_no_gold_answer_and_no_outcome(corpus: Corpus, tmp_path: Path) -> None:
    config = _config(tmp_path, "unused")
    _, episodes = set_episodes(config, {})
    assert {solver for solver, _, _ in episodes} == set(SOLVERS.split(","))
    instances = judge_instances(episodes, config)
    assert {i.kind for i in instances} == {"solved", "failed"}  # both outcomes are in the set
    env = SearchJudgeEnv()
    for instance, (_, _, solver_episode) in zip(instances, episodes, strict=True):
        task = instance.spec.options["task"]  # type: ignore[index]
        assert set(task) == {"id", "domain", "statement", "turns", "final"}
        prompt, _ = env.reset(options={"task": task})
        # the answering turn's observation (it states the grade) is never shown
        assert not task["turns"][-1]["observation"] and solver_episode.turns[-1].observation not in prompt
        for word in ("correct", "exact match", "reward", '"em"'):
            assert word not in prompt.lower()
        # a gold answer is shown only where the solver itself wrote or read it, never as the gold
        seen = " ".join(f"{t['action']} {t['observation']} {task['final']} {task['statement']}" for t in task["turns"])
        for answer in solver_episode.task["answers"]:
            assert answer.lower() not in prompt.lower() or answer.lower() in seen.lower()
    env.close()


@pytest.mark.timeout(300)
def test_a_judge_that_knows_the_outcome_is_perfect_and_a_constant_one_is_chance(corpus: Corpus, tmp_path: Path) -> None:
    oracle = evaluate_judge(_config(tmp_path, "oracle", model="scripted:oracle"))
    never = evaluate_judge(_config(tmp_path, "never", model="scripted:never-solved"))
    s, n = oracle["summary"], never["summary"]
    assert s["solved_episodes"] > 0 and s["failed_episodes"] > 0
    assert (s["score"]["mean"], s["balanced_accuracy"]["mean"], s["auroc"]["mean"]) == (1.0, 1.0, 1.0)
    assert n["balanced_accuracy"]["mean"] == 0.5 and n["auroc"]["mean"] == 0.5 and n["invalid"]["mean"] == 0.0
    assert n["score"]["mean"] == pytest.approx(n["failed_episodes"] / n["instances"])  # right on every failure
    compared = compare_reports(str(tmp_path / "never"), str(tmp_path / "oracle"))
    assert compared["common"] == s["instances"] == 16
    assert compared["balanced_accuracy"]["difference"] == 0.5 and compared["auroc"]["difference"] == 0.5
    assert compared["by_kind"]["failed"]["difference"] == 0.0 and compared["by_kind"]["solved"]["difference"] == 1.0


@pytest.mark.timeout(300)
def test_best_of_n_with_a_knowing_judge_is_at_least_a_random_pick(corpus: Corpus, tmp_path: Path) -> None:
    options = {"best_of": 2, "solver": SOLVERS, "episodes": str(tmp_path / "attempts")}  # both judges, one set
    oracle = evaluate_best_of(_config(tmp_path, "bo-oracle", model="scripted:oracle", **options))
    never = evaluate_best_of(_config(tmp_path, "bo-never", model="scripted:never-solved", **options))
    records = oracle["records"]
    # the attempts differ (the two solvers disagree somewhere), so picking can matter
    assert any(0 < r["random"] < 1 for r in records)
    # knowing the outcome, the pick solved whenever some attempt did
    assert all(r["score"] == r["any"] >= r["random"] for r in records)
    gain = oracle["summary"]["pick_vs_random"]
    assert gain["difference"] > 0 and gain["ci"][0] >= 0
    assert gain["difference"] == pytest.approx(oracle["summary"]["score"]["mean"] - oracle["summary"]["random"]["mean"])
    # a constant verdict ties every attempt: the earlier one, attempt 0 (definition-match), is picked
    assert all(r["picked"] == 0 and r["score"] == float(r["attempts_detail"][0]["solved"]) for r in never["records"])
    assert oracle["summary"]["instances"] == 8 and (tmp_path / "bo-oracle" / "judged" / "report.json").is_file()
    compared = compare_reports(str(tmp_path / "bo-never"), str(tmp_path / "bo-oracle"))  # the two picks, paired
    assert compared["common"] == 8 and compared["overall"]["difference"] == pytest.approx(
        oracle["summary"]["score"]["mean"] - never["summary"]["score"]["mean"]
    )


@pytest.mark.timeout(300)
def test_the_cli_runs_end_to_end_and_resumes(corpus: Corpus, tmp_path: Path) -> None:
    docs = field_docs(JudgeEvalConfig)  # every option has its help line
    assert {f.name for f in dataclasses.fields(JudgeEvalConfig)} == set(docs) and all(docs.values())
    out = tmp_path / "cli"
    args = ["eval", "judge", "--model", "scripted:oracle", "--limit", "3", "--solvers", SOLVERS,
            "--episodes", str(tmp_path / "set"), "--out", str(out)]  # fmt: skip
    run = sparring(*args)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed["accuracy"] == printed["balanced_accuracy"] == 1.0 and printed["instances"] == 6
    assert "balanced accuracy 1.000" in run.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["domain"] == "judge" and "| balanced accuracy |" in (out / "report.md").read_text()
    again = sparring(*args)  # a finished run replays nothing, and the set is read back
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "report.json").read_text())["records"] == report["records"]
    best = sparring("eval", "judge", "--model", "scripted:oracle", "--best-of", "2", "--solver", SOLVERS,
                    "--limit", "3", "--out", str(tmp_path / "best"))  # fmt: skip
    assert best.returncode == 0, best.stderr
    assert "pick − random" in best.stderr and json.loads(best.stdout)["pick_solve_rate"] is not None
    bad = sparring("eval", "judge", "--best-of", "1", "--solver", SOLVERS, "--out", str(tmp_path / "bad"))
    assert bad.returncode != 0 and "--best-of N (at least 2)" in bad.stderr


@pytest.mark.timeout(600)
def test_the_default_model_judges_through_the_real_env(corpus: Corpus, smollm2: Any, tmp_path: Path) -> None:
    from sparring.agents.evaluation.judge import judge_records

    config = _config(tmp_path, "default", model="default", limit=1, max_new_tokens=48)
    _, episodes = set_episodes(config, {})
    instances = judge_instances(episodes, config)
    records = judge_records(smollm2, instances, config, tmp_path / "default", {"domain": "judge", "model": "default"})
    assert len(records) == 2 and all(r["tokens"] for r in records)
    for r in records:  # a valid verdict is scored by its token's probability; an invalid one is 0.5 and wrong
        assert (
            (r["p_from"] == "token" and 0.0 <= r["p_solved"] <= 1.0)
            if r["valid"]
            else (r["p_solved"] == 0.5 and r["score"] == 0.0 and r["invalid_reason"])
        )
