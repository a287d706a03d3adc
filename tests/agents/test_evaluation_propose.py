"""``sparring eval search-propose``: the proposer's valid-question rate on the real corpus, with real validators."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from sparring.agents.answering import generator_answer_fn
from sparring.agents.evaluation import ProposeEvalConfig, compare_reports, evaluate_propose, load_policy, parse_spec
from sparring.envs.search.corpus import Corpus
from sparring.envs.search.validation import GroundingValidator, PolicyValidator
from tests.agents.test_evaluation import sparring

SCRIPTED = "scripted:definition-proposer"


def _config(tmp_path: Path, name: str, **options: Any) -> ProposeEvalConfig:
    return ProposeEvalConfig(**{"limit": 6, "concurrency": 3, "out": str(tmp_path / name), "plots": False} | options)


class Knowing(PolicyValidator):
    """Answers every question with its first accepted answer: a validator that always reads right."""

    def __init__(self) -> None:
        super().__init__(self._answer, closed_book=False)  # it would know every answer unaided too
        self._lock = threading.Lock()
        self._accepted: list[str] = []

    def validate(self, proposals: Any) -> Any:
        with self._lock:  # the envs of the run share one validator
            self._accepted = [p.accepted()[0] for p in proposals]
            return super().validate(proposals)

    def _answer(self, prompts: list[str]) -> list[str]:
        return [f"<answer>{a}</answer>" for a in self._accepted]


@pytest.mark.timeout(300)
def test_validation_decides_the_score_and_the_reason(corpus: Corpus, tmp_path: Path) -> None:
    policy = load_policy(parse_spec(SCRIPTED), "search-propose")
    right = evaluate_propose(policy, Knowing(), _config(tmp_path, "right", validator="knows"))
    wrong = evaluate_propose(
        policy, PolicyValidator(lambda ps: ["<answer>Nothing Else</answer>"] * len(ps)), _config(tmp_path, "wrong")
    )
    filtered = {r["id"] for r in right["records"] if r["reasons"] and not r["reasons"][0].startswith("solver_")}
    assert len(filtered) < 6  # the scripted proposer's questions mostly pass the rule filters
    for r in right["records"]:
        assert r["score"] == (0.0 if r["id"] in filtered else 1.0), r
        assert r["answer"] and r["searches"] == 2 and r["group"] in {"wn", "gcide", "foldoc", "jargon", "elements"}
    for r in wrong["records"]:
        assert r["score"] == 0.0 and r["reason"], r
        if r["id"] not in filtered:
            assert r["reason"] == "solver_answered_other" and r["validator_answer"] == "Nothing Else"
    assert [r["answer"] for r in right["records"]] == [r["answer"] for r in wrong["records"]]  # the same seeds
    assert right["summary"]["score"]["mean"] == (6 - len(filtered)) / 6 > 0.0
    comparison = compare_reports(right["out"], wrong["out"])
    assert comparison["domain"] == "search-propose" and comparison["common"] == 6
    assert comparison["overall"]["difference"] == pytest.approx(-right["summary"]["score"]["mean"])
    assert len(comparison["changed"]["a_only_solved"]) == 6 - len(filtered)


@pytest.mark.timeout(300)
def test_the_cli_reports_the_valid_rate_and_resumes(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "grounded"
    args = ["eval", "search-propose", "--model", SCRIPTED, "--validator", "grounding", "--limit", "4"]
    args += ["--out", str(out)]
    run = sparring(*args)
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    report = json.loads((out / "report.json").read_text())
    assert printed["valid_rate"] == report["summary"]["score"]["mean"] and printed["searches"] == 2.0
    assert report["domain"] == "search-propose" and report["run"]["validator"] == "grounding"
    assert "| valid rate |" in (out / "report.md").read_text()
    failed = {"failures.png"} if report["reasons"] else set()  # drawn only when a proposal failed
    assert {Path(p).name for p in report["plots"]} == {"scores.png", "usage.png"} | failed
    again = sparring(*args)  # a finished run replays nothing
    assert again.returncode == 0, again.stderr
    assert json.loads((out / "report.json").read_text())["records"] == report["records"]


@pytest.mark.timeout(300)
def test_propose_eval_user_errors_are_one_sentence(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "errors"
    cases = [
        (["--model", SCRIPTED, "--split", "heldout"], "the held-out answers' entries are withheld"),
        (["--model", SCRIPTED], "scripted agent with no model to validate its questions"),
        (["--model", SCRIPTED, "--validator", "scripted:oracle"], "a validator is a model SPEC, self or grounding"),
        (["--model", "scripted:oracle", "--validator", "grounding"], "plays search, swe only, not search-propose"),
        (["--model", SCRIPTED, "--validator", "grounding", "--limit", "0"], "--limit must be at least 1"),
    ]
    for args, says in cases:
        run = sparring("eval", "search-propose", "--out", str(out), *args)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        message = run.stderr.strip()
        assert "Traceback" not in run.stderr and says in message and len(message.splitlines()) == 1, message
    assert not (out / "records.jsonl").exists()


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_default_model_proposes_and_validates_its_own_questions(
    corpus: Corpus, smollm2: Any, tmp_path: Path
) -> None:
    config = _config(tmp_path, "self", limit=2, max_turns=2, max_new_tokens=8)  # the path, not the quality
    report = evaluate_propose(smollm2, PolicyValidator(generator_answer_fn(smollm2)), config)
    assert len(report["records"]) == 2 and all(r["tokens"] and r["tokens"] <= 16 for r in report["records"])
    assert all(r["reason"] or r["score"] == 1.0 for r in report["records"])
    scripted = load_policy(parse_spec(SCRIPTED), "search-propose")
    grounded = evaluate_propose(scripted, GroundingValidator(), _config(tmp_path, "grounded", limit=2))
    assert [r["answer"] for r in grounded["records"]] == [r["answer"] for r in report["records"]]
