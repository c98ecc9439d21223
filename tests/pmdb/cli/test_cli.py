"""The CLI as a user runs it: a real process, exit codes, one-line errors. A real `pmdb` process where the process
is under test (its exit code, a lock held by another process); the other commands run in this process
(:func:`harness.in_process`: the same ``main``, output captured), which saves a start-up each."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import in_process

ROOT = Path(__file__).resolve().parents[3]


def pmdb(home, *args, check=True):
    """A real ``python -m pmdb --home HOME ARGS`` process."""
    proc = subprocess.run([sys.executable, "-m", "pmdb", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def here(home, *args, check=True):
    """``pmdb --home HOME ARGS`` in this process (:func:`harness.in_process`), checked as :func:`pmdb`."""
    proc = in_process(home, *args)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def assert_one_line_error(proc, pattern):
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and re.search(pattern, lines[0]), proc.stderr


def test_init_platform_status_runs_sql(tmp_path):
    home = tmp_path / "ws"
    assert "created workspace" in pmdb(home, "init").stdout        # a real process; the rest in this one
    assert "already there" in here(home, "init").stdout
    out = here(home, "platform").stdout
    name = re.search(r"platform (\S+) \(fingerprint", out).group(1)
    assert "rows per table" in here(home, "status").stdout
    here(home, "runs")
    got = json.loads(here(home, "sql", "SELECT name, device_kind FROM platforms", "--format", "json").stdout)
    assert got == [{"name": name, "device_kind": "cpu"}] or got[0]["device_kind"] == "cuda"
    csv = here(home, "sql", "SELECT 1 AS a, 2 AS b", "--format", "csv").stdout
    assert csv.splitlines() == ["a,b", "1,2"]
    here(home, "sql", "SELECT * FROM platforms", "-o", str(tmp_path / "p.parquet"))
    import pandas as pd
    assert pd.read_parquet(tmp_path / "p.parquet")["name"].tolist() == [name]
    sql_file = tmp_path / "q.sql"
    sql_file.write_text("SELECT count(*) AS n FROM platforms")
    assert here(home, "sql", "-f", str(sql_file), "--format", "csv").stdout.splitlines() == ["n", "1"]
    listed = here(home, "sql", "--list").stdout
    first = listed.split()[0]
    here(home, "sql", "--query", first)


def test_platform_name_override(tmp_path):
    home = tmp_path / "ws"
    here(home, "init")
    assert "platform my-box" in here(home, "platform", "--name", "my-box").stdout


@pytest.mark.parametrize("args, pattern", [
    (["status"], r"no pmdb workspace at (\S+) \(create it with `pmdb --home \1 init`"),
    (["runs"], r"no pmdb workspace"),
    (["sql", "SELECT 1"], r"no pmdb workspace"),
])
def test_commands_on_missing_workspace(tmp_path, args, pattern):
    assert_one_line_error(pmdb(tmp_path / "nowhere", *args, check=False), pattern)


@pytest.mark.parametrize("args, pattern", [
    (["sql", "SELEC nonsense"], r"SQL error"),
    (["sql", "-f", "/no/such/file.sql"], r"no such SQL file"),
    (["sql", "--query", "no_such_query"], r"unknown named query"),
    (["sql"], r"exactly one of"),
    (["sql", "SELECT 1", "--format", "xml"], r"bad --format"),
    (["sql", "SELECT 1", "-o", "/no/such/dir/x.csv"], r"does not exist"),
    (["runs", "--status", "bogus"], r"bad --status"),
    (["platform", "--name", "bad name!"], r"bad platform name"),
    (["sql", "DELETE FROM platforms"], r"SQL error.*read-only"),
])
def test_user_mistakes_give_one_line_and_exit_2(tmp_path, args, pattern):
    home = tmp_path / "ws"
    here(home, "init")
    assert_one_line_error(here(home, *args, check=False), pattern)


def _subcommands(command, prefix=()):
    """Every (sub)command path of the click command tree."""
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from _subcommands(sub, prefix + (name,))


def test_every_command_has_help(capsys):
    import typer

    from pmdb.cli.main import app, main
    paths = list(_subcommands(typer.main.get_command(app)))
    names = {p[0] for p in paths if p}
    assert {"init", "platform", "status", "runs", "sql", "quickstart"} <= names
    for path in paths:
        assert main([*path, "--help"]) == 0, path  # in-process: one interpreter for all commands
        out = capsys.readouterr().out
        assert "Usage" in out, path


def test_every_command_and_option_explains_itself():
    import typer

    from pmdb.cli.main import app
    missing = []
    for path in _subcommands(typer.main.get_command(app)):
        command = typer.main.get_command(app)
        for name in path:
            command = command.commands[name]
        if path and not (command.help or "").strip():
            missing.append(" ".join(path))
        missing += [f"{' '.join(path)} --{p.name}" for p in command.params
                    if getattr(p, "param_type_name", "") == "option" and not (p.help or "").strip()]
    assert missing == []


def test_locked_store_names_the_holder(tmp_path):
    home = tmp_path / "ws"
    here(home, "init")
    code = ("import sys; from pmdb.config import Workspace; from pmdb.store import Store; "
            f"s = Store.open(Workspace({str(home)!r}), command='pmdb collect comms'); print('ready', flush=True); "
            "sys.stdin.readline()")
    holder = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"
        assert_one_line_error(pmdb(home, "status", check=False), r"in use by `pmdb collect comms`")
    finally:
        holder.communicate("\n", timeout=30)


def test_readme_gives_the_two_commands_and_makefile_has_them():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^demo:", makefile, re.M) and re.search(r"^test:", makefile, re.M)
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_quickstart_lists_its_steps_and_refuses_unknown_ones(tmp_path):
    listed = here(tmp_path / "fresh", "quickstart", "--list").stdout
    for step in ("ops", "comms", "dlrm-ws1", "dlrm-ws2-naive", "gpt2-ws1", "bert-ws1", "xlnet-ws1", "ops-from-traces",
                 "fit", "predict"):
        assert step in listed
    assert_one_line_error(here(tmp_path / "fresh", "quickstart", "--only", "nope", check=False), "unknown quickstart")


def test_quickstart_step_failure_keeps_going_later_and_completed_steps_are_reused(tmp_path):
    from pmdb.cli import quickstart
    from pmdb.config import Workspace
    home = tmp_path / "fresh"
    failed = here(home, "quickstart", "--only", "overheads", check=False)  # no traces yet: the step must fail
    assert failed.returncode == 2 and f"run `pmdb --home {home} quickstart` again to resume" in failed.stderr
    assert not quickstart._done(Workspace(home), "overheads")
    quickstart._mark_done(Workspace(home), "ops", 1.0)
    assert "done before, reused" in here(home, "quickstart", "--only", "ops").stdout


def test_quickstart_learns_the_in_context_term_from_its_calibration_runs_only(tmp_path):
    from pmdb import platform as platforms
    from pmdb.cli import quickstart
    from pmdb.config import Workspace
    from pmdb.errors import PmdbError
    from pmdb.store import Store

    home = Workspace(tmp_path / "fresh")
    listed = here(home.home, "quickstart", "--list").stdout
    assert "dlrm-ws2-calibration-1" in listed and "--sharder random --seed 1" in listed
    assert "fit comms-context --target step --trace-set ID..." in listed
    judged = {s.args[s.args.index("--sharder") + 1] for s in quickstart.steps("r") if "--sharder" in s.args
              and not s.name.startswith("dlrm-ws2-calibration")}
    assert "random" not in judged and len(judged) == 4           # the judged runs never use the calibration's sharder
    runs, sets = [], []
    with Store.open(home, create=True) as store:
        with pytest.raises(PmdbError, match="no calibration trace set"):
            quickstart.calibration_trace_sets(store)
        platforms.ensure_named(store, "p", device_kind="cpu")
        for label in ("calibration", "judged"):
            with store.run("workload", "p", {}) as run:
                runs.append(run.run_id)
                sets.append(store.insert_one("trace_sets", {"run_id": run.run_id, "platform": "p", "label": label,
                                                            "world_size": 2, "source": "captured"},
                                             returning="trace_set_id"))
    quickstart._mark_done(home, "dlrm-ws2-calibration-1", 1.0, [runs[0]])
    quickstart._mark_done(home, "dlrm-ws2-naive", 1.0, [runs[1]])       # a judged run: never learnt from
    with Store.open(home, read_only=True) as store:
        assert quickstart.calibration_trace_sets(store) == ("--trace-set", str(sets[0]))


def test_quickstart_skips_shape_rounds_once_the_rounds_agree(tmp_path):
    """Rounds 4 and 5 of the traced shapes run only while the first rounds disagree (collectors.ops.shape_rounds)."""
    from pmdb import platform as platforms
    from pmdb.cli import quickstart
    from pmdb.config import Workspace
    from pmdb.store import Store

    home = Workspace(tmp_path / "ws")
    with Store.open(home, create=True) as store:
        name = platforms.register_local(store)["name"]
        for us in (100.0, 103.0, 101.0):
            with store.run("ops", name, {"from_traces": True}) as run:
                store.insert("op_measurements", [{"run_id": run.run_id, "platform": name, "op": "relu", "pass": "fwd",
                                                  "implementation": "torch", "dtype": "float32", "device": "cpu",
                                                  "cache_state": "cold", "params": {"B": 1}, "config_key": "k",
                                                  "median_us": us, "threads": 1}])
    out = here(home.home, "quickstart", "--only", "ops-from-traces-4").stdout
    assert "not needed, 1 traced shapes measured in at least 3 rounds agree within 3.0%" in out
    assert quickstart._done(home, "ops-from-traces-4")
    assert "done before, reused" in here(home.home, "quickstart", "--only", "ops-from-traces-4").stdout
