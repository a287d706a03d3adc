"""``sparring eval judge --game swe`` in real containers: repair attempts at a real inflection bug, judged.

One judge set is recorded for the module (one bug; the oracle, the decoy repair and do-nothing: three
repair episodes at once, graded by the env) and every test reads it back, so the judges that need no
container (the knowing one, the constant one) cost nothing more; the rule judge runs the visible tests
of the two attempts that changed a file. The bugs are copied into a private ``SPARRING_HOME``, so the
instance set saved on first use does not land in the user's home.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparring import SparringError
from sparring.agents.evaluation import compare_reports
from sparring.agents.evaluation.best_of import evaluate_best_of
from sparring.agents.evaluation.judge import JudgeEvalConfig, evaluate_judge, judge_instances, set_episodes
from sparring.agents.evaluation.swe_agents import DECOY_COMMENT, VisibleTestsJudgeAgent
from sparring.envs.swe.judge_env import SWEJudgeEnv
from tests.agents.conftest import private_home, sparring

pytestmark = [pytest.mark.docker, pytest.mark.slow]

REPO = "inflection"
SOLVERS = ["scripted:oracle", "scripted:decoy-fix", "scripted:do-nothing"]
SET = ["--game", "swe", "--split", "train", "--repos", REPO, "--limit", "1", "--seed", "0"]


def _config(folder: Path, name: str, **options: Any) -> JudgeEvalConfig:
    base = {"game": "swe", "split": "train", "repos": REPO, "limit": 1, "seed": 0, "concurrency": 3,
            "episodes": str(folder / "set"), "out": str(folder / name), "plots": False}  # fmt: skip
    return JudgeEvalConfig(**base | options)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private home with the inflection bug store, as this process's and its subprocesses' SPARRING_HOME."""
    folder = private_home(tmp_path_factory, REPO, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPARRING_HOME", str(folder))
        yield folder


@pytest.fixture(scope="module")
def recorded(home: Path) -> tuple[Path, list[Any]]:
    """The module's judge set (the default solvers on one bug), recorded once: its folder and episodes."""
    folder = home / "evals"
    _, episodes = set_episodes(_config(folder, "unused", solvers="teachers"), {})
    return folder, episodes


@pytest.mark.timeout(600)
def test_the_set_holds_both_outcomes_and_the_judge_sees_nothing_hidden(recorded: tuple[Path, list[Any]]) -> None:
    folder, episodes = recorded
    assert [solver for solver, _, _ in episodes] == SOLVERS
    by_solver = {solver: ep for solver, _, ep in episodes}
    assert by_solver["scripted:oracle"].outcome["solved"]
    decoy = by_solver["scripted:decoy-fix"]  # it changed the buggy file, and the bug stayed in
    assert not decoy.outcome["solved"] and decoy.outcome["changed_files"] == [f"{REPO}/__init__.py"]
    assert DECOY_COMMENT in decoy.outcome["final"]["written"][f"{REPO}/__init__.py"]
    assert not by_solver["scripted:do-nothing"].outcome["solved"]
    instances = judge_instances(episodes, _config(folder, "unused"))
    assert [i.kind for i in instances] == ["solved", "failed", "failed"]
    verdicts = []
    for instance, (solver, _, attempt) in zip(instances, episodes, strict=True):
        task = instance.spec.options["task"]  # type: ignore[index]
        assert set(task) == {"id", "domain", "statement", "turns", "final", "sandbox"}
        artifact = attempt.task["artifact"]
        fix = [line[1:] for line in artifact["bug_inject_diff"].splitlines()
               if line.startswith("-") and not line.startswith("---") and line[1:].strip()]  # fmt: skip
        done = " ".join(t.action for t in attempt.turns)  # what the solver itself wrote
        env, judge = SWEJudgeEnv(), VisibleTestsJudgeAgent()
        try:
            obs, info = env.reset(options={"task": task})
            judge.reset(obs, info)
            seen, terminated = [obs], False
            while not terminated:
                obs, reward, terminated, truncated, step = env.step(judge.act(obs, info))
                assert reward == 0.0 and not truncated
                seen.append(obs)
        finally:
            env.close()
        assert step["outcome"]["valid"]
        verdicts.append(step["outcome"]["verdict"])
        # the submission's observation (it states the grade) and the grading never reach the judge
        assert attempt.turns[-1].observation and attempt.turns[-1].observation not in seen[0]
        for text in seen:
            for secret in ("Submitted; graded", "graded solved", "graded not solved", "every test passes"):
                assert secret not in text, (solver, secret)
            for line in fix:  # the bug's fix is shown only where the solver itself wrote it
                assert line not in text or line in done, (solver, line)
            for test_id in attempt.task["fail_to_pass"]:  # the ids grading checks
                assert test_id not in text, (solver, test_id)
    # the rule judge: visible tests pass on the oracle's tree and on the decoy's (the revealing tests are
    # weakened), so the decoy fools it; an attempt that changed nothing is "not solved" without a run
    assert verdicts == ["solved", "solved", "not solved"]


@pytest.mark.timeout(300)
def test_a_knowing_judge_is_perfect_and_a_constant_one_is_chance(recorded: tuple[Path, list[Any]]) -> None:
    folder, _ = recorded
    oracle = evaluate_judge(_config(folder, "oracle", model="scripted:oracle"))
    never = evaluate_judge(_config(folder, "never", model="scripted:never-solved"))
    s, n = oracle["summary"], never["summary"]
    assert (s["solved_episodes"], s["failed_episodes"]) == (1, 2)
    assert (s["score"]["mean"], s["balanced_accuracy"]["mean"], s["auroc"]["mean"]) == (1.0, 1.0, 1.0)
    assert n["balanced_accuracy"]["mean"] == 0.5 and n["auroc"]["mean"] == 0.5 and n["invalid"]["mean"] == 0.0
    assert n["score"]["mean"] == pytest.approx(2 / 3)  # right on every failure
    assert oracle["run"]["game"] == "swe" and {r["group"] for r in oracle["records"]} == set(SOLVERS)
    compared = compare_reports(str(folder / "never"), str(folder / "oracle"))
    assert compared["common"] == 3 and compared["balanced_accuracy"]["difference"] == 0.5


@pytest.mark.timeout(300)
def test_best_of_n_picks_among_repair_attempts(recorded: tuple[Path, list[Any]]) -> None:
    """Greedy attempts are the set's own episodes (a greedy attempt draws nothing), so they are read back."""
    folder, _ = recorded
    attempts = folder / "attempts"
    for j, solver in enumerate(["scripted_decoy-fix", "scripted_oracle"]):
        shutil.copytree(folder / "set" / solver, attempts / f"a{j}")
    options = {"best_of": 2, "solver": "scripted:decoy-fix,scripted:oracle", "solver_temperature": 0.0,
               "episodes": str(attempts)}  # fmt: skip
    knowing = evaluate_best_of(_config(folder, "bo-oracle", model="scripted:oracle", **options))
    never = evaluate_best_of(_config(folder, "bo-never", model="scripted:never-solved", **options))
    (record,) = knowing["records"]
    assert record["group"] == REPO and record["kind"].startswith("procedural:")
    assert (record["picked"], record["score"], record["random"], record["any"]) == (1, 1.0, 0.5, 1.0)
    assert knowing["summary"]["pick_vs_random"]["difference"] == 0.5
    # a constant verdict ties the attempts: the earlier one, the decoy, is picked
    assert never["records"][0]["picked"] == 0 and never["summary"]["pick_vs_random"]["difference"] == -0.5
    assert len(list(attempts.glob("a*/records.jsonl"))) == 2  # no attempt was played again


@pytest.mark.timeout(300)
def test_the_cli_reads_the_set_back_and_refuses_what_cannot_judge(home: Path, recorded: tuple[Path, list[Any]]) -> None:
    folder, _ = recorded
    out = folder / "cli"
    logs = sorted((folder / "set").glob("*/records.jsonl"))
    written = [log.stat().st_mtime_ns for log in logs]
    run = sparring(home, "eval", "judge", "--model", "scripted:oracle", *SET, "--episodes", str(folder / "set"),
                   "--out", str(out))  # fmt: skip
    assert run.returncode == 0, run.stderr
    printed = json.loads(run.stdout)
    assert printed["balanced_accuracy"] == 1.0 and printed["instances"] == 3
    assert len(logs) == 3 and [log.stat().st_mtime_ns for log in logs] == written  # the set was read back
    # refused in one sentence before any set is recorded (in process: a CLI start each would cost seconds)
    for options, why in [({"game": "search", "model": "scripted:visible-tests"}, "add --game swe"),
                         ({"game": "chess"}, "unknown game 'chess'"), ({"limit": None}, "give --limit N")]:  # fmt: skip
        with pytest.raises(SparringError, match=why):
            evaluate_judge(_config(folder, "no", **options | {"episodes": str(folder / "no-set")}))
    assert not (folder / "no").exists() and not (folder / "no-set").exists()
