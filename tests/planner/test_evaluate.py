"""Candidates prepared once and priced many times: several models' candidates merged into one evaluation price
each candidate as its own model's evaluation does."""
import numpy as np
import pytest

from planner import space
from planner.calibration import Calibrations
from planner.evaluate import BREAKDOWN_KEYS, evaluate_prepared, merge, prepare
from planner.fitting import PlannerCalibration
from planner.model import PRESETS, Transformer

MODELS = [Transformer(name="a", seq_len=256, hidden=512, heads=8, layers=8, vocab=5000),
          Transformer(name="b", seq_len=512, hidden=1024, heads=16, layers=4, vocab=5000),
          Transformer(name="c", seq_len=128, hidden=256, heads=4, layers=2, vocab=5000)]
FITTED = PlannerCalibration({"overlap_sharpness": 3.0, "layer_fixed_us": 80.0, "network_eff": 0.4})


def _prepared(model, fw, strategy="1d", gpus=16, batch=32):
    rows = space.structures(model, strategy, gpus, batch)
    return prepare(model, space.expand(model, strategy, rows, batch, space.domain_size(gpus, 8), fw), fw, reuse=True)


@pytest.mark.parametrize("fitted", [None, FITTED])
def test_merged_candidates_price_as_their_own_models_do(a100, megatron_fw, fitted):
    parts = [_prepared(m, megatron_fw) for m in MODELS]
    merged = merge(parts)
    assert merged is not None and len(merged.c) == sum(len(p.c) for p in parts)
    system = fitted.system(a100) if fitted else a100
    alone = [evaluate_prepared(p, system, fitted) for p in parts]
    together = evaluate_prepared(merged, system, fitted)
    assert np.array_equal(together.time, np.concatenate([e.time for e in alone]))
    for key in BREAKDOWN_KEYS:
        assert np.array_equal(together.parts[key], np.concatenate([e.parts[key] for e in alone])), key
    assert np.array_equal(together.memory["total"], np.concatenate([e.memory["total"] for e in alone]))
    assert np.array_equal(together.fits, np.concatenate([e.fits for e in alone]))
    for kind, counts in together.usage.items():
        assert counts == {s: sum(e.usage[kind][s] for e in alone) for s in counts}


def test_what_differs_does_not_merge(a100, megatron_fw, planner_fw):
    assert merge([_prepared(MODELS[0], megatron_fw), _prepared(MODELS[1], planner_fw)]) is None      # framework
    assert merge([_prepared(MODELS[0], megatron_fw),
                  _prepared(MODELS[0], megatron_fw, strategy="context")]) is None                  # strategy
    llama = Transformer(name="l", seq_len=256, hidden=512, heads=8, layers=8, vocab=5000, ffn_hidden=1376,
                        gated_mlp=True, bias=False, learned_positions=False, tied_embeddings=False)
    assert PRESETS["llama2-7b"].gated_mlp                                                        # a real shape
    assert merge([_prepared(MODELS[0], megatron_fw), _prepared(llama, megatron_fw)]) is None       # its steps
    assert merge([_prepared(m, megatron_fw, strategy="summa") for m in MODELS[:2]]) is None        # SUMMA panels
    rows = space.structures(MODELS[0], "1d", 8, 16)
    once = [prepare(MODELS[0], space.expand(MODELS[0], "1d", rows, 16, 8, megatron_fw), megatron_fw)] * 2
    assert merge(once) is None                                          # collectives not stacked (no reuse)
    # calibrated GEMM or collective models answer for one model's op arrays: never for merged candidates
    merged = merge([_prepared(m, megatron_fw) for m in MODELS[:2]])
    with pytest.raises(ValueError, match="without calibrated GEMM or collective models"):
        evaluate_prepared(merged, a100, Calibrations(_GemmModel()))


class _GemmModel:
    label = "a GEMM model"

    def gemm_time(self, M, N, K, count):
        return np.full(np.broadcast(M, N, K, count).shape, 1e-3)
