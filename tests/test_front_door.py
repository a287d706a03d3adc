"""The front door's first-hour surface: --version, doctor's environment report, help texts naming real options."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import sparring

SPARRING = str(Path(sys.executable).with_name("sparring"))


def _sparring(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed CLI; COLUMNS is wide so that no table cell or message is wrapped."""
    environ = {**os.environ, "COLUMNS": "300"}
    return subprocess.run([SPARRING, *args], capture_output=True, text=True, timeout=240, env=environ)


def test_version_prints_the_package_version() -> None:
    run = _sparring("--version")
    assert (run.returncode, run.stdout.strip()) == (0, f"sparring {sparring.__version__}")


def test_doctor_reports_versions_gpus_and_the_held_out_images() -> None:
    run = _sparring("doctor")
    rows = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in run.stdout.splitlines()
            if line.startswith("│")}  # fmt: skip
    assert rows["transformers"] == metadata.version("transformers") and rows["sparring"] == sparring.__version__
    assert rows["vllm"]  # a version or "not installed", never left out
    assert rows["gpu"].startswith(("none", "unknown")) or "GiB" in rows["gpu"]
    # what `eval swe --split heldout` needs: optional (doctor does not fail on it), with its fix
    held = next(line for line in run.stdout.splitlines() if "held-out repo images" in line)
    assert " of " in held or "needs the Docker engine" in held
    if "missing" in held:
        assert "sparring build repos --split heldout" in held
