"""The search commands, run as a user runs them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from sparring.envs.search.corpus import Corpus
from tests.conftest import sparring_cli


def sparring(*args: str) -> subprocess.CompletedProcess[str]:
    return sparring_cli(*args, timeout=600)


def test_corpus_info_reports_documents_tokens_and_sources(corpus: Corpus):
    run = sparring("corpus", "info")
    assert run.returncode == 0, run.stderr
    info = json.loads(run.stdout)
    assert info["documents"] == len(corpus) and info["bm25_index"] and info["sources"]["foldoc"] > 10_000


def test_a_malformed_corpus_line_is_one_sentence_and_exit_2(tmp_path: Path):
    source = tmp_path / "bad.jsonl"
    source.write_text('{"id": 1, "contents": "\\"A\\"\\ntext"}\nnot json\n')
    run = sparring("corpus", "build", "--source", str(source), "--name", str(tmp_path / "bad"))
    assert run.returncode == 2
    message = " ".join(run.stderr.split())  # rich wraps long lines
    assert f"{source}:2: not valid JSON" in message and "Traceback" not in message
