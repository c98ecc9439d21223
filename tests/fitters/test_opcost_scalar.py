"""Work of scalar-operand element-wise ops (pmdb.traces.opmap.SCALAR_OPERAND): one tensor read and one written."""
from __future__ import annotations

import numpy as np
import pandas as pd

from fitters import opcost


def test_a_scalar_op_moves_two_tensors_where_the_two_tensor_op_moves_three():
    params = pd.DataFrame({"M": [1024.0, 20 * 1024.0], "N": [5120.0, 1024.0]})
    elements = params["M"].to_numpy() * params["N"].to_numpy()
    for scalar, tensor in (("mul_scalar", "mul"), ("add_scalar", "add")):
        flops, moved = opcost.work(scalar, "fwd", params)
        assert np.array_equal(moved, 2 * 4 * elements) and np.array_equal(flops, elements)   # bytes, fp32
        assert np.array_equal(opcost.work(tensor, "fwd", params)[1], 3 * 4 * elements)
        # the estimate an unknown op got before: models fitted on the imported tables keep their features
        assert opcost.DEFAULT_ELEMENTWISE == opcost.ELEMENTWISE[scalar]["fwd"]
