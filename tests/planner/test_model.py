"""Model shapes: parameter counts against closed forms, presets, model-file validation."""
import json

import pytest

from pmdb.errors import PmdbError
from planner.model import PRESETS, Transformer, load


@pytest.mark.parametrize("h", [256, 1024, 12288])
def test_gpt_layer_params_closed_form(h):
    model = Transformer(seq_len=2048, hidden=h, heads=16, layers=2, vocab=50257)
    assert model.layer_params() == 12 * h * h + 13 * h
    assert model.layer_matrix_params() == 12 * h * h


def test_gpt3_175b_total_params():
    m = PRESETS["gpt3-175b"]
    h, L, V, s = 12288, 96, 50257, 2048
    assert m.total_params() == L * (12 * h * h + 13 * h) + V * h + s * h + 2 * h
    assert 174e9 < m.total_params() < 175.5e9   # "175B"


def test_llama_gated_gqa_params():
    m = PRESETS["llama2-70b"]
    h, d, kv, ffn = 8192, 128, 8, 28672
    per_layer = h * (h + 2 * kv * d) + h * h + 3 * h * ffn + 2 * h
    assert m.layer_params() == per_layer
    assert 68.5e9 < m.total_params() < 69.5e9        # published "70B" (68.98B)


def test_model_file_loads_and_defaults(tmp_path):
    path = tmp_path / "small.json"
    path.write_text(json.dumps({"seq_len": 512, "hidden": 512, "heads": 8, "layers": 6, "vocab": 32000}))
    m = load(str(path))
    assert (m.name, m.ffn_hidden, m.kv_heads) == ("small", 2048, 8)


@pytest.mark.parametrize("content, pattern", [
    ({"seq_len": 512, "hidden": 512, "heads": 8, "layers": 6, "vocab": 1, "hiddn": 3}, "unknown field 'hiddn'"),
    ({"seq_len": 512, "hidden": 512, "heads": 8, "vocab": 1}, "missing field 'layers'"),
    ({"seq_len": 512, "hidden": 500, "heads": 8, "layers": 6, "vocab": 1}, "multiple of heads"),
    ({"seq_len": 512, "hidden": 512, "heads": 8, "layers": 6, "vocab": 1, "kv_heads": 3}, "multiple of kv_heads"),
    ({"seq_len": 512, "hidden": 512, "heads": 8, "layers": -6, "vocab": 1}, "layers must be positive"),
    ({"seq_len": 512, "hidden": 512, "heads": 8, "layers": 6, "vocab": 1, "causal": "yes"}, "causal must be"),
])
def test_model_file_errors_name_the_field(tmp_path, content, pattern):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(content))
    with pytest.raises(PmdbError, match=pattern):
        load(str(path))


def test_unknown_model_name():
    with pytest.raises(PmdbError, match="unknown model 'gpt5'"):
        load("gpt5")
