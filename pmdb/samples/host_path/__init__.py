"""Today's GPU host path, shipped: the overhead table T1-T5 (µs per op name) derived from a GPT-2 large training step
recorded with torch 2.11 on an NVIDIA H200 (``../shared/data/traces/gpu/h200_gpt2_large``), with that GPU's spec
sheet. The default lender of GPU predictions whose target has no overhead table of its own (simulator.model_set).
See README.md beside this file for the provenance and how it was made."""
from __future__ import annotations

from pathlib import Path

FOLDER = Path(__file__).resolve().parent
PLATFORM = "nvidia-h200"                        # what `pmdb platform-specs` names the H200 sheet
TABLE = FOLDER / "nvidia-h200_overheads.json"   # fitters.overheads.export_version's object
