"""Evaluation: SPECs, bootstrap intervals, reports, compare, resume, and the search eval on real held-out questions.

The SWE evaluation in real containers is in ``test_evaluation_swe.py``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.evaluation import (
    EvalInterrupted,
    SearchEvalConfig,
    compare_reports,
    comparison_markdown,
    evaluate_search,
    load_policy,
    parse_spec,
    write_report,
)
from sparring.agents.evaluation.plots import bar_labels, comparison_rows, usage_panels
from sparring.agents.evaluation.records import RecordLog, check_run
from sparring.agents.evaluation.specs import checkpoint_model_dir
from sparring.agents.evaluation.stats import mean_ci, paired_difference
from sparring.agents.evaluation.swe_instances import load_instance_file
from sparring.agents.scripted import OracleAgent
from sparring.envs.search.corpus import Corpus
from tests.conftest import sparring_cli as sparring

# --------------------------------------------------------------------------- SPECs


def test_every_spec_form_parses() -> None:
    assert parse_spec("default").kind == "default"
    assert (parse_spec("HuggingFaceTB/SmolLM2-360M-Instruct").kind, parse_spec("gpt2").kind) == ("vllm", "vllm")
    assert (parse_spec("hf:gpt2").kind, parse_spec("hf:gpt2").target, parse_spec("hf:default").target) == (
        "hf",
        "gpt2",
        "default",
    )
    spec = parse_spec("openai:http://127.0.0.1:8000/v1/#served")
    assert (spec.kind, spec.target, spec.model) == ("openai", "http://127.0.0.1:8000/v1", "served")
    assert parse_spec("openai:https://api.example.com/v1").model is None
    assert (parse_spec("vllm:Qwen/Qwen3-8B").kind, parse_spec("scripted:retrieval-floor").target) == (
        "vllm",
        "retrieval-floor",
    )


def test_a_checkpoint_folder_resolves_to_its_model(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for step in ("iter-000002", "iter-000010"):  # laid out as training/checkpoint.py writes them
        (run / "checkpoints" / step / "model").mkdir(parents=True)
        (run / "checkpoints" / step / "model" / "config.json").write_text("{}")
        (run / "checkpoints" / step / "model" / "model.safetensors").write_bytes(b"")
        (run / "checkpoints" / step / "config.json").write_text('{"iterations": 10}')  # the training config
    newest = run / "checkpoints" / "iter-000010" / "model"
    assert checkpoint_model_dir(run) == newest  # a run folder: its newest checkpoint
    (run / "checkpoints" / "latest").write_text("iter-000002\n")
    assert checkpoint_model_dir(run) == run / "checkpoints" / "iter-000002" / "model"  # unless `latest` says
    assert parse_spec(str(run / "checkpoints" / "iter-000010")).target == str(newest)
    assert parse_spec(str(newest)).target == str(newest)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("scripted:genius", "unknown scripted agent 'genius'"),
        ("openai:localhost:8000", "names no server URL"),
        ("vllm:", "names no model"),
        ("tgi:gpt2", "unknown form"),
        ("hf:", "names no model"),
        ("hf:scripted:oracle", "names no model"),
        ("./no/such/folder", "no model folder at ./no/such/folder"),
    ],
)
def test_a_malformed_spec_is_one_sentence(text: str, says: str) -> None:
    with pytest.raises(SparringError, match=says):
        parse_spec(text)


def test_a_folder_without_a_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SparringError, match="holds no model"):
        parse_spec(str(tmp_path))


def test_scripted_agents_play_only_their_domains() -> None:
    assert isinstance(load_policy(parse_spec("scripted:oracle"), "swe")(None), OracleAgent)
    with pytest.raises(SparringError, match="plays search only, not swe"):
        load_policy(parse_spec("scripted:retrieval-floor"), "swe")
    with pytest.raises(SparringError, match="--chat-only goes with an openai"):
        load_policy(parse_spec("default"), "search", chat_only=True)


# --------------------------------------------------------------------------- statistics and compare


def test_every_numeric_eval_option_has_a_range_and_a_value_outside_it_is_one_sentence(tmp_path: Path) -> None:
    from sparring.agents.evaluation.config import RANGES, check_ranges
    from sparring.agents.evaluation.propose import ProposeEvalConfig, run_propose_eval
    from sparring.agents.evaluation.search import SearchEvalConfig, run_search_eval
    from sparring.agents.evaluation.swe import SWEEvalConfig
    from sparring.config_cli import numeric_fields

    for kind in (SearchEvalConfig, ProposeEvalConfig, SWEEvalConfig):
        numeric = numeric_fields(kind)
        assert numeric <= set(RANGES), f"{kind.__name__} has numeric options without a range: {numeric - set(RANGES)}"
        check_ranges(kind())  # the defaults are inside
    for config, message in [
        (SearchEvalConfig(max_turns=0), "--max-turns must be at least 1, not 0"),
        (SearchEvalConfig(limit=-5), "--limit must be at least 1, not -5"),
        (SearchEvalConfig(max_seconds=0.0), "--max-seconds must be above 0, not 0.0"),
        (SearchEvalConfig(max_new_tokens=-1), "--max-new-tokens must be at least 1"),
        (SWEEvalConfig(seed=-1), "--seed must not be negative, not -1"),
        (SWEEvalConfig(test_timeout=float("nan")), "--test-timeout must be above 0, not nan"),
        (ProposeEvalConfig(topk=0), "--topk must be at least 1"),
    ]:
        with pytest.raises(SparringError, match=message):
            check_ranges(config)
    out = tmp_path / "never"
    with pytest.raises(SparringError, match="--max-turns must be at least 1"):
        run_search_eval(SearchEvalConfig(model="scripted:oracle", max_turns=0, out=str(out)))
    with pytest.raises(SparringError, match="--limit must be at least 1"):
        run_propose_eval(ProposeEvalConfig(model="scripted:definition-proposer", limit=0, out=str(out)))
    assert not out.exists()


def test_bootstrap_intervals_hold_the_mean_and_are_seeded() -> None:
    stat = mean_ci([1, 0, 1, 1, 0, 1, 1, 1, 0, 1])
    assert stat["mean"] == 0.7 and stat["ci"][0] < 0.7 < stat["ci"][1] and stat["n"] == 10
    assert mean_ci([1, 0, 1, 1, 0, 1, 1, 1, 0, 1]) == stat
    assert mean_ci([1, 1, 1])["ci"] == [1.0, 1.0] and mean_ci([])["mean"] is None
    assert paired_difference([0, 0, 1], [1, 1, 1])["difference"] == pytest.approx(2 / 3)


def _records(scores: dict[str, float], group: str = "pkg") -> list[dict[str, Any]]:
    return [
        {"id": i, "group": group, "kind": "procedural:off_by_one", "score": s, "solved": s == 1.0, "reward": 2 * s - 1}
        | {"turns": 3, "tokens": None, "seconds": 1.0, "error": None, "reason": None if s else "tests_fail"}
        for i, s in scores.items()
    ]


def _report(out: Path, model: str, scores: dict[str, float]) -> Path:
    run = {"domain": "swe", "model": model, "split": "heldout"}
    write_report(out, run, _records(scores), plots=False)
    return out / "report.json"


def test_compare_pairs_common_instances_and_lists_the_rest(tmp_path: Path) -> None:
    a = {f"bug-{i:02d}": 1.0 if i < 10 else 0.0 for i in range(40)}  # solves 10 of 40
    b = {f"bug-{i:02d}": 1.0 if i < 30 else 0.0 for i in range(40)}  # solves 30 of 40, every one A solves
    a["only-a"], b["only-b"] = 1.0, 0.0
    _report(tmp_path / "b", "B", b)
    result = compare_reports(str(_report(tmp_path / "a", "A", a)), str(tmp_path / "b"))  # a file, a folder
    overall = result["overall"]
    assert result["common"] == 40 and overall["a"] == 0.25 and overall["b"] == 0.75
    assert overall["difference"] == pytest.approx(0.5)
    assert overall["ci"][0] < 0.5 < overall["ci"][1] and overall["ci"][0] > 0.3  # paired: tight, excludes 0
    assert result["only_in_a"] == ["only-a"] and result["only_in_b"] == ["only-b"]
    assert len(result["changed"]["b_only_solved"]) == 20 and result["changed"]["a_only_solved"] == []
    text = comparison_markdown(result)
    assert "| all common | 40 | 0.250 | 0.750 | +0.500 |" in text and "1 instance(s) only in A: `only-a`" in text
    assert [name for name, _ in comparison_rows(result)] == [
        "all common (n=40)",
        "repository pkg (n=40)",
        "bug kind procedural:off_by_one (n=40)",
    ]
    drawn = sparring("eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--plot", str(tmp_path / "d.png"))
    assert drawn.returncode == 0 and f"differences drawn in {tmp_path / 'd.png'}" in drawn.stderr, drawn.stderr
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (tmp_path / "d.png").stat().st_size > 5000


def test_compare_refuses_reports_with_nothing_in_common(tmp_path: Path) -> None:
    with pytest.raises(SparringError, match="share no instance"):
        compare_reports(str(_report(tmp_path / "a", "A", {"x": 1.0})), str(_report(tmp_path / "b", "B", {"y": 1.0})))
    with pytest.raises(SparringError, match="no evaluation report at"):
        compare_reports(str(tmp_path / "a"), str(tmp_path / "missing"))


# --------------------------------------------------------------------------- records and resume


def test_a_record_cut_off_mid_write_is_dropped_and_the_log_goes_on(tmp_path: Path) -> None:
    log = RecordLog(tmp_path / "records.jsonl")
    log.append({"id": "a", "score": 1.0})
    with log.path.open("a") as fh:
        fh.write('{"id": "b", "sco')  # a process killed while writing
    assert list(log.load()) == ["a"]
    log.append({"id": "b", "score": 0.0})
    assert list(log.load()) == ["a", "b"] and log.path.read_text().count("\n") == 2


def test_a_folder_of_another_run_is_refused(tmp_path: Path) -> None:
    check_run(tmp_path, {"model": "a", "split": "heldout", "instances": ["x"]})
    check_run(tmp_path, {"model": "a", "split": "heldout", "instances": ["x"]})  # the same: resumes
    with pytest.raises(SparringError, match="other model; resume it with the same options"):
        check_run(tmp_path, {"model": "b", "split": "heldout", "instances": ["x"]})
    check_run(tmp_path, {"model": "a", "split": "heldout", "instances": ["x", "y"]})  # more instances: extends
    assert json.loads((tmp_path / "run.json").read_text())["instances"] == ["x", "y"]
    with pytest.raises(SparringError, match="other instances; resume it"):
        check_run(tmp_path, {"model": "a", "split": "heldout", "instances": ["y", "z"]})  # not a superset
    with pytest.raises(SparringError, match="other instances, model; resume it"):
        check_run(tmp_path, {"model": "b", "split": "heldout", "instances": ["x", "y", "z"]})


def test_exported_instances_replay_as_repair_tasks(tmp_path: Path) -> None:
    row = {
        "instance_id": "owner__pkg-abc",
        "repo": "owner/pkg",
        "repo_name": "pkg",
        "version": "1.0",
        "base_commit": "",
        "environment_setup_commit": "",
        "image": "sparring-swe/pkg:abc",
        "repo_image": "sparring-repo/pkg:1.0",
        "bug_patch": "--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n",
        "test_weaken_patch": "",
        "test_script": "pytest test_m.py",
        "test_files": json.dumps(["test_m.py"]),
        "test_parser": "",
        "FAIL_TO_PASS": json.dumps(["test_m.py::test_x"]),
        "PASS_TO_PASS": json.dumps([]),
        "order": 1,
        "origin": "procedural:off_by_one",
    }
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (task,) = load_instance_file(path)
    assert task["id"] == "owner__pkg-abc" and task["fail_to_pass"] == ["test_m.py::test_x"]
    assert task["artifact"]["bug_inject_diff"] == row["bug_patch"] and task["image"] == row["repo_image"]
    assert task["artifact"]["repo"] == "pkg"  # the catalog's name, which the envs look the repository up by
    path.write_text(json.dumps({k: v for k, v in row.items() if k != "bug_patch"}) + "\n")
    with pytest.raises(SparringError, match="lacks bug_patch; only instances written by"):
        load_instance_file(path)


# --------------------------------------------------------------------------- search, on the real held-out set


def _search(tmp_path: Path, name: str, **options: Any) -> SearchEvalConfig:
    return SearchEvalConfig(**{"limit": 20, "concurrency": 4, "out": str(tmp_path / name)} | options)


def _evaluate(config: SearchEvalConfig, spec: str = "") -> dict[str, Any]:
    return evaluate_search(load_policy(parse_spec(spec or config.model), "search"), config)


@pytest.mark.timeout(300)
def test_search_oracle_scores_1_and_do_nothing_0_and_the_reports_say_so(corpus: Corpus, tmp_path: Path) -> None:
    oracle = _evaluate(_search(tmp_path, "oracle", model="scripted:oracle"))
    nothing = _evaluate(_search(tmp_path, "nothing", model="scripted:do-nothing"))
    for report, em in ((oracle, 1.0), (nothing, 0.0)):
        out = Path(report["out"])
        on_disk = json.loads((out / "report.json").read_text())
        assert on_disk["summary"]["score"]["mean"] == em and on_disk["summary"]["score"]["ci"] == [em, em]
        assert len(on_disk["records"]) == 20 and all(r["em"] == em for r in on_disk["records"])
        assert all(len(r["actions"]) == r["turns"] == 1 for r in on_disk["records"])
        assert f"| EM | {em:.3f} | [{em:.3f}, {em:.3f}] | 20 |" in (out / "report.md").read_text()
        drawn = {"scores.png", "usage.png"} | ({"failures.png"} if em == 0.0 else set())  # none drawn empty
        assert {Path(p).name for p in on_disk["plots"]} == drawn
        assert all((out / name).stat().st_size > 1000 for name in drawn)
        assert usage_panels(on_disk) == ["turns", "searches"]  # a scripted agent counts no tokens: no panel
        assert _png_width(out / "usage.png") == 2 * 5.5 * 110
    assert nothing["reasons"]["wrong_answer"]["count"] == 20  # an empty answer is a wrong one, with its reason
    assert oracle["reasons"] == {}


def _png_width(path: Path) -> int:
    """A PNG's width in pixels, from its IHDR chunk."""
    return int.from_bytes(path.read_bytes()[16:20], "big")


