"""``sparring eval search``: answer questions with search, EM and F1 (and a judge's verdict), through the runner.

The held-out split is the corpus's held-out set (never in training: the headwords are no seed
answers and their entries are withheld from the corpus, see :mod:`sparring.envs.search.heldout`).
The train split is questions the answer env draws from the corpus's seeds, draw ``i`` with seed
``i``. ``--questions FILE`` answers a FlashRAG QA file instead (NQ, TriviaQA, PopQA, HotpotQA,
2Wiki, MuSiQue, Bamboogle: :func:`~sparring.envs.search.heldout.load_questions`), over any corpus
(``--corpus``, e.g. one added with ``sparring corpus add``) or retrieval server (``--retriever``);
the report names the file as its split. Every question is one greedy
:class:`~sparring.envs.search.answer_env.SearchAnswerEnv` episode, so a model, an endpoint and a
scripted agent are measured the same way, and scored by Search-R1's normalisation
(:mod:`~sparring.envs.search.scoring`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sparring import SparringError
from sparring.agents.episodes import Episode
from sparring.agents.evaluation.config import (
    EvalConfig,
    check_ranges,
    check_split,
    out_dir,
    run_identity,
    runner_config,
)
from sparring.agents.evaluation.records import Instance, play
from sparring.agents.evaluation.reports import headline, write_report
from sparring.agents.evaluation.specs import load_policy, parse_spec
from sparring.agents.runner import EpisodeSpec
from sparring.envs.search.corpus import DEFAULT_CORPUS

__all__ = [
    "SearchEvalConfig",
    "SearchSettings",
    "draws",
    "evaluate_search",
    "question_kind",
    "question_source",
    "record_fn",
    "require_seeds",
    "run_search_eval",
    "search_instances",
]

#: Question kinds by the source of the entry they were made from.
_KINDS = {"wn": "wordnet", "foldoc": "computing", "jargon": "computing", "elements": "element"}


@dataclass
class SearchSettings(EvalConfig):
    """What both search evaluations (answering, proposing) run with."""

    max_turns: int = 4
    """Turn limit per episode (searches plus the answer or question)."""
    max_new_tokens: int = 64
    """Tokens generated per turn at most."""
    concurrency: int = 8
    """Episodes played at once (and the largest generation batch)."""
    corpus: str = DEFAULT_CORPUS
    """Corpus searched (and whose questions or seed answers are used)."""
    retriever: str | None = None
    """Retrieval server URL (default: BM25 over the corpus, in-process)."""
    limit: int | None = 50
    """Instances to run: the first N questions of the held-out set or --questions file (all: every one), or
    draws 0..N-1 of the train split and the proposer's seeds (a number: draws have no end)."""
    topk: int = 3
    """Documents per search."""


@dataclass
class SearchEvalConfig(SearchSettings):
    """What ``sparring eval search`` runs."""

    judge: str | None = None
    """openai:URL#MODEL of a judge that decides answers exact match rejects (judged accuracy)."""
    questions: str | None = None
    """A FlashRAG QA JSONL file (id, question, golden_answers per line: NQ, HotpotQA, ...) to answer instead of
    the corpus's held-out set; the report's split is the file's name."""


def question_source(row: dict[str, Any]) -> str:
    """The corpus source of the entry a question was made from (``wn:balloon`` -> wn), or a file's dataset."""
    if row.get("dataset"):
        return str(row["dataset"])
    return str(row.get("doc", "")).split(":", 1)[0] or "other"


def question_kind(row: dict[str, Any]) -> str:
    """The kind of a question, by its entry's source: wordnet, computing (FOLDOC, Jargon File), element;
    a file's question by its ``metadata.type`` (HotpotQA's bridge, comparison), else ``question``."""
    if row.get("dataset"):
        return str(row.get("type") or "question")
    source = question_source(row)
    return _KINDS.get(source, source)


def draws(limit: int | None) -> int:
    """How many draws ``--limit`` asks for: drawn questions or seeds have no end, so ``all`` is refused."""
    if limit is None:
        raise SparringError("--limit all counts a fixed question set; drawn questions have no end, give --limit N.")
    return limit


def questions_split(config: SearchEvalConfig) -> str:
    """The split a report names: ``--split``, or the ``--questions`` file's name (``nq-test.jsonl`` -> nq-test)."""
    return Path(config.questions).stem if config.questions else config.split


def require_seeds(corpus: str) -> None:
    """Refuse, in one sentence, a corpus with no seed answers (not built) before any model loads."""
    from sparring.envs.search.corpus import corpus_dir

    folder = corpus_dir(corpus)
    if not (folder / "seeds.jsonl").is_file():
        raise SparringError(f"the corpus {corpus!r} is not built in {folder}; run `sparring corpus build`.")


