"""``pmdb report``: PNG figures and one HTML page (no scripts, no external files; images beside it) from SQL over
the store, so every figure matches the data it was drawn from.

Sections (:mod:`report.sections`), always all present: kernel-model held-out errors as one sorted dot plot with a
linked table; collective curves over their points with their held-out errors (paper Fig. 9); predicted vs measured
vs baseline per workload with the measured spread (Fig. 10/11) and the per-rank, per-stream breakdown (Fig. 2); the
sharding study table (Table IV); the planner's time against GPU count. A section without data says what is missing
and which command produces it; stated warnings flag a baseline that beats the model, plans the model cannot tell
apart, and fitted collective curves that jump.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pmdb.errors import PmdbError
from pmdb.store import Store
from report.page import Section, render
from report.sections import BUILDERS

PAGE = "index.html"
SECTION_IDS = ("kernel_models", "collectives", "predictions", "breakdown", "sharding", "planner")


@dataclass
class Report:
    """What was written: the page, the figures, the sections (with what each lacks)."""

    page: Path
    figures: list[Path]
    sections: list[Section]

    @property
    def missing(self) -> dict[str, str]:
        return {s.key: s.missing for s in self.sections if s.missing}

    @property
    def warnings(self) -> dict[str, list[str]]:
        return {s.key: s.warnings for s in self.sections if s.warnings}


def build_report(store: Store, out_dir: Path, platform: str | None = None) -> Report:
    """Write every figure and ``index.html`` into ``out_dir``; the report (files, sections, what is missing)."""
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PmdbError(f"cannot create the report folder {out}: {exc.strerror}") from None
    sections: list[Section] = []
    for build in BUILDERS:
        made = build(store, out, platform)
        sections += made if isinstance(made, list) else [made]
    page = out / PAGE
    page.write_text(render(sections, str(store.workspace.db_path), platform), encoding="utf-8")
    return Report(page, [out / f for s in sections for f in s.figures], sections)