@pytest.mark.timeout(300)
def test_failure_bars_count_the_instances_that_failed_for_their_reason(corpus: Corpus, tmp_path: Path) -> None:
    report = _evaluate(_search(tmp_path, "floor", model="scripted:retrieval-floor"))
    wrong = sum(1 for r in report["records"] if r["reason"] == "wrong_answer")
    assert 0 < wrong < 20 and report["reasons"]["wrong_answer"]["n"] == 20  # a share of all 20 instances
    assert bar_labels(report["reasons"]) == [f"wrong_answer\n(n={wrong})"]  # the instances it counts, not all 20
    assert bar_labels(report["by_kind"])[0].endswith(f"(n={report['by_kind'][next(iter(report['by_kind']))]['n']})")


@pytest.mark.timeout(300)
def test_a_judge_accepts_answers_exact_match_rejects(corpus: Corpus, tmp_path: Path) -> None:
    asked: list[tuple[str, str, str]] = []

    def judge(question: str, reference: str, prediction: str) -> bool:
        asked.append((question, reference, prediction))
        return True

    config = _search(tmp_path, "judged", model="scripted:retrieval-floor")
    report = evaluate_search(load_policy(parse_spec(config.model), "search"), config, judge)
    records = report["records"]
    wrong = [r for r in records if r["em"] < 1.0 and r["answer"]]
    assert len(asked) == len(wrong) > 0  # asked only where exact match failed and there is an answer
    assert all(r["judged"] == 1.0 for r in records if r["answer"])
    assert report["summary"]["judged"]["mean"] >= report["summary"]["score"]["mean"]
    assert "| judged accuracy |" in (Path(report["out"]) / "report.md").read_text()


