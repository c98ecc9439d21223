"""The locality_stats.txt parser: the published files and a reordered hand-written one."""
from __future__ import annotations

import numpy as np
import pytest

from collectors.embedding.locality import load_locality_stats, parse_locality_stats, select_entry
from pmdb.errors import PmdbError

TEXT = """
my_file.pt
Avg col size: 2.0
Locality stats after processing 3 batches of size 128
Avg # of unique cols: 50
Avg # of indices: 100
Ratio of index distribution at different column sizes:
(1, 2]: 0.400
(0, 1]: 0.100
(2, 4]: 0.400
(32768+: 0.100
Histogram of col sizes:
(2, 4]: 0.300
(0, 1]: 0.200
(1, 2]: 0.500
(32768+: 0.000
[0, 1, 2, 4]
['0.000', '0.200', '0.700', '1.000']
"""


def test_fields_by_name_and_bins_by_edge():
    (entry,) = parse_locality_stats(TEXT)
    assert entry.name == "my_file.pt" and entry.batches == 3 and entry.batch_size == 128
    assert (entry.avg_indices, entry.avg_unique, entry.avg_col_size) == (100, 50, 2.0)
    assert entry.histogram[:3].tolist() == [0.2, 0.5, 0.3]
    assert entry.lookup_share[[0, 1, 2, 16]].tolist() == [0.1, 0.4, 0.4, 0.1]
    target = entry.target_histogram()
    assert target.sum() == pytest.approx(1.0)
    # the printed 0.000 of the >2^15 bin is recovered from its lookup share: 0.1 * 2.0 / (2^15 * sqrt 2)
    assert target[16] == pytest.approx(0.1 * 2.0 / (2 ** 15 * np.sqrt(2)) / (1 + 0.1 * 2.0 / (2 ** 15 * np.sqrt(2))))


def test_bad_lines_are_user_errors():
    with pytest.raises(PmdbError, match="unrecognised line"):
        parse_locality_stats("a.pt\nsomething odd: here\n")
    with pytest.raises(PmdbError, match="data file name"):
        parse_locality_stats("Avg col size: 3\n")
    with pytest.raises(PmdbError, match="no locality entries"):
        parse_locality_stats("\n\n")


def test_published_files(shared_data):
    for year, count, first in (("2021", 17, "fbgemm_t856_bs65536.pt"), ("2022", 16, "fbgemm_t788_bs131072_0.pt")):
        entries = load_locality_stats(str(shared_data / "dlrm_datasets" / year / "locality_stats.txt"))
        assert len(entries) == count and entries[0].name == first
        for entry in entries:
            assert abs(np.nansum(entry.histogram) - 1.0) < 0.01
            assert abs(np.nansum(entry.lookup_share) - 1.0) < 0.01
            # avg col size is indices / unique cols
            assert entry.avg_indices / entry.avg_unique == pytest.approx(entry.avg_col_size, abs=0.06)
        assert select_entry(entries, "1").name == entries[1].name
        assert select_entry(entries, entries[2].name.removesuffix(".pt")) is entries[2]
        with pytest.raises(PmdbError, match="no locality entry"):
            select_entry(entries, "nope")
