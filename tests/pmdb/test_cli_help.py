"""Help text and hints as a user reads them: no `<bool>` types on flags, no reStructuredText markup, every option
explained, and every `pmdb ...` command a message suggests is one pmdb accepts."""
import ast
import re
import shlex
from pathlib import Path

import pytest
import typer

from pmdb.cli.main import app, main

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pmdb", "collectors", "fitters", "simulator", "shard", "planner", "report")
MARKUP = re.compile(r"<bool>|``|:(func|class|mod|meth|attr|data|ref):`")


def _commands(command=None, path=()):
    """(path, click command) of every command and group of the app."""
    command = command or typer.main.get_command(app)
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, path + (name,))


def test_no_help_text_has_markup_and_every_option_has_help():
    found, unexplained = [], []
    for path, command in _commands():
        texts = [command.help or "", command.short_help or ""]
        for param in command.params:
            texts.append(getattr(param, "help", None) or "")
            if param.param_type_name == "option" and not (param.help or "").strip():
                unexplained.append(f"{' '.join(path)} {param.opts[0]}")
        found += [f"{' '.join(path)}: {MARKUP.search(t).group()}" for t in texts if MARKUP.search(t)]
    assert found == [] and unexplained == []


def test_rendered_help_shows_no_bool_type_nor_markup(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    paths = [path for path, _ in _commands()]
    assert ("models",) in paths and ("runs",) in paths
    for path in paths:
        assert main([*path, "--help"]) == 0, path
        out = capsys.readouterr().out
        assert "--help" in out and not MARKUP.search(out), (path, MARKUP.search(out))
    main(["runs", "--help"])
    out = capsys.readouterr().out
    assert re.search(r"--all\s+Also the marker runs", out), out  # a flag: no type between name and help
    assert re.search(r"--kind\s+<str>", out), out                 # an option with a value keeps its type


def test_the_missing_workspace_hint_is_a_command_that_works(tmp_path, capsys):
    home = tmp_path / "a dir" / "ws"
    assert main(["--home", str(home), "status"]) == 2
    hint = re.search(r"create it with `([^`]+)`", capsys.readouterr().err).group(1)
    assert shlex.split(hint)[:3] == ["pmdb", "--home", str(home)]
    assert main(shlex.split(hint)[1:]) == 0  # the command as printed, without the program name
    assert main(["--home", str(home), "status"]) == 0


def _suggested_commands():
    """Every `pmdb ...` command quoted in a string of the source (f-string fields read as X), docstrings aside."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                          if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                          and node.body and isinstance(node.body[0], ast.Expr)
                          and isinstance(node.body[0].value, ast.Constant)}
            for node in ast.walk(tree):
                if isinstance(node, ast.JoinedStr):
                    text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
                elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                    text = node.value
                else:
                    continue
                for hint in re.findall(r"`(pmdb [^`]+)`", text):
                    if not re.search(r"[\[\]|]|\.\.\.", hint):  # synopses with alternatives are not commands
                        found.setdefault(hint, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_every_suggested_command_is_accepted(capsys):
    suggested = _suggested_commands()
    assert len(suggested) > 20 and "pmdb runs --kind workload" in suggested
    refused = []
    for hint, where in suggested.items():
        args = shlex.split(hint)[1:]
        code = main([*args, "--help"])  # parses every option name given, then only prints the help
        if code != 0:
            refused.append(f"{where}: `{hint}`: {capsys.readouterr().err.strip()}")
        capsys.readouterr()
    assert refused == []


@pytest.mark.parametrize("hint", ["init --home x", "quickstart --again-and-again"])
def test_the_check_refuses_what_pmdb_refuses(hint, capsys):
    assert main([*hint.split(), "--help"]) != 0
