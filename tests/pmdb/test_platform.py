import os

import pytest

from pmdb import platform
from pmdb.errors import PmdbError


def test_detects_this_machine(store):
    row = platform.register_local(store)
    assert row["device_kind"] in ("cpu", "cuda")
    assert row["cpu_cores"] == len(os.sched_getaffinity(0))
    assert row["memory_bytes"] > 2**30
    assert row["torch_version"].startswith("2.")
    assert row["fbgemm_version"] is not None, "fbgemm-gpu(-cpu) should be installed and importable"
    stored = platform.describe(store, row["name"])
    assert stored["fingerprint"] == row["fingerprint"]


def test_fingerprint_is_stable_and_name_reused(store):
    first = platform.register_local(store)
    second = platform.register_local(store)
    assert first["name"] == second["name"] and first["fingerprint"] == second["fingerprint"]
    assert store.scalar("SELECT count(*) FROM platforms") == 1


def test_override_name_and_conflicts(store):
    row = platform.register_local(store, "my-box")
    assert row["name"] == "my-box"
    platform.ensure_named(store, "a100-x8", topology="NV12 all-to-all")
    with pytest.raises(PmdbError, match="another machine"):
        platform.register_local(store, "a100-x8")
    with pytest.raises(PmdbError, match="bad platform name"):
        platform.register_local(store, "bad name!")


def test_resolve_unknown_platform_is_a_clear_error(store):
    with pytest.raises(PmdbError, match="unknown platform 'nope'"):
        platform.resolve(store, "nope")
    assert platform.resolve(store, None) == platform.register_local(store)["name"]
