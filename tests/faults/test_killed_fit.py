"""A fit killed with SIGKILL (kill -9) moves no champion (issue #38, item 3): a real `pmdb fit` process that kills
itself at the moment it would mark its run completed (after every version was registered and the champions chosen)
leaves the store's champion, and MLflow's, at the completed fit's version; the killed fit's version stays, not
champion. The next writer records the run interrupted."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from fitters.registry import choose_champion
from pmdb.config import Workspace
from pmdb.store import Store

from .test_mlflow_mirror import (  # noqa: F401
    FIT, NAME, aliases, fitted_twice, mlflow_champion, mirror, ws)

# `pmdb` whose fit run dies by SIGKILL instead of being marked completed
_KILLED_AT_COMPLETION = """
import os, signal, sys
from pmdb.store import Run
finish = Run.finish
def killed(self, status, error=None):
    if status == "completed" and self.kind == "fit":
        os.kill(os.getpid(), signal.SIGKILL)
    return finish(self, status, error)
Run.finish = killed
from pmdb.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_fit_killed_before_it_completes_moves_no_champion(ws: Workspace):  # noqa: F811
    assert aliases(ws)["champion"] == 2 and mlflow_champion(ws) == 2     # the fixture's two completed fits
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true"}
    done = subprocess.run([sys.executable, "-c", _KILLED_AT_COMPLETION, "--home", str(ws.home), *FIT],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert sorted(mirror(ws)) == [1, 2, 3]                              # its version was registered and kept
    with Store.open(ws) as store:                                       # the next writer: the run interrupted
        (run_id, status), = store.conn.execute(
            "SELECT run_id, status FROM collection_runs WHERE kind = 'fit' AND status <> 'completed'").fetchall()
        assert status == "interrupted"
        assert choose_champion(store, NAME, run_id) == 3                 # what the fit would have moved it to
        assert choose_champion(store, NAME) == 2
    assert aliases(ws)["champion"] == 2                                  # ... but it did not complete
    assert mlflow_champion(ws) == 2
