"""How a run is named in the report's figures and tables."""
import pandas as pd

from report.prediction_figures import label


def test_a_single_rank_run_is_not_named_after_a_sharder():
    # a world-size-1 DLRM run stores the default sharder's name, but there is nothing to shard over
    assert label(pd.Series({"workload": "dlrm_mixed", "batch_size": 256, "world_size": 1,
                            "sharder": "size_lookup_greedy"})) == "dlrm_mixed b256 ws1"
    assert label(pd.Series({"workload": "dlrm_mixed", "batch_size": 256, "world_size": 2,
                            "sharder": "naive"})) == "dlrm_mixed b256 ws2 naive"
    assert label(pd.Series({"workload": "gpt2", "batch_size": None, "world_size": 1, "sharder": None})) == "gpt2 ws1"
