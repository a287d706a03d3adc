"""The search commands, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.envs.search.corpus import Corpus


def sparring(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparring.cli", *args], capture_output=True, text=True, timeout=600)


def test_corpus_info_reports_documents_tokens_and_sources(corpus: Corpus):
    run = sparring("corpus", "info")
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)
    assert info["documents"] == len(corpus) and info["bm25_index"] and info["sources"]["foldoc"] > 10_000


@pytest.mark.timeout(300)
def test_eval_search_runs_the_model_free_baseline_on_the_heldout_set(corpus: Corpus, tmp_path: Path):
    out = tmp_path / "records.jsonl"
    run = sparring("eval", "search", "--backend", "baseline", "--limit", "30", "--out", str(out))
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["questions"] == 30 and report["searches_per_question"] == 1.0
    records = [json.loads(line) for line in out.open()]
    assert len(records) == 30 and report["em"] == sum(r["em"] for r in records) / 30
    assert 0.0 < report["em"] < 1.0  # some held-out questions are solved by the top title, not all


def test_a_malformed_corpus_line_is_one_sentence_and_exit_2(tmp_path: Path):
    source = tmp_path / "bad.jsonl"
    source.write_text('{"id": 1, "contents": "\\"A\\"\\ntext"}\nnot json\n')
    run = sparring("corpus", "build", "--source", str(source), "--name", str(tmp_path / "bad"))
    assert run.returncode == 2
    message = " ".join(run.stderr.split())  # rich wraps long lines
    assert f"{source}:2: not valid JSON" in message and "Traceback" not in message
