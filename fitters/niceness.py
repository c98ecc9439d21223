"""The fit's helper processes (search workers, the figure worker) run below the process that registers versions.

A fit waits on its registering process (MLflow logging, one version at a time); on two cores that process shared
them with two searches and the figure worker. The helpers' results do not depend on their priority: searches count
their work, not the clock.
"""
from __future__ import annotations

import os

NICENESS = 5   # added to a helper process's niceness


def lower_priority() -> None:
    """Lower this process's CPU priority by :data:`NICENESS`, where the system allows it (else leave it)."""
    try:
        os.nice(NICENESS)
    except OSError:
        pass
