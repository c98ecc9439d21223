"""`pmdb collect workload` and `pmdb collect tasks` as a user runs them: one-line errors, a crashing rank, tasks."""
from __future__ import annotations

import json
import re

import pytest

from pmdb.cli.main import main
from pmdb.store import Store

BAD = [
    (["dlrm", "--preset", "dlrm_huge"], r"unknown DLRM preset 'dlrm_huge'"),
    (["mlp"], r"unknown workload family 'mlp'"),
    (["dlrm", "--arch", "gpt2"], r"not an option of dlrm workloads: --arch"),
    (["transformer", "--preset", "dlrm_test"], r"not an option of transformer workloads: --preset"),
    (["transformer"], r"give --arch"),
    (["transformer", "--arch", "gpt9000"], r"unknown transformer architecture 'gpt9000'"),
    (["transformer", "--arch", "bert", "--hidden", "30", "--heads", "4"], r"multiple of the number of heads"),
    (["dlrm", "--world-size", "2", "--batch-size", "15"], r"batch size 15 must be a multiple of the world size 2"),
    (["dlrm", "--world-size", "2", "--sharder", "best"], r"unknown sharder 'best'"),
    (["dlrm", "--preset", "dlrm_test", "--config", "x.json"], r"give one of --preset, --config, --task"),
    (["dlrm", "--config", "/nonexistent/shape.json"], r"cannot read config file"),
    (["dlrm", "--task", "99"], r"no task 99"),
    (["dlrm", "--iters", "0"], r"--iters must be >= 1"),
    (["dlrm", "--index-source", "zipff:1.1"], r"bad index source 'zipff:1.1'"),
    (["dlrm", "--index-source", "dataset:/nonexistent/day0.pt.gz"], r"no such dataset file"),
]


def one_line_error(capsys, argv, pattern, progress: bool = False):
    """Exit code 2, no traceback, one error line matching ``pattern`` (and, if ``progress``, nothing else on stderr
    but the run's one status line)."""
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and not (progress and line.startswith("dlrm "))]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("pmdb: error: ") and re.search(pattern, lines[0]), lines[0]


@pytest.mark.parametrize("args, pattern", BAD)
def test_bad_workloads_are_one_line_errors(workspace, capsys, args, pattern):
    one_line_error(capsys, ["--home", str(workspace.home), "collect", "workload", *args], pattern)
    with Store.open(workspace, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM collection_runs") == 0


def test_bad_config_files(workspace, capsys, tmp_path):
    cases = [({"bottom_mlp": [4, 8], "top_mlp": [4, 1], "tables": [{"num_rows": 10, "pooling": 1}], "widths": 3},
              r"unknown field\(s\) widths"),
             ({"bottom_mlp": [4, 8], "top_mlp": [4, 1], "tables": [{"num_rows": 10, "pooling": 1, "dim": 4}]},
              r"table 0 has dim 4.*bottom MLP's output \(8\)"),
             ({"bottom_mlp": [4, 8], "top_mlp": [4, 2], "num_tables": 2, "num_rows": 10, "pooling": 1},
              r"must end with 1 output")]
    for content, pattern in cases:
        path = tmp_path / "shape.json"
        path.write_text(json.dumps(content))
        one_line_error(capsys, ["--home", str(workspace.home), "collect", "workload", "dlrm", "--config", str(path)],
                       pattern)


@pytest.mark.slow
def test_a_crashing_rank_fails_the_run_and_nothing_counts(workspace, tmp_path, capsys):
    corrupt = tmp_path / "day0.pt.gz"
    corrupt.write_bytes(b"this is not a gzipped torch file")
    shape = {"bottom_mlp": [8, 4], "top_mlp": [8, 1],
             "tables": [{"num_rows": 100, "pooling": 2},
                        {"num_rows": 100, "pooling": 2, "index_source": f"dataset:{corrupt}"}]}
    (tmp_path / "shape.json").write_text(json.dumps(shape))
    (tmp_path / "plan.json").write_text("[0, 1]")  # the unreadable table lives on rank 1 only
    one_line_error(capsys, ["--home", str(workspace.home), "collect", "workload", "dlrm", "--config",
                            str(tmp_path / "shape.json"), "--world-size", "2", "--batch-size", "4", "--sharding",
                            str(tmp_path / "plan.json"), "--iters", "2", "--warmup", "1", "--threads", "1",
                            "--timeout", "180"],
                   r"rank 1 failed: PmdbError: cannot read dataset file .*day0.* \(rank logs: ", progress=True)
    with Store.open(workspace, read_only=True) as store:
        status, error = store.conn.execute("SELECT status, error FROM collection_runs").fetchone()
        assert status == "failed" and "rank 1 failed" in error
        for table in ("workloads", "workload_runs", "e2e_measurements", "embedding_batch_stats", "trace_sets"):
            assert store.scalar(f"SELECT count(*) FROM {table}") == 0, table


def stored_tasks(workspace):
    with Store.open(workspace, read_only=True) as store:
        return store.query("SELECT * FROM tasks ORDER BY task_id")


def test_tasks_builtin_law(workspace, capsys):
    home = ["--home", str(workspace.home), "collect", "tasks"]
    assert main([*home, "--count", "4", "--seed", "7", "--world-size", "2", "--dim", "16"]) == 0
    assert main([*home, "--count", "2", "--seed", "7", "--world-size", "2", "--dim", "16"]) == 0
    tasks = stored_tasks(workspace)
    assert tasks["kind"].tolist() == ["heavy", "normal", "heavy", "normal", "heavy", "normal"]
    assert tasks["tables"][0] == tasks["tables"][4] and tasks["seed"][1] == tasks["seed"][5]  # same seed, same task
    for _, task in tasks.iterrows():
        tables = json.loads(task["tables"])
        assert int(13 * 2 * 0.7) <= len(tables) < int(13 * 2 * 1.3)
        assert all(t["dim"] == 16 and t["num_rows"] >= 1 and t["source"] == "zipf:1.05" for t in tables)
        if task["kind"] == "heavy":
            assert min(t["pooling"] for t in tables) >= 20
        assert sum(t["num_rows"] * t["dim"] * 4 for t in tables) <= task["memory_cap_bytes"]
    assert "heavy_tables" in capsys.readouterr().out


def test_tasks_from_published_statistics_and_memory_cap(workspace, capsys, shared_data):
    home = ["--home", str(workspace.home), "collect", "tasks"]
    args = ["--count", "4", "--seed", "1", "--datasets", str(shared_data / "dlrm_datasets"), "--max-rows", "50000",
            "--memory-gib", "1"]
    assert main([*home, *args]) == 0
    tasks = stored_tasks(workspace)
    years = []
    for _, task in tasks.iterrows():
        tables = json.loads(task["tables"])
        assert task["memory_cap_bytes"] == int(0.8 * 2**30)
        assert sum(t["num_rows"] * t["dim"] * 4 for t in tables) <= task["memory_cap_bytes"]
        assert all(t["num_rows"] <= 50000 and t["source"].startswith("locality:") for t in tables)
        years.append({re.search(r"dlrm_datasets/(\d{4})/", t["source"]).group(1) for t in tables})
    assert years == [{"2021"}, {"2021"}, {"2022"}, {"2022"}]  # heavy+normal from each year in turn
    one_line_error(capsys, [*home, "--count", "1", "--memory-gib", "0.00001"], r"no draw of tables fits")
    one_line_error(capsys, [*home, "--count", "1", "--kind", "light"], r"unknown task kind 'light'")
