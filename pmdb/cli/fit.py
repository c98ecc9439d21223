"""``pmdb fit ...``: fitting commands (kernel/collective models, overheads). Modules in FIT_MODULES add theirs."""
from __future__ import annotations

import typer

from pmdb.cli import fit_comms_context, fit_cross_gpu, fit_models, fit_overheads

fit_app = typer.Typer(help="Fit models (kernel, embedding, collective) and CPU overheads from the store.",
                      no_args_is_help=False, invoke_without_command=True)

# Modules with ``register(fit_app)``: the kernel-model fitter registers the group's callback (`pmdb fit [--op ...]`),
# other modules add subcommands (`pmdb fit overheads`).
FIT_MODULES = (fit_overheads, fit_cross_gpu, fit_comms_context, fit_models)


def register(app: typer.Typer) -> None:
    for module in FIT_MODULES:
        module.register(fit_app)
    app.add_typer(fit_app, name="fit")
