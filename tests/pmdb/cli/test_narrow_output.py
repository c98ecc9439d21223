"""At COLUMNS=80 the named queries' tables show what tells their rows apart (world size, sharder, the error
columns) with the values every row shares printed once above and the ids last; notes are wrapped, never cut."""
from __future__ import annotations

from pmdb.notes import say, wrapped
from tests.pmdb.test_cli_tables import PLATFORM, home, run  # noqa: F401  (fixture)


def test_prediction_vs_baseline_shows_errors_not_ids_at_80_columns(home, monkeypatch, capsys):  # noqa: F811
    _, out, _ = run(home, "sql", "--query", "prediction_vs_baseline", monkeypatch=monkeypatch, capsys=capsys)
    lines = out.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[:3] == [f"platform: {PLATFORM}", "family: dlrm", "mode: model"]
    header = lines[3].split()
    assert header[:4] == ["workload", "ws", "batch", "sharder"] and {"err%", "base_err%"} <= set(header)
    assert "prediction_id" not in header and "prediction_id" in lines[-1]  # left out first, and named
    _, csv, _ = run(home, "sql", "--query", "prediction_vs_baseline", "--format", "csv", monkeypatch=monkeypatch,
                    capsys=capsys)
    assert csv.splitlines()[0].startswith("prediction_id,platform,family")  # csv keeps the query's columns


def test_notes_wrap_to_the_terminal_without_breaking_words(monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "80")
    text = ("rank(s) 0: the execution trace was recorded in the same pass as the Kineto trace, which it slows: "
            "`pmdb fit overheads` leaves such traces out unless --include-joint")
    say("note", text)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all(len(line) <= 80 for line in lines)
    assert lines[0].startswith("pmdb: note: rank(s) 0:") and all(line.startswith("  ") for line in lines[1:])
    assert " ".join(" ".join(lines).split()) == f"pmdb: note: {text}"
    assert "--include-joint" in lines[-1] and wrapped("a " + "x" * 90, 40).split("\n")[1] == "  " + "x" * 90


def test_notes_stay_one_line_in_a_pipe_without_columns(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    say("warning", "x " * 100)
    assert capsys.readouterr().err.count("\n") == 1  # captured output is no terminal: one line, whole


def test_a_long_shared_value_printed_above_the_table_is_cut_to_the_width():
    import pandas as pd

    from pmdb.cli.common import table_lines

    frame = pd.DataFrame({"platform": ["p" * 100] * 2, "kind": ["ops", "fit"]})
    lines = table_lines(frame, lift=("platform",), width=80)
    assert len(lines[0]) == 80 and lines[0].startswith("platform: ppp") and lines[0].endswith("…")
    assert lines[1:] == ["kind", "ops", "fit"]
