"""The front door's first-hour surface: --version, doctor's environment report, help texts naming real options."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

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


def test_train_help_config_shows_each_keys_type_default_and_preset_value() -> None:
    from sparring.training.config import TrainConfig, load_config

    run = _sparring("train", "--help-config", "--preset", "cpu-demo")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["key", "type", "default", "cpu-demo"]
    table = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith(" ")}
    demo = load_config("cpu-demo")
    assert table["iterations"] == ["iterations", "int", str(TrainConfig().iterations), str(demo.iterations)]
    assert table["threads"][1:4] == ["int", "|", "None"] and table["games"][1] == "list[str]"
    assert len(table) == len(TrainConfig.__dataclass_fields__)
    every = _sparring("train", "--help-config").stdout.splitlines()[0].split()
    assert every[3:] == ["cpu-demo", "cpu-learn", "gpu-1", "gpu-8"]  # no --preset: every bundled preset's values


def test_help_texts_name_the_options_the_commands_have() -> None:
    setup = _sparring("setup", "--help").stdout
    assert "GOAL" not in setup and "--for" in setup


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    """Every leaf command under ``command`` with the words that call it."""
    if hasattr(command, "commands"):  # a group (click's or the copy of click newer typer releases carry)
        for name, sub in command.commands.items():
            yield from _commands(sub, [*path, name])
    else:
        yield path, command


def test_no_help_text_is_cut_off_or_loses_a_bracket_at_80_columns() -> None:
    # rich ends a word wider than its column with "…" (the --model SPEC list was cut so) and reads
    # "[train]" as a style tag (export's help said "needs sparring").
    import typer
    from typer.testing import CliRunner

    from sparring.cli import app

    runner = CliRunner()
    checked = 0
    for path, command in _commands(typer.main.get_command(app), []):
        shown = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "80"}).output
        texts = [command.help or ""] + [getattr(p, "help", None) or "" for p in command.params]
        assert "…" not in shown or any("…" in t for t in texts), (path, shown)
        for bracketed in (m for t in texts for m in re.findall(r"\[[^\]]*\]", t)):
            assert bracketed in " ".join(shown.split()), (path, bracketed)
        checked += 1
    assert checked > 20  # every command, not none


def test_an_image_build_says_each_stage_with_its_time() -> None:
    from sparring.envs.swe.repos.cli import StageLog

    said: list[str] = []
    shown: list[str] = []
    stages = StageLog(said.append, shown.append)
    for what in ("munch: downloading releases", "munch: docker build (no network)"):  # as ensure_repo_image says them
        stages(what)
        time.sleep(0.2)
    stages.done("munch: built")
    assert shown == ["munch: downloading releases", "munch: docker build (no network)"]
    assert re.fullmatch(r"  munch: downloading releases \(0\.[2-9] s\)", said[0]), said
    assert re.fullmatch(r"  munch: docker build \(no network\) \(0\.[2-9] s\)", said[1]), said
    assert re.fullmatch(r"munch: built in 0\.[4-9] s", said[2]) and len(said) == 3, said


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_building_an_image_that_is_up_to_date_says_so() -> None:
    from sparring.envs.swe.repos.catalog import get_repo
    from sparring.envs.swe.repos.images import image_status
    from tests.conftest import require
    from tests.containers.sandbox_helpers import docker_ready

    docker_ready()
    require(image_status(get_repo("inflection"))[0] == "built", "the image of inflection")  # else it would rebuild
    run = _sparring("build", "repos", "inflection")
    assert run.returncode == 0, run.stderr
    assert "inflection: up to date" in run.stdout


def test_a_failed_start_leaves_no_empty_run_folder(tmp_path: Path) -> None:
    # games=swe: its preflight (images, bug store) passes where setup ran, so the start fails in the
    # trainer, after it made the run folder, at the model
    start = ("train", "--preset", "cpu-demo", "games=swe")
    run = _sparring(*start, f"model={tmp_path / 'no-model'}", f"out={tmp_path / 'run'}")
    assert run.returncode == 2 and f"no model folder at {tmp_path / 'no-model'};" in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
    kept = tmp_path / "kept"
    kept.mkdir()  # a folder the user made stays, empty or not
    assert _sparring(*start, f"model={tmp_path / 'no-model'}", f"out={kept}").returncode == 2
    assert kept.is_dir()
