"""pmdb starts with another typer: one whose option class has no ``display_type_rich`` (a GPU image's typer 0.19
has none) must not stop `pmdb --help` or a command. Real subprocesses with the attribute removed before pmdb is
imported."""
import os
import subprocess
import sys

from pmdb.cli.common import click_exceptions

# Remove what pmdb used to patch unconditionally, then run the real entry point with the given arguments.
_WITHOUT_ATTRIBUTE = ("import sys, typer.core\n"
                      "del typer.core.TyperOption.display_type_rich\n"
                      "from pmdb.cli.main import main\n"
                      "sys.exit(main(sys.argv[1:]))\n")


def _pmdb_without_attribute(*args):
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true", "COLUMNS": "80"}
    return subprocess.run([sys.executable, "-c", _WITHOUT_ATTRIBUTE, *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_pmdb_starts_when_typer_lacks_display_type_rich(tmp_path):
    shown = _pmdb_without_attribute("--help")
    assert shown.returncode == 0, shown.stderr
    assert "Usage: pmdb" in shown.stdout and "collect" in shown.stdout
    assert "AttributeError" not in shown.stderr
    home = tmp_path / "ws"
    created = _pmdb_without_attribute("--home", str(home), "init")
    assert created.returncode == 0, created.stderr
    assert (home / "pmdb.duckdb").exists()
    status = _pmdb_without_attribute("--home", str(home), "status")
    assert status.returncode == 0, status.stderr
    assert "platforms" in status.stdout
    bad = _pmdb_without_attribute("--home", str(tmp_path / "missing"), "status")  # still one line, no traceback
    assert bad.returncode == 2 and bad.stderr.startswith("pmdb: error:") and "Traceback" not in bad.stderr


def test_click_exceptions_is_the_click_typer_runs_on():
    import typer

    module = click_exceptions()
    assert issubclass(module.UsageError, module.ClickException)
    base = [c for c in typer.Context.__mro__[1:] if c.__name__ == "Context"][0]
    assert module.__name__ == base.__module__.rsplit(".", 1)[0] + ".exceptions"
