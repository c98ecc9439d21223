"""``pmdb collect ...``: the collectors' commands (each module in COLLECT_MODULES adds its own)."""
from __future__ import annotations

import importlib

import typer

collect_app = typer.Typer(help="Measure on this machine, or import data recorded elsewhere, into the store.",
                          no_args_is_help=True)

# Modules with ``register(collect_app)``.
COLLECT_MODULES: list[str] = ["pmdb.cli.collect_comms", "pmdb.cli.collect_workload", "pmdb.cli.collect_ops", "pmdb.cli.collect_trace", "pmdb.cli.collect_import_ops"]


def register(app: typer.Typer) -> None:
    for module in COLLECT_MODULES:
        importlib.import_module(module).register(collect_app)
    app.add_typer(collect_app, name="collect")
