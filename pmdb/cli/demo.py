"""``pmdb demo``: the main job on an embedded default (what ``make demo`` runs)."""
from __future__ import annotations

import typer

from pmdb.cli import core


def demo(ctx: typer.Context) -> None:
    """Create the workspace, register this machine and show the store's status."""
    core.init(ctx)
    core.platform(ctx, None)
    core.status(ctx)


def register(app: typer.Typer) -> None:
    app.command()(demo)
