"""``pmdb collect ...``: the collectors' commands (each module in COLLECT_MODULES adds its own)."""
from __future__ import annotations

import typer

from pmdb.cli import (collect_comms, collect_import_e2e, collect_import_ops, collect_mine, collect_ops,
                      collect_relaunch, collect_trace, collect_workload)

collect_app = typer.Typer(help="Measure on this machine, or import data recorded elsewhere, into the store.",
                          no_args_is_help=True)

# Modules with ``register(collect_app)``.
COLLECT_MODULES = (collect_comms, collect_workload, collect_relaunch, collect_ops, collect_trace, collect_import_ops,
                   collect_mine, collect_import_e2e)


def register(app: typer.Typer) -> None:
    for module in COLLECT_MODULES:
        module.register(collect_app)
    app.add_typer(collect_app, name="collect")
