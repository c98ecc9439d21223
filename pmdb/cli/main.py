"""The ``pmdb`` command: a typer app whose commands are thin wrappers over the stages.

User mistakes raise :class:`pmdb.errors.PmdbError`; :func:`main` prints them on one line and exits with code 2.
"""
from __future__ import annotations

import re
import signal
import sys
from pathlib import Path
from typing import Optional

import typer

import pmdb
from pmdb.cli.common import click_exceptions
from pmdb.cli.lazy import Entry, LazyGroup
from pmdb.config import HOME_ENV, TRACKING_ENV, resolve_workspace
from pmdb.errors import PmdbError

click_exc = click_exceptions()  # the click this typer runs on (its own copy in typer 0.29)

# The command table, in the order `pmdb --help` lists it: name -> the module whose ``register(app)`` adds it (with
# the module's other commands) and the function or sub-app holding its help. A module is imported only when one of
# its commands runs or shows its own help (pmdb.cli.lazy).
COMMANDS = {name: Entry(f"pmdb.cli.{module}", attribute) for name, module, attribute in (
    ("init", "core", "init"), ("platform", "core", "platform"), ("status", "core", "status"),
    ("runs", "core", "runs"), ("sql", "core", "sql"), ("quickstart", "quickstart", "quickstart"),
    ("predict", "predict", "predict"), ("errors", "predict", "errors"), ("ui", "models", "ui"),
    ("shard", "shard", "shard"), ("report", "report", "report"),
    ("platform-specs", "platform_specs", "platform_specs"), ("export", "exchange", "export"),
    ("merge", "exchange", "merge"), ("doctor", "doctor", "doctor"), ("collect", "collect", "collect_app"),
    ("fit", "fit", "fit_app"), ("plan", "plan", "plan_app"), ("models", "models", "models_app"))}


class PmdbGroup(LazyGroup):
    table = COMMANDS


# The root app's settings (tests build the eagerly registered app from them to compare help texts).
APP_SETTINGS = dict(
    name="pmdb",
    help="Performance-model database for ML training: collect microbenchmarks, collectives and workloads; fit "
         "kernel models; predict training-step time; query everything with SQL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app = typer.Typer(cls=PmdbGroup, **APP_SETTINGS)


def _print_version(value: bool) -> None:
    if value:  # eager: `pmdb --version` needs no command
        typer.echo(f"pmdb {pmdb.__version__}")
        raise typer.Exit()


@app.callback()
def _root(ctx: typer.Context,
          home: Optional[Path] = typer.Option(None, "--home", envvar=HOME_ENV,
                                              help="Workspace directory (default ./pmdb-workspace)."),
          tracking_uri: Optional[str] = typer.Option(None, "--tracking-uri", envvar=TRACKING_ENV,
                                                     help="MLflow tracking and registry URI to fit into and load "
                                                          "models from, e.g. a shared `mlflow server` "
                                                          "(http://HOST:PORT); default the workspace's mlflow.db."),
          version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print the pmdb version and exit.")) -> None:
    ctx.obj = resolve_workspace(home, tracking_uri)


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # runs in progress are marked interrupted and what was stored is kept


def _interrupted() -> int:
    """Say what an interruption kept (per interrupted run: its id and rows) and return 130."""
    from pmdb.store import interruptions  # imported by then when a run was interrupted

    kept = interruptions() or ["what was measured so far is kept"]
    typer.echo(f"pmdb: interrupted; {'; '.join(kept)}", err=True)
    return 130


def _usage_line(exc: click_exc.UsageError) -> str:
    """click's usage error as one line: its message, the suggestion as 'did you mean ...', the help to read."""
    text = " ".join(exc.format_message().split())
    text = re.sub(r"\(Possible options: ([^)]*)\)", lambda m: f"(did you mean {m.group(1).replace(', ', ' or ')}?)",
                  text)
    text = re.sub(r"\. Did you mean (.*?)\?$", r" (did you mean \1?)", text)
    text = text[:1].lower() + text[1:] if text[:2] != text[:2].upper() else text
    where = exc.ctx.command_path if exc.ctx is not None else "pmdb"
    return f"{text.rstrip('.')}; see `{where} --help`"


def main(argv: list[str] | None = None) -> int:
    """Entry point: one line and exit code 2 for user mistakes (1 when the store failed), 130 on Ctrl-C/SIGTERM."""
    signal.signal(signal.SIGTERM, _sigterm)
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="pmdb", standalone_mode=False)
    except PmdbError as exc:
        typer.echo(f"pmdb: error: {exc}", err=True)
        return exc.exit_code
    except typer.Exit as exc:
        return _interrupted() if exc.exit_code == 130 else exc.exit_code
    except click_exc.UsageError as exc:  # a mistyped command or option: one line with the suggestion
        typer.echo(f"pmdb: error: {_usage_line(exc)}", err=True)
        return exc.exit_code
    except click_exc.ClickException as exc:
        exc.show()
        return exc.exit_code
    except (KeyboardInterrupt, typer.Abort):
        return _interrupted()
    except Exception as exc:
        from pmdb.store import failure_message

        message = failure_message(exc)  # a damaged store or a full disk: one line, not a traceback
        if message is None:
            raise
        typer.echo(f"pmdb: error: {message}", err=True)
        return 1
    if result == 130:  # typer turns Ctrl-C (KeyboardInterrupt) into exit code 130 without a word
        return _interrupted()
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
