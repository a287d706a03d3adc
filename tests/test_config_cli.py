"""Command-line options come from the config dataclasses: one place for each default and help text."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import typer
from typer.testing import CliRunner

from sparring.config_cli import config_command, field_docs


@dataclass
class _Config:
    name: str = "world"
    """Who to greet."""
    times: int = 2
    """How often."""
    loud: bool = False
    """Shout it."""
    limit: int | None = None
    """At most this many characters (None: no limit)."""


def _app(seen: list[_Config]) -> typer.Typer:
    app = typer.Typer()
    app.command("greet")(config_command(_Config, seen.append, "Greet someone."))
    app.command("other")(lambda: None)  # a second command, so typer keeps the sub-command name
    return app


def test_options_parse_into_the_dataclass_with_its_types_and_defaults() -> None:
    seen: list[_Config] = []
    result = CliRunner().invoke(_app(seen), ["greet", "--name", "ada", "--loud", "--limit", "5"])
    assert result.exit_code == 0, result.output
    assert seen == [_Config(name="ada", times=2, loud=True, limit=5)]
    CliRunner().invoke(_app(seen), ["greet"])
    assert seen[-1] == _Config()


def test_a_bool_that_defaults_to_true_can_be_turned_off() -> None:
    @dataclass
    class Switch:
        plots: bool = True
        """Draw the plots."""

    seen: list[Switch] = []
    app = typer.Typer()
    app.command("draw")(config_command(Switch, seen.append, "Draw."))
    app.command("other")(lambda: None)
    assert CliRunner().invoke(app, ["draw", "--no-plots"]).exit_code == 0 and seen == [Switch(plots=False)]
    assert CliRunner().invoke(app, ["draw"]).exit_code == 0 and seen[-1] == Switch(plots=True)


def test_help_is_the_field_docstring() -> None:
    result = CliRunner().invoke(_app([]), ["greet", "--help"], env={"COLUMNS": "200"})
    assert "Greet someone." in result.output and "How often." in result.output and "--limit" in result.output
    assert field_docs(_Config)["limit"] == "At most this many characters (None: no limit)."


def test_a_bad_value_is_a_usage_error_naming_the_option() -> None:
    result = CliRunner().invoke(_app([]), ["greet", "--times", "many"], env={"COLUMNS": "200"})
    assert result.exit_code == 2 and "--times" in result.output


def test_the_real_commands_declare_every_config_field_once() -> None:
    from sparring.agents.evaluation import SearchEvalConfig
    from sparring.training.config import TrainConfig

    for cls in (SearchEvalConfig, TrainConfig):
        docs = field_docs(cls)
        assert {f.name for f in dataclasses.fields(cls)} == set(docs), f"{cls.__name__}: a field lacks its help line"
        assert all(docs.values())
