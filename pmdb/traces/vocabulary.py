"""Format-independent meaning of names found in traces (``vocabulary.json``): event classes, collectives, iteration
markers, buffers written in place; and splitting of op-schema argument lists. Parsers and readers of every stage
share it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Vocabulary:
    """Format-independent meaning of event categories and op names (``vocabulary.json``)."""

    categories: dict[str, frozenset[str]]
    collective_ops: re.Pattern
    collective_kernels: re.Pattern
    markers: tuple[tuple[re.Pattern, str], ...]
    et_root_prefix: str
    written_inputs: dict[str, tuple[int, ...]]
    id_link_min_name_agreement: float

    def category_class(self, category: str | None) -> str | None:
        """'op', 'annotation', 'runtime' or 'device' for a Kineto category; None when pmdb does not use it."""
        for cls in ("op", "annotation", "runtime", "device"):
            if category in self.categories[cls]:
                return cls
        return None


@lru_cache(maxsize=1)
def common() -> Vocabulary:
    raw = json.loads((HERE / "vocabulary.json").read_text())
    return Vocabulary(
        categories={k: frozenset(v) for k, v in raw["categories"].items()},
        collective_ops=re.compile("|".join(raw["collective_ops"])),
        collective_kernels=re.compile("|".join(raw["collective_kernels"])),
        markers=tuple((re.compile(m["regex"]), m["mode"]) for m in raw["iteration_markers"]),
        et_root_prefix=raw["et_root_prefix"],
        written_inputs={k: tuple(v) for k, v in raw["written_inputs"].items()},
        id_link_min_name_agreement=float(raw["id_link_min_name_agreement"]),
    )




def split_top_level(text: str) -> list[str]:
    """Split at commas outside brackets: 'Tensor(float),GenericList[Int,Int]' -> two parts."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if current:
        parts.append("".join(current).strip())
    return parts
