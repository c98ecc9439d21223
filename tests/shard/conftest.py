"""One real workspace shared by the sharding tests: a tiny 5-table DLRM recorded on 2 ranks (Kineto + execution
trace, one iteration, plan 'naive'), FBGEMM embedding-lookup microbenchmarks, an all_to_all sweep at world size 2
and the models fitted on them. Built once per session through the CLI (real processes, real MLflow registry)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.store import Store

TINY = {"name": "tiny", "bottom_mlp": [16, 8], "top_mlp": [16, 1], "batch_size": 16,
        "tables": [{"num_rows": 1500, "pooling": 3}, {"num_rows": 400, "pooling": 1},
                   {"num_rows": 3000, "pooling": 6, "index_source": "zipf:1.05"},
                   {"num_rows": 800, "pooling": 2}, {"num_rows": 2000, "pooling": 4}]}
LOOKUPS = [{"B": b, "E": e, "D": [8] * len(e), "L": l} for b, e, l in (
    (16, [1500, 400], [3, 1]), (32, [3000, 800, 2000], [6, 2, 4]), (16, [400], [1]), (64, [1500, 3000], [3, 6]),
    (32, [800], [2]), (64, [2000, 400, 1500], [4, 1, 3]), (16, [3000, 2000], [6, 4]), (32, [1500, 400, 800], [3, 1, 2]), (32, [2000], [4]),
    (16, [800, 3000, 1500, 400], [2, 6, 3, 1]), (64, [400, 2000], [1, 4]), (32, [3000], [6]))]


@dataclass(frozen=True)
class ShardWorkspace:
    workspace: Workspace
    tiny: Path
    platform: str
    trace_set_id: int
    source_plan: tuple[int, ...]

    def cli(self, *args: str) -> int:
        return main(["--home", str(self.workspace.home), *args])


@pytest.fixture(scope="session")
def shard_ws(tmp_path_factory, mlflow_template) -> ShardWorkspace:
    """The workspace; its empty MLflow store is a copy of :func:`mlflow_template`'s (made once per test run)."""
    import shutil

    root = tmp_path_factory.mktemp("shard")
    tiny = root / "tiny.json"
    tiny.write_text(json.dumps(TINY))
    workspace = Workspace(root / "ws")
    Store.open(workspace, create=True).close()
    shutil.copy(mlflow_template.mlflow_db, workspace.mlflow_db)
    home = ["--home", str(workspace.home)]
    assert main([*home, "collect", "workload", "dlrm", "--config", str(tiny), "--world-size", "2", "--iters", "1",
                 "--warmup", "1", "--trace-iters", "1", "--sharder", "naive"]) == 0
    configs = [arg for c in LOOKUPS for arg in ("--config", json.dumps(c))]
    assert main([*home, "collect", "ops", "--op", "embedding_lookup", "--cache", "cold", *configs]) == 0
    assert main([*home, "collect", "comms", "--ops", "all_to_all", "--max-bytes", "64KiB", "--iters", "3",
                 "--warmup", "1", "--no-progress"]) == 0
    # one DeepSets candidate of 30 epochs per search: what the 3 s cap left of the default search on a loaded host
    assert main([*home, "fit", "--op", "embedding_lookup", "--op", "all_to_all", "--cache", "cold",
                 "--trials", "1", "--max-epochs", "30", "--budget-minutes", "0.05", "--no-progress"]) == 0
    with Store.open(workspace, read_only=True) as store:
        row = store.query("SELECT t.trace_set_id, t.platform, w.sharding FROM v_trace_sets t JOIN workloads w "
                          "USING (workload_id)").iloc[0]
    return ShardWorkspace(workspace, tiny, str(row["platform"]), int(row["trace_set_id"]),
                          tuple(json.loads(row["sharding"])))
