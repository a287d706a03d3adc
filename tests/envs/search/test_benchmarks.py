"""Standard QA benchmarks on a corpus of one's own: FlashRAG question files, ``corpus add``, Search-R1 scoring.

The real files (NQ, HotpotQA..., a Wikipedia dump) cannot be downloaded here, so the tests write
small ones in the same formats and run the commands a user with the real files runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring import SparringError
from sparring.envs.search.heldout import load_questions
from sparring.envs.search.scoring import exact_match, f1_score, normalize_answer

#: (title, text) of the documents of the fixture corpus: each answer is the title of the entry its question finds.
DOCUMENTS = [
    ("Paris", "Paris is the capital and largest city of France, on the Seine."),
    ("Canberra", "Canberra is the capital city of Australia, planned as a compromise."),
    ("Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    ("Marie Curie", "Marie Curie was a physicist and chemist who won two Nobel Prizes, for radioactivity."),
    ("Danube", "The Danube is the second-longest river in Europe, flowing through Vienna and Budapest."),
    ("Penicillin", "Penicillin is an antibiotic discovered by Alexander Fleming in 1928."),
]
#: FlashRAG question lines (NQ-style and HotpotQA-style, with metadata.type): the first four are
#: answered by their top document's title, the last two are not.
QUESTIONS = [
    {"id": "test_0", "question": "what is the capital of france", "golden_answers": ["Paris"]},
    {"id": "test_1", "question": "which city is the capital of australia", "golden_answers": ["Canberra", "ACT"]},
    {"id": "test_2", "question": "highest mountain on earth above sea level", "golden_answers": ["the Mount Everest"],
     "metadata": {"type": "bridge"}},
    {"id": "test_3", "question": "who won two nobel prizes for radioactivity", "golden_answers": ["Marie Curie"],
     "metadata": {"type": "comparison"}},
    {"id": "test_4", "question": "who discovered penicillin in 1928", "golden_answers": ["Alexander Fleming"]},
    {"id": "test_5", "question": "which river flows through vienna and budapest", "golden_answers": ["Rhine"]},
]  # fmt: skip


def sparring(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with its own SPARRING_HOME (no default corpus needed)."""
    env = {**os.environ, "SPARRING_HOME": str(home), "COLUMNS": "250"}
    cmd = [sys.executable, "-m", "sparring.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, Path]:
    """A FlashRAG corpus file (``{"id", "contents": "\\"title\\"\\ntext"}``) and a FlashRAG question file."""
    docs = [{"id": str(n), "contents": f'"{title}"\n{text}'} for n, (title, text) in enumerate(DOCUMENTS)]
    return _write_jsonl(tmp_path / "wiki.jsonl", docs), _write_jsonl(tmp_path / "nq-test.jsonl", QUESTIONS)


def test_normalisation_is_search_r1s_and_f1_is_hotpotqas():
    # Search-R1's normalize_answer: lower, drop punctuation, drop articles, fix whitespace, in that order.
    assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
    assert normalize_answer("A Tale of Two Cities.") == "tale of two cities"
    assert normalize_answer("An  apple,\tthe pear") == "apple pear"
    assert exact_match("the Everest", "Everest") == 1.0 and exact_match("Mt. Everest", "Everest") == 0.0
    assert f1_score("Mount Everest", "Everest") == pytest.approx(2 / 3)
    # HotpotQA/FlashRAG: yes, no and noanswer earn no partial credit.
    assert f1_score("yes", "yes it is") == 0.0 and f1_score("no way", "no") == 0.0
    assert f1_score("Yes.", "yes") == 1.0


def test_a_flashrag_question_file_loads_with_its_types(files: tuple[Path, Path]):
    _, questions = files
    rows = load_questions(questions)
    assert [r["id"] for r in rows] == [q["id"] for q in QUESTIONS]
    assert rows[1]["answers"] == ["Canberra", "ACT"] and rows[0]["dataset"] == "nq-test"
    assert (rows[2]["type"], "type" in rows[0]) == ("bridge", False)
    assert len(load_questions(questions, limit=2)) == 2


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("not json", "nq.jsonl:2: not valid JSON"),
        ('{"id": "b", "golden_answers": ["x"]}', "nq.jsonl:2: no question text"),
        ('{"id": "b", "question": "q?", "golden_answers": {"x": 1}}', "nq.jsonl:2: golden_answers is not a list"),
        ('{"id": "b", "question": "q?", "golden_answers": ["the", "."]}', "nq.jsonl:2: no golden answer"),
        ('{"id": "a", "question": "q?", "golden_answers": ["x"]}', "nq.jsonl:2: the id 'a' occurs twice"),
    ],
)
def test_a_malformed_question_line_is_named_by_file_and_line(tmp_path: Path, line: str, says: str):
    path = tmp_path / "nq.jsonl"
    path.write_text('{"id": "a", "question": "q?", "golden_answers": ["x"]}\n' + line + "\n")
    with pytest.raises(SparringError, match=says):
        load_questions(path)


