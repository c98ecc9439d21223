"""Fixtures of the workload tests: a tiny DLRM shape and a helper running a request against the real store."""
from __future__ import annotations

import json

import pytest

from pmdb import platform as platforms

TINY_DLRM = {"name": "tiny", "bottom_mlp": [16, 8], "top_mlp": [16, 1], "batch_size": 16,
             "tables": [{"num_rows": 1500, "pooling": 3}, {"num_rows": 400, "pooling": 1},
                        {"num_rows": 3000, "pooling": 6, "index_source": "zipf:1.05"},
                        {"num_rows": 800, "pooling": 2}, {"num_rows": 2000, "pooling": 4}]}


@pytest.fixture
def tiny_dlrm(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY_DLRM))
    return path


@pytest.fixture
def local_platform(store) -> str:
    return platforms.resolve(store, None)


def completed(store, run_id: str) -> bool:
    return store.scalar("SELECT status FROM collection_runs WHERE run_id = ?", [run_id]) == "completed"
