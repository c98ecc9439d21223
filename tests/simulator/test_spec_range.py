"""The spec-only range of a GPU prediction (simulator/cross_gpu_range.py): a small BERT captured shape-only, predicted
on the L4 (spec sheet only) with cross-GPU models fitted on slices of three real NeuSight tables. The range holds
the step simulated again with each held-out source GPU's measured/predicted ratio applied to the cross-GPU priced
kernels; it is stored, printed, and absent where no model has ratios (a GPU priced by its own fitted models)."""
from __future__ import annotations

import gzip
import json
import shutil

import pytest

from harness import SHARED_DATA
from pmdb.cli.main import main
from pmdb.config import Workspace
from pmdb.samples import lane_attainment
from pmdb.store import Store
from pmdb.traces.from_store import load_graphs
from simulator import cross_gpu_range
from simulator import semantics as sem_mod
from simulator.embedding_stats import EmbeddingStats
from simulator.engine import simulate, steady_period
from simulator.session import PredictionSession
from simulator.timing import ModelTiming

# large enough that its step is bound by the device, not by the host's launches (a tiny one's range is the
# prediction itself: the host path sets its pace whatever the kernels cost)
SMALL_BERT = {"model_type": "bert", "num_hidden_layers": 2, "hidden_size": 512, "num_attention_heads": 8,
              "intermediate_size": 2048, "vocab_size": 1000, "max_position_embeddings": 128}
SOURCES = {"p4": "Tesla_P4", "t4": "Tesla_T4", "v100": "Tesla_V100-PCIE-32GB"}


def _slice(source, target, rows: int) -> None:
    lines = gzip.decompress(source.read_bytes()).decode().splitlines()
    target.write_text("\n".join(lines[:rows + 1]) + "\n")


@pytest.fixture(scope="module")
def l4_template(tmp_path_factory, mlflow_template):
    """Sheets of three table GPUs and the L4, 300-row slices of their linear and add tables, cross-GPU models of
    the L4 (leave-one-GPU-out over the three), and a small BERT captured shape-only; built once per module."""
    kernels = SHARED_DATA / "gpu_kernels" / "neusight"
    if not all((kernels / folder).is_dir() for folder in SOURCES.values()):
        pytest.skip(f"{kernels} lacks a table GPU (shared data not present)")
    root = tmp_path_factory.mktemp("spec_range")
    ws = Workspace(root / "ws")
    Store.open(ws, create=True).close()
    shutil.copy(mlflow_template.mlflow_db, ws.mlflow_db)
    home = ["--home", str(ws.home)]
    for name, folder in SOURCES.items():
        assert main([*home, "platform-specs", str(kernels / "device_configs" / f"{folder}.json"), "--name", name]) == 0
        tables = root / name
        tables.mkdir()
        for op in ("linear", "add"):
            _slice(kernels / folder / f"{op}.csv.gz", tables / f"{op}.csv", 300)
        assert main([*home, "collect", "import-ops", str(tables), "--format", "neusight", "--platform", name]) == 0
    assert main([*home, "platform-specs", str(kernels / "device_configs" / "NVIDIA_L4.json"), "--name", "l4"]) == 0
    assert main([*home, "fit", "cross-gpu", "--target", "l4", "--op", "fully_connected", "--op", "add",
                 "--no-progress"]) == 0
    config = root / "small_bert.json"
    config.write_text(json.dumps(SMALL_BERT))
    assert main([*home, "collect", "workload", "transformer", "--graph-only", "--config", str(config),
                 "--batch-size", "8", "--seq-len", "128"]) == 0
    return ws


@pytest.fixture
def on_l4(l4_template, tmp_path) -> Workspace:
    """A private copy of the template (the tests predict and fit into it)."""
    from harness import copy_workspace

    return Workspace(copy_workspace(l4_template.home, tmp_path / "ws"))


