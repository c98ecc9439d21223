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


def test_cache_sizes_from_sysfs_layout(tmp_path):
    from pmdb.platform import cache_sizes

    for index, (level, kind, size) in enumerate([(1, "Data", "32K"), (1, "Instruction", "32K"),
                                                 (2, "Unified", "512K"), (3, "Unified", "32768K")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        (folder / "level").write_text(f"{level}\n")
        (folder / "type").write_text(f"{kind}\n")
        (folder / "size").write_text(f"{size}\n")
    assert cache_sizes(str(tmp_path)) == {"l2_bytes": 512 * 2 ** 10, "llc_bytes": 32 * 2 ** 20}
    assert cache_sizes(str(tmp_path / "missing")) == {}


def test_registered_platform_knows_its_caches(store):
    from pmdb import platform as platforms
    from pmdb.platform import cache_sizes

    name = platforms.resolve(store, None)
    assert platforms.load(store, name).cache_bytes == (cache_sizes().get("l2_bytes"), cache_sizes().get("llc_bytes"))