@pytest.mark.timeout(300)
def test_the_retrieval_floor_runs_from_the_cli(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "floor"
    run = sparring("eval", "search", "--model", "scripted:retrieval-floor", "--limit", "20", "--out", str(out))
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    report = json.loads((out / "report.json").read_text())
    assert printed["em"] == report["summary"]["score"]["mean"] and printed["searches"] == 1.0
    assert 0.0 < printed["em"] < 1.0  # some held-out questions are solved by the top title, not all
    assert printed["em_ci"][0] <= printed["em"] <= printed["em_ci"][1]


@pytest.mark.timeout(300)
def test_an_interrupted_search_eval_resumes_to_the_same_report(corpus: Corpus, tmp_path: Path) -> None:
    whole = _evaluate(_search(tmp_path, "whole", model="scripted:retrieval-floor"))
    config = _search(tmp_path, "resumed", model="scripted:retrieval-floor")
    started = []

    def interrupted_on_the_ninth(spec: Any) -> Any:
        started.append(spec)
        if len(started) == 9:
            raise KeyboardInterrupt  # as Ctrl-C would, in the middle of the run
        return load_policy(parse_spec("scripted:retrieval-floor"), "search")(spec)

    with pytest.raises(EvalInterrupted, match="of 20 instances are recorded in"):
        evaluate_search(interrupted_on_the_ninth, config)
    done = RecordLog(Path(config.out or "") / "records.jsonl").load()
    assert 0 < len(done) < 20
    resumed = _evaluate(config)
    keys = ("id", "score", "f1", "answer", "turns", "searches", "reason")
    assert [{k: r[k] for k in keys} for r in resumed["records"]] == [{k: r[k] for k in keys} for r in whole["records"]]
    assert resumed["summary"]["score"] == whole["summary"]["score"]
    again = _evaluate(config)  # a finished run replays nothing and reports the same
    assert [r["seconds"] for r in again["records"]] == [r["seconds"] for r in resumed["records"]]
    extended = _evaluate(replace(config, limit=30))  # a larger --limit plays only the new instances
    assert len(extended["records"]) == 30 and extended["summary"]["instances"] == 30
    assert [r["seconds"] for r in extended["records"][:20]] == [r["seconds"] for r in resumed["records"]]


class _FailingServer:
    """A chat endpoint that answers with the gold answer, then goes away for good after ``calls`` requests."""

    name = "failing"

    def __init__(self, calls: int):
        self.calls = calls

    def chat(self, conversations: Any, sampling: Any, tools: Any = None) -> list[Any]:
        from sparring import ServerUnavailable
        from sparring.agents.generation import Generation

        self.calls -= 1
        if self.calls < 0:
            raise ServerUnavailable("the policy server at http://x/v1 did not answer after 3 tries.")
        answers = [c[-1]["content"].rsplit("Question: ", 1)[-1] for c in conversations]
        return [Generation([], [], f"<answer>{a}</answer>", "stop") for a in answers]


@pytest.mark.timeout(300)
def test_a_server_gone_midway_stops_the_run_keeping_what_is_done(corpus: Corpus, tmp_path: Path) -> None:
    config = _search(tmp_path, "gone", concurrency=1)
    with pytest.raises(SparringError, match=r"after 3 tries; 3 of 20 instances are recorded in .*same command resumes"):
        evaluate_search(_FailingServer(calls=3), config)
    assert len(RecordLog(Path(config.out or "") / "records.jsonl").load()) == 3


@pytest.mark.timeout(300)
def test_user_errors_are_one_sentence_and_lose_nothing(corpus: Corpus, tmp_path: Path) -> None:
    out = tmp_path / "kept"
    _evaluate(_search(tmp_path, "kept", model="scripted:oracle", limit=3))
    before = (out / "records.jsonl").read_bytes()
    cases = [
        (["--model", "scripted:genius"], "unknown scripted agent 'genius'"),
        (["--model", "scripted:oracle", "--split", "validation"], "unknown split 'validation'"),
        (["--model", "openai:http://127.0.0.1:9/v1#m"], "the policy server"),
        (["--model", "scripted:oracle", "--corpus", str(tmp_path / "nowhere")], "rebuild the corpus"),
        (["--model", "scripted:do-nothing", "--limit", "3"], "other model; resume it with the same options"),
    ]
    for args, says in cases:
        run = sparring("eval", "search", "--out", str(out), *args)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        message = run.stderr.strip()
        assert "Traceback" not in run.stderr and says in message and len(message.splitlines()) == 1, message
        assert (out / "records.jsonl").read_bytes() == before, args


@pytest.mark.model
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_default_model_is_evaluated_through_the_runner(corpus: Corpus, smollm2: Any, tmp_path: Path) -> None:
    config = SearchEvalConfig(limit=2, max_turns=1, max_new_tokens=8, out=str(tmp_path / "model"))
    report = evaluate_search(smollm2, config)
    assert len(report["records"]) == 2 and all(r["tokens"] and r["tokens"] <= 8 for r in report["records"])
    assert report["summary"]["tokens"]["n"] == 2 and report["summary"]["turns"]["mean"] == 1.0
