"""The simulator's model selection reaches sharding predictions from the `pmdb shard` options: an explicit version
spec and a cache state are used and recorded with every stored prediction; bad or unsatisfiable selections are
one-line errors before anything runs."""
from __future__ import annotations

import re

import pytest

from pmdb import platform as platforms
from pmdb.store import Store
from simulator.threads import comm_shares_core

pytestmark = pytest.mark.slow


def _champions(shard_ws) -> dict[str, int]:
    with Store.open(shard_ws.workspace, read_only=True) as store:
        frame = store.query("SELECT name, version FROM model_aliases WHERE alias = 'champion' ORDER BY name")
    return dict(zip(frame["name"], frame["version"].astype(int)))


def test_version_spec_and_cache_state_are_used_and_recorded(shard_ws, capsys):
    champions = _champions(shard_ws)
    wanted = {n: v for n, v in champions.items() if "embedding_lookup" in n or "all_to_all" in n}
    assert any(".fwd." in n for n in wanted) and any(".bwd." in n for n in wanted)
    spec = ",".join(f"{n}:{v}" for n, v in sorted(wanted.items()))
    # batch 24: a structure no other test studies (this study captures its own trace; test_study expects to)
    args = ["shard", "--tables", str(shard_ws.tiny), "--world-size", "2", "--batch-size", "24", "--sharders",
            "naive,size_greedy", "--models", spec, "--cache-state", "cold", "--format", "json"]
    assert shard_ws.cli(*args) == 0
    capsys.readouterr()
    with Store.open(shard_ws.workspace, read_only=True) as store:
        study = int(store.scalar("SELECT max(study_id) FROM v_shard_studies"))
        preds = store.query("SELECT prediction_id, selection_spec || '/' || selection_cache_state || '/' || "
                            "selection_digest || CASE WHEN comm_shares_core THEN '/comm-shares-core' ELSE '' END "
                            "AS model_selection FROM predictions WHERE prediction_id IN "
                            "(SELECT prediction_id FROM v_shard_plans WHERE study_id = ?)", [study])
        used = store.query("SELECT DISTINCT name, version FROM prediction_models WHERE prediction_id IN "
                           "(SELECT unnest(?::BIGINT[]))", [preds["prediction_id"].astype(int).tolist()])
        platform = store.scalar("SELECT platform FROM v_shard_studies WHERE study_id = ?", [study])
        # the plans run one thread per rank: whether their collectives share the ranks' cores is this machine's
        shared = "/comm-shares-core" if comm_shares_core(platforms.load(store, platform), 2, 1) else ""
    assert len(preds) == 2
    assert all(re.fullmatch(re.escape(spec) + r"/cold/[0-9a-f]{8}" + shared, s) for s in preds["model_selection"])
    assert preds["model_selection"].nunique() == 1
    used_versions = dict(zip(used["name"], used["version"].astype(int)))
    assert used_versions and all(wanted.get(n) == v for n, v in used_versions.items())  # only the spec's versions


@pytest.mark.parametrize("extra, message", [
    (["--cache-state", "lukewarm"], r"bad --cache-state 'lukewarm': use warm, cold, device, blend or reuse"),
    (["--cache-state", "warm"], r"needs the embedding_lookup fwd \(fbgemm_tbe\).*'champion' versions, warm cache"),
    (["--models", "nonsense:x"], r"bad model version spec 'nonsense:x'"),
    (["--overhead-version", "987"], r"no completed overhead version 987"),
])
def test_bad_selections_are_one_line_errors(shard_ws, capsys, extra, message):
    args = ["shard", "--tables", str(shard_ws.tiny), "--world-size", "2", "--batch-size", "32", "--sharders",
            "naive,size_greedy", *extra]
    assert shard_ws.cli(*args) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err and re.search(message, lines[0]), err
