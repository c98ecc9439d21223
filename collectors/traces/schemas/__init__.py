"""Versioned format configs: one JSON file per field map of Kineto (``kineto_<v>.json``) and of execution traces
(``et_<v>.json``); a map whose fields did not change across versions lists them all under ``versions``. The format-independent meaning of names is ``pmdb.traces.vocabulary``.

A config maps the parser's logical fields to the field names (dotted paths) of that version, so one parser per
format reads every version; supporting a new version that only renames or moves fields is a new JSON file here.
"""
from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from pmdb.errors import PmdbError

HERE = Path(__file__).resolve().parent


@lru_cache(maxsize=None)
def _configs(fmt: str) -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(HERE.glob(f"{fmt}_*.json")):
        cfg = json.loads(path.read_text())
        for version in cfg.get("versions") or [cfg["version"]]:  # one field map may cover several versions
            found[str(version)] = cfg
    return found


def known_versions(fmt: str) -> list[str]:
    """Supported versions of ``fmt`` ('kineto' or 'et')."""
    return list(_configs(fmt))


def config(fmt: str, version: Any, where: str) -> dict[str, Any]:
    """The config of ``fmt`` at ``version``; an unknown or missing version is refused naming the file."""
    if version is None:
        raise PmdbError(f"{where}: the {fmt_label(fmt)} has no schema version field; "
                        f"supported versions: {', '.join(known_versions(fmt))}")
    cfg = _configs(fmt).get(str(version))
    if cfg is None:
        raise PmdbError(f"{where}: unknown {fmt_label(fmt)} schema {version!r}; "
                        f"supported: {', '.join(known_versions(fmt))}")
    return cfg


def fmt_label(fmt: str) -> str:
    return {"kineto": "Kineto trace", "et": "execution trace"}.get(fmt, fmt)
