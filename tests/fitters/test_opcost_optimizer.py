"""Work estimates of the optimizer's element-wise ops and the dense embedding (the roofline's flops and bytes)."""
from __future__ import annotations

import pandas as pd

from fitters import opcost


def test_in_place_ops_count_their_operands_not_a_product_of_all_parameters():
    params = pd.DataFrame({"M": [1000.0], "N": [10.0]})
    _, mul_bytes = opcost.work("mul_", "fwd", params)
    _, add_bytes = opcost.work("add_", "fwd", params)
    _, addcdiv_bytes = opcost.work("addcdiv_", "fwd", params)
    assert mul_bytes[0] == 4 * 2 * 10_000 and add_bytes[0] == 4 * 3 * 10_000 and addcdiv_bytes[0] == 4 * 4 * 10_000
    assert opcost.known_ops()["embedding"] == "special"


def test_dense_embedding_backward_pays_for_the_whole_table_forward_only_for_the_rows():
    small, big = (pd.DataFrame({"V": [v], "D": [256.0], "N": [512.0]}) for v in (1000.0, 50257.0))
    assert opcost.work("embedding", "fwd", small)[1][0] == opcost.work("embedding", "fwd", big)[1][0]
    grow = opcost.work("embedding", "bwd", big)[1][0] - opcost.work("embedding", "bwd", small)[1][0]
    assert grow == 4 * (50257 - 1000) * 256  # zeroing the dense [V, D] gradient