def search_instances(config: SearchEvalConfig) -> list[Instance]:
    """The questions of the split, in order, each an episode of the answer env."""
    from sparring.envs.search.answer_env import SearchAnswerEnv
    from sparring.envs.search.corpus import corpus_dir
    from sparring.envs.search.heldout import load_heldout, load_questions

    check_ranges(config)
    check_split(config.split)

    def make_env() -> SearchAnswerEnv:
        return SearchAnswerEnv(
            max_turns=config.max_turns, corpus=config.corpus, retriever=config.retriever, topk=config.topk
        )

    folder = corpus_dir(config.corpus)
    if config.questions:
        if config.split != "heldout":
            raise SparringError("--questions replaces the split with the file's questions; leave --split out.")
        rows = load_questions(config.questions, config.limit)
    elif config.split == "train":
        require_seeds(config.corpus)
        return [
            Instance(f"train-{i:04d}", EpisodeSpec(make_env, seed=i), "seeds", "seed")
            for i in range(draws(config.limit))
        ]
    else:
        rows = load_heldout(folder, config.limit)
        if not rows:
            raise SparringError(
                f"the corpus {config.corpus!r} has no held-out questions (a corpus of your own has none); "
                "pass your questions with --questions FILE."
            )
    return [
        Instance(
            row["id"], EpisodeSpec(make_env, seed=i, options={"task": row}), question_source(row), question_kind(row)
        )
        for i, row in enumerate(rows)
    ]


def _judge_fn(spec_text: str | None, timeout_s: float) -> Any:
    if not spec_text:
        return None
    from sparring.agents.answering import openai_judge_fn
    from sparring.agents.evaluation.specs import probe_endpoint

    spec = parse_spec(spec_text)
    if spec.kind != "openai" or not spec.model:
        raise SparringError(f"--judge {spec_text!r} must be openai:URL#MODEL (an OpenAI-compatible chat endpoint).")
    probe_endpoint(spec.target, timeout_s)
    return openai_judge_fn(spec.target, spec.model, timeout_s=timeout_s)


def record_fn(judge: Any) -> Any:
    """The record of a finished search episode: EM, F1, the answer, the reason it failed (and ``judge``'s verdict)."""

    def record_of(instance: Instance, episode: Episode) -> dict[str, Any]:
        outcome = dict(episode.outcome)
        em, f1 = float(outcome.get("em", 0.0)), float(outcome.get("f1", 0.0))
        answer = outcome.get("answer")
        task = episode.task or {}
        if episode.error:
            reason = "error"
        elif em == 1.0:
            reason = None
        elif outcome.get("copied_example"):
            reason = "copied_example"
        elif answer is None:
            reason = str(outcome.get("status") or "no_answer")
        else:
            reason = "wrong_answer"
        record: dict[str, Any] = {
            "solved": em == 1.0,
            "score": em,
            "em": em,
            "f1": f1,
            "answer": answer,
            "answers": list(task.get("answers") or outcome.get("answers") or []),
            "question": task.get("question"),
            "searches": len(outcome.get("queries") or []),
            "reason": reason,
            "outcome": outcome,
        }
        if judge is not None:
            record["judged"] = _judged(judge, record)
        return record

    return record_of


def _judged(judge: Any, record: dict[str, Any]) -> float | None:
    """1.0 if exact match holds or the judge accepts the answer, 0.0 if not, None if the judge failed."""
    if record["em"] == 1.0:
        return 1.0
    if not record["answer"] or not record["answers"] or not record["question"]:
        return 0.0
    try:
        return 1.0 if judge(record["question"], record["answers"][0], record["answer"]) else 0.0
    except SparringError as e:  # the record says so; the question counts as not judged correct
        record["judge_error"] = str(e)
        return None


def evaluate_search(policy: Any, config: SearchEvalConfig, judge: Any = None) -> dict[str, Any]:
    """Play ``policy`` on the split's questions into the evaluation folder and write the report.

    Args:
        policy: A generator, or a factory of scripted agents (see :func:`load_policy`).
        config: The evaluation.
        judge: ``judge(question, reference, prediction) -> bool`` for judged accuracy, or None.

    Returns:
        The report (``report.json``'s content).
    """
    instances = search_instances(config)
    named = replace(config, split=questions_split(config))
    out = out_dir(named, "search", f"n{len(instances)}")
    settings: dict[str, Any] = {"corpus": config.corpus, "topk": config.topk, "judged": judge is not None}
    if config.questions:  # a changed file is another evaluation, not one to resume
        path = Path(config.questions).expanduser()
        settings["questions"] = {"file": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    run = run_identity(named, "search", **settings)
    records = play(instances, policy, runner_config(config), out, run, record_fn(judge))
    return write_report(out, run, records, plots=config.plots)


def run_search_eval(config: SearchEvalConfig) -> dict[str, Any]:
    """``sparring eval search``: load the SPEC, evaluate, write the report, print its summary as JSON."""
    spec = parse_spec(config.model)
    search_instances(config)  # a missing corpus or a bad split is one sentence before a model loads
    judge = _judge_fn(config.judge, config.request_timeout)
    policy = load_policy(
        spec, "search", chat_only=config.chat_only, timeout_s=config.request_timeout, device=config.device
    )
    report = evaluate_search(policy, config, judge)
    print(json.dumps(headline(report)))
    return report
