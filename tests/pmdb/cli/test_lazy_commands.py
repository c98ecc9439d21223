"""The lazily registered command table (pmdb.cli.lazy) prints what the eagerly registered app printed: every
command, in the same order, and the full help of the root and of every command and subcommand."""
from __future__ import annotations

import importlib

import pytest
import typer

from pmdb.cli import main as cli_main
from pmdb.cli.lazy import Entry, LazyCommands, source_help

# The modules in the order the app registered them before commands were loaded lazily.
EAGER_ORDER = ("core", "quickstart", "collect", "fit", "plan", "predict", "models", "shard", "report",
               "platform_specs", "exchange", "doctor")


def _eager_group() -> typer.core.TyperGroup:
    """The root app as it was: every module imported and registered at once."""
    eager = typer.Typer(**cli_main.APP_SETTINGS)
    eager.callback()(cli_main._root)
    for name in EAGER_ORDER:
        importlib.import_module(f"pmdb.cli.{name}").register(eager)
    return typer.main.get_group(eager)


def _paths(command, path=()):
    yield path
    for name in command.list_commands(None) if hasattr(command, "list_commands") else []:
        yield from _paths(command.commands[name], path + (name,))


def _help(group, path, capsys) -> str:
    assert group.main(args=[*path, "--help"], prog_name="pmdb", standalone_mode=False) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("columns", ["80"])
def test_every_help_text_is_the_eager_apps(capsys, monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    eager = _eager_group()
    paths = list(_paths(eager))
    assert list(cli_main.COMMANDS) == eager.list_commands(None)  # the table names every command, in order
    assert len(paths) > 30 and ("collect", "ops") in paths
    for path in paths:
        lazy = typer.main.get_command(cli_main.app)  # fresh: nothing loaded, the root help from the sources
        assert _help(lazy, path, capsys) == _help(eager, path, capsys), path


def test_the_root_help_reads_every_commands_help_from_its_source():
    for name, entry in cli_main.COMMANDS.items():
        assert source_help(entry), name  # none falls back to importing its module
    assert source_help(Entry("pmdb.cli.core", "no_such_function")) is None


def test_commands_load_on_lookup_and_unknown_names_are_refused():
    group = typer.main.get_command(cli_main.app)
    commands = group.commands
    assert isinstance(commands, LazyCommands) and commands.loaded("status") is None
    assert "status" in commands and "nope" not in commands and group.get_command(None, "nope") is None
    status = group.get_command(None, "status")
    assert status.name == "status" and commands.loaded("runs") is not None  # its module's other commands too
    assert commands.loaded("predict") is None