@pytest.mark.timeout(300)
def test_corpus_add_then_eval_search_on_a_flashrag_question_file(files: tuple[Path, Path], tmp_path: Path):
    corpus_file, questions = files
    home = tmp_path / "home"
    added = sparring("corpus", "add", "wiki", str(corpus_file), home=home)
    assert added.returncode == 0, added.stderr
    info = json.loads(added.stdout)
    # every document is kept (no held-out entry is withheld from a corpus of one's own), and indexed
    assert (info["documents"], info["heldout"], info["bm25_index"]) == (len(DOCUMENTS), 0, True)
    assert Path(info["folder"]) == home / "corpora" / "wiki"

    out = tmp_path / "floor"
    asked = ("eval", "search", "--questions", str(questions), "--corpus", "wiki", "--no-plots")
    run = sparring(*asked, "--model", "scripted:retrieval-floor", "--out", str(out), home=home)
    assert run.returncode == 0, run.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["split"] == "nq-test" and report["run"]["questions"]["file"] == str(questions)
    by_id = {r["id"]: r for r in report["records"]}
    assert [by_id[q["id"]]["em"] for q in QUESTIONS] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    assert by_id["test_4"]["answer"] == "Penicillin" and by_id["test_4"]["answers"] == ["Alexander Fleming"]
    assert report["summary"]["score"]["mean"] == pytest.approx(4 / 6)
    said = run.stderr.strip().splitlines()[-1]  # the rounded line a person reads, besides the JSON on stdout
    assert said.startswith("EM 0.667 [") and "on 6 instances (nq-test) · F1 0.67 · searches 1.0 · turns 2.0" in said
    assert said.endswith(f"0 errors · {out / 'report.md'}") and json.loads(run.stdout)["em"] == pytest.approx(4 / 6)
    markdown = (out / "report.md").read_text()  # each answer beside its question and gold answers
    assert "| question | gold answers | answer |" in markdown
    assert "| which city is the capital of australia | Canberra / ACT | Canberra |" in markdown
    assert "| who discovered penicillin in 1928 | Alexander Fleming | Penicillin |" in markdown
    assert set(report["by_group"]) == {"nq-test"} and set(report["by_kind"]) == {"bridge", "comparison", "question"}

    oracle = sparring(*asked, "--model", "scripted:oracle", "--out", str(tmp_path / "oracle"), home=home)
    assert oracle.returncode == 0, oracle.stderr
    assert json.loads((tmp_path / "oracle" / "report.json").read_text())["summary"]["score"]["mean"] == 1.0


@pytest.mark.timeout(300)
def test_a_corpus_of_ones_own_needs_questions_and_the_file_replaces_the_split(files: tuple[Path, Path], tmp_path: Path):
    corpus_file, questions = files
    home = tmp_path / "home"
    cases = [
        (["corpus", "add", "default", str(corpus_file)], "is the dictionary corpus that setup builds"),
        (["corpus", "add", "wiki", str(tmp_path / "nowhere.jsonl")], "no corpus file at"),
    ]
    for args, says in cases:
        run = sparring(*args, home=home)
        assert run.returncode == 2 and says in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert sparring("corpus", "add", "wiki", str(corpus_file), home=home).returncode == 0
    evals = [
        (["--corpus", "wiki"], "has no held-out questions"),
        (["--corpus", "wiki", "--questions", str(questions), "--split", "train"], "--questions replaces the split"),
        (["--corpus", "wiki", "--questions", str(tmp_path / "none.jsonl")], "no questions file at"),
    ]
    for args, says in evals:
        run = sparring("eval", "search", "--model", "scripted:oracle", "--out", str(tmp_path / "x"), *args, home=home)
        message = " ".join(run.stderr.split())
        assert run.returncode == 2 and says in message and "Traceback" not in message, message
        assert not (tmp_path / "x").exists()


@pytest.mark.timeout(300)
def test_limit_all_answers_every_question_and_draws_need_a_number(files: tuple[Path, Path], tmp_path: Path):
    corpus_file, questions = files
    home = tmp_path / "home"
    assert sparring("corpus", "add", "wiki", str(corpus_file), home=home).returncode == 0
    asked = ("eval", "search", "--corpus", "wiki", "--model", "scripted:oracle", "--no-plots")
    run = sparring(*asked, "--questions", str(questions), "--limit", "all", "--out", str(tmp_path / "all"), home=home)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["instances"] == len(QUESTIONS)
    refused = [
        (["--questions", str(questions), "--limit", "most"], "'most' is neither a whole number nor 'all'"),
        (["--split", "train", "--limit", "all"], "drawn questions have no end"),
    ]
    for args, says in refused:
        run = sparring(*asked, *args, "--out", str(tmp_path / "x"), home=home)
        message = " ".join(run.stderr.split())
        assert run.returncode == 2 and says in message and "Traceback" not in message, message


@pytest.mark.timeout(300)
def test_a_question_file_is_answered_over_a_retrieval_server_with_no_local_corpus(
    files: tuple[Path, Path], tmp_path: Path
):
    from sparring.envs.search.retrieval import BM25Retriever
    from sparring.envs.search.server import create_app
    from tests.envs.search.test_server import _serving

    corpus_file, questions = files
    assert sparring("corpus", "add", "wiki", str(corpus_file), home=tmp_path / "server").returncode == 0
    with _serving(create_app(BM25Retriever(tmp_path / "server" / "corpora" / "wiki"), "wiki")) as url:
        out = tmp_path / "remote"
        args = ["--questions", str(questions), "--retriever", f"{url}/retrieve", "--model", "scripted:retrieval-floor"]
        run = sparring("eval", "search", *args, "--out", str(out), "--no-plots", home=tmp_path / "client")
    assert run.returncode == 0, run.stderr
    records = json.loads((out / "report.json").read_text())["records"]
    assert [r["em"] for r in records] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # as over the local corpus
    assert not (tmp_path / "client" / "corpora").exists()  # the client read no corpus of its own
