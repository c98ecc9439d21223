"""Run ids as `pmdb runs` shows them (12 characters): the store resolves a unique prefix to the whole id, refuses
an ambiguous one in one line, and `pmdb export --run` takes one."""
from __future__ import annotations

import pytest

from pmdb.errors import PmdbError
from pmdb.store import RUN_ID_SHOWN


def _run_with_id(store, run_id: str) -> None:
    store.conn.execute("INSERT INTO collection_runs (run_id, kind, pmdb_version, status) "
                       "VALUES (?, 'ops', 'test', 'completed')", [run_id])


def test_a_unique_prefix_names_its_run_and_an_ambiguous_one_is_refused(store):
    _run_with_id(store, "abcdef0123456789aaaa")
    _run_with_id(store, "abcdef0123999999bbbb")
    assert store.resolve_run_id("abcdef0123456789aaaa") == "abcdef0123456789aaaa"
    assert store.resolve_run_id("abcdef01234567") == "abcdef0123456789aaaa"
    assert store.resolve_run_id("zzzzzzzz") == "zzzzzzzz"      # unknown: the caller says so
    assert store.resolve_run_id("abc") == "abc"                # too short to be taken as a prefix
    with pytest.raises(PmdbError, match="is the start of several runs"):
        store.resolve_run_id("abcdef0123")


def test_runs_shows_twelve_characters_and_export_takes_them(tmp_path):
    from pmdb.cli.main import main
    from pmdb.config import Workspace
    from pmdb.store import Store
    from harness import in_process

    home = Workspace(tmp_path / "ws")
    with Store.open(home, create=True) as store:
        with store.run("ops", None, {}) as run:
            pass
    whole = run.run_id
    done = in_process(home.home, "runs")
    code, out = done.returncode, done.stdout
    assert code == 0 and whole[:RUN_ID_SHOWN] in out and whole not in out
    assert main(["--home", str(home.home), "export", str(tmp_path / "out"), "--run", whole[:RUN_ID_SHOWN]]) == 0
    assert (tmp_path / "out" / "manifest.json").exists() and whole in (tmp_path / "out" / "manifest.json").read_text()