def test_the_range_is_stored_printed_and_built_from_the_held_out_ratios(on_l4, capsys):
    capsys.readouterr()
    assert main(["--home", str(on_l4.home), "predict", "--trace-set", "1", "--target-platform", "l4"]) == 0
    out = capsys.readouterr().out
    with Store.open(on_l4, read_only=True) as store:
        row = store.query("SELECT predicted_us, range_low_us, range_high_us, CAST(range_detail AS VARCHAR) AS d "
                          "FROM predictions").iloc[0]
        session = PredictionSession(store, "l4")
        graph = load_graphs(store, 1, pick="best", detail=session.detail)[0]
    detail = json.loads(row["d"])
    steps = detail["per_gpu_us"]
    assert sorted(steps) == sorted(SOURCES)                        # one step per held-out source GPU
    assert row["range_low_us"] == pytest.approx(min(row["predicted_us"], *steps.values()), rel=1e-6)
    assert row["range_high_us"] == pytest.approx(max(row["predicted_us"], *steps.values()), rel=1e-6)
    assert row["range_low_us"] < row["range_high_us"]
    assert 0 < detail["priced_share"] < 1        # linear and add by cross-GPU models; the rest by the roofline
    low, high = row["range_low_us"] / 1000, row["range_high_us"] / 1000
    text = " ".join(out.split())
    assert f"range {low:.3f}-{high:.3f} ms: l4 is known by its spec sheet only" in text
    assert "A new GPU drawn like these 3 would fall within their span about 2 times in 4; but its sheet lies " \
           "outside theirs (FP32 rate 31.3 TFLOP/s (sources 5.7-14), FP32 per byte 104 FLOP/B (sources " \
           "15.6-29.7), FP32 lanes per SM 128 (sources 64), L2 48 MiB (sources 2-6)), so it is not drawn like " \
           "them: the range is a guide, not a bound" in text
    assert detail["sheet_outside"]["flop_per_byte"] == pytest.approx([31334 / 300, 14029 / 900, 5699 / 192])
    # the L4's 128-lane SMs: its GEMMs carry the lane correction, said and stored; add does not
    factor = lane_attainment.load().time_factor
    assert detail["lane_factor"] == {"fully_connected": pytest.approx(factor, abs=1e-4)}
    assert ("so these are priced by what wider SMs were measured to take over the same models' price (the lane "
            f"correction, pmdb/samples/lane_attainment): fully_connected x{factor:.2f}") in text

    assert main(["--home", str(on_l4.home), "predict", "--trace-set", "1", "--target-platform", "l4",
                 "--format", "json"]) == 0
    (again,) = json.loads(capsys.readouterr().out)
    assert (again["range_low_ms"], again["range_high_ms"]) == (round(low, 3), round(high, 3))

    # a what-if on the same GPU (twice the batch) carries its own range
    assert main(["--home", str(on_l4.home), "predict", "--trace-set", "1", "--target-platform", "l4", "--what-if",
                 "--batch-size", "16", "--format", "json"]) == 0
    (derived,) = json.loads(capsys.readouterr().out)
    low16, high16 = (float(v) for v in derived["range_ms"].split("-"))
    assert low16 < derived["predicted_ms"] < high16 and high16 > high

    # each held-out GPU's step is the same programs with that GPU's ratios on the cross-GPU priced ops
    timing = ModelTiming(session.models, session.overheads, session.platform.semantics, EmbeddingStats())
    engine = sem_mod.get(session.platform.semantics)
    programs = timing.programs(graph)
    unchanged = timing.rescaled(graph, {})
    assert steady_period(unchanged, engine, simulate(unchanged, engine)) == \
        pytest.approx(steady_period(programs, engine, simulate(programs, engine)))
    per_gpu = cross_gpu_range.factors(session.models, timing.priced_by)
    assert sorted(per_gpu) == sorted(SOURCES)
    labels = {timing.priced_by[key] for f in per_gpu.values() for key in f}
    assert labels and all("~l4:" in label for label in labels)      # only the L4's cross-GPU versions
    for gpu, factors in per_gpu.items():
        moved = timing.rescaled(graph, factors)
        assert steady_period(moved, engine, simulate(moved, engine)) == pytest.approx(steps[gpu], rel=1e-6)
        doubled = timing.rescaled(graph, {key: 2 * f for key, f in factors.items()})
        assert steady_period(doubled, engine, simulate(doubled, engine)) > steps[gpu]   # the moved ops count


def test_no_range_without_held_out_ratios(on_l4, capsys):
    """The V100 priced by roofline models fitted on its own rows: nothing to take a spread from."""
    home = ["--home", str(on_l4.home)]
    assert main([*home, "fit", "--platform", "v100", "--op", "fully_connected", "--op", "add", "--family",
                 "roofline", "--no-progress"]) == 0
    capsys.readouterr()
    assert main([*home, "predict", "--trace-set", "1", "--target-platform", "v100"]) == 0
    assert "known by its spec sheet only" not in capsys.readouterr().out
    with Store.open(on_l4, read_only=True) as store:
        row = store.query("SELECT range_low_us, range_high_us, range_detail FROM predictions").iloc[0]
    assert row.isna().all()
