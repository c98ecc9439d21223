"""The ``pmdb`` command: a typer app whose commands are thin wrappers over the stages.

User mistakes raise :class:`pmdb.errors.PmdbError`; :func:`main` prints them on one line and exits with code 2.
"""
from __future__ import annotations

import importlib
import signal
import sys
from pathlib import Path
from typing import Optional

import typer
from typer._click import exceptions as click_exc  # typer vendors its own click

import pmdb
from pmdb.config import HOME_ENV, resolve_workspace
from pmdb.errors import PmdbError

app = typer.Typer(
    name="pmdb",
    help="Performance-model database for ML training: collect microbenchmarks, collectives and workloads; fit "
         "kernel models; predict training-step time; query everything with SQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Modules that add commands; each has ``register(app)``.
COMMAND_MODULES = ["pmdb.cli.core", "pmdb.cli.quickstart", "pmdb.cli.collect", "pmdb.cli.fit", "pmdb.cli.plan", "pmdb.cli.predict", "pmdb.cli.models", "pmdb.cli.shard", "pmdb.cli.report", "pmdb.cli.platform_specs"]


@app.callback()
def _root(ctx: typer.Context,
          home: Optional[Path] = typer.Option(None, "--home", envvar=HOME_ENV,
                                              help="Workspace directory (default ./pmdb-workspace)."),
          version: bool = typer.Option(False, "--version", help="Print the pmdb version and exit.")) -> None:
    if version:
        typer.echo(f"pmdb {pmdb.__version__}")
        raise typer.Exit()
    ctx.obj = resolve_workspace(home)


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # runs in progress are marked interrupted and what was stored is kept


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line and exit code 2 for user mistakes, 130 on Ctrl-C/SIGTERM."""
    signal.signal(signal.SIGTERM, _sigterm)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="pmdb", standalone_mode=False)
    except PmdbError as exc:
        typer.echo(f"pmdb: error: {exc}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except click_exc.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        typer.echo("pmdb: interrupted; what was measured so far is kept", err=True)
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
