"""The roofline's fresh-page term: recovered from a law with a step at the mmap threshold, absent (0) when no
training row maps fresh output, never applied to in-place ops; saved and reloaded."""
import numpy as np
import pandas as pd
import pytest

from fitters import opcost, roofline
from fitters.model import TrainingSet, load_dir

PEAKS = {"gemm_flops": 1e11, "mem_bw": 1e10}


def _law(op: str, params: pd.DataFrame, fresh_us_per_mib: float) -> np.ndarray:
    """A known timing law: 5 µs + bytes at 40% of the peak bandwidth + the fresh-page cost."""
    _, moved = opcost.work(op, "fwd", params)
    fresh_mib = opcost.fresh_bytes(op, "fwd", params) / 2**20
    return 5.0 + moved / (0.4 * PEAKS["mem_bw"]) * 1e6 + fresh_us_per_mib * fresh_mib


def _set(op: str, counts, fresh_us_per_mib: float) -> TrainingSet:
    params = pd.DataFrame({"M": np.asarray(counts, dtype=float), "N": 1.0})
    return TrainingSet(op, "fwd", "float32", params, _law(op, params, fresh_us_per_mib),
                       np.arange(len(counts)).astype(str), PEAKS)


def test_recovers_the_step_at_the_mmap_threshold(tmp_path):
    counts = [2.0 ** k for k in range(10, 26)] + [6e6, 1e7, 1.3e7]    # 4 KiB .. 128 MiB of float32
    model = roofline.fit(_set("sqrt", counts, 700.0))
    assert model.fresh_us_per_mib == pytest.approx(700.0, rel=0.05)
    big = pd.DataFrame({"M": [12_866_000.0], "N": [1.0]})            # gpt2's token embedding, 51 MB
    assert model.predict(big)[0] == pytest.approx(_law("sqrt", big, 700.0)[0], rel=0.05)
    small = pd.DataFrame({"M": [1e6], "N": [1.0]})                   # below the threshold: no fresh pages
    assert opcost.fresh_bytes("sqrt", "fwd", small)[0] == 0
    again = load_dir(model.save(tmp_path / "sqrt"))
    assert np.allclose(again.predict(big), model.predict(big))


def test_no_fresh_rows_no_term_and_in_place_ops_allocate_nothing():
    below = roofline.fit(_set("sqrt", [2.0 ** k for k in range(10, 23)], 700.0))
    assert below.fresh_us_per_mib == 0.0
    assert not opcost.fresh_bytes("add_", "fwd", pd.DataFrame({"M": [1e8], "N": [1.0]})).any()
    in_place = roofline.fit(_set("add_", [2.0 ** k for k in range(10, 27)], 700.0))
    assert in_place.fresh_us_per_mib == 0.0
