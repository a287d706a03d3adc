"""Commands that meet a broken environment end with one sentence (exit status 2), not a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.containers.sandbox_helpers import docker_ready

SPARRING = str(Path(sys.executable).with_name("sparring"))


def _sparring(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the installed CLI with ENV added; COLUMNS is wide so that no message is wrapped."""
    environ = {**os.environ, "COLUMNS": "250", **env}
    return subprocess.run([SPARRING, *args], capture_output=True, text=True, timeout=240, env=environ)


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_setup_reports_a_check_that_raises(tmp_path: Path) -> None:
    docker_ready()  # else setup would start installing the engine or building the base image
    home = tmp_path / "home"
    home.write_text("a file where the sparring folder should be\n")  # every later check fails to create it
    done = _sparring("setup", SPARRING_HOME=str(home))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert f"check failed: [Errno 17] File exists: '{home}'" in done.stderr
    assert "`sparring doctor` shows every piece" in done.stderr


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_bench_sandbox_without_the_docker_cli_says_so() -> None:
    docker_ready()  # else the missing base image would be reported first
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "docker").exists())
    done = _sparring("bench", "sandbox", "--rounds", "5", PATH=path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert "the `docker` command-line client, which is not on PATH" in done.stderr


def test_a_missing_command_module_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    import sparring.cli as cli

    monkeypatch.setattr(cli, "COMMAND_MODULES", [*cli.COMMAND_MODULES, "sparring.envs.swe.cli_typo"])
    with pytest.raises(ImportError, match="sparring.envs.swe.cli_typo"):
        cli._modules()
    monkeypatch.undo()
    assert len(cli._modules()) == len(cli.COMMAND_MODULES)  # every listed module exists


def test_bench_figures_print_as_one_json_object_or_aligned_lines(capsys):
    from sparring import print_figures

    print_figures({"ratio": 2.35, "repo": "parse"}, as_json=True)
    assert json.loads(capsys.readouterr().out) == {"ratio": 2.35, "repo": "parse"}
    print_figures({"ratio": 2.35, "repo": "parse"}, as_json=False)
    assert capsys.readouterr().out.splitlines() == ["ratio: 2.35", " repo: parse"]
