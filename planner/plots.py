"""Time per iteration against GPU count, one line per system, from a stored sweep (PNG, matplotlib Agg)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pmdb.errors import PmdbError  # noqa: E402
from pmdb.store import Store  # noqa: E402


def sweep_frame(store: Store, run_id: str):
    """Best time of each study of a completed planner run: system, GPUs, time, memory."""
    frame = store.query("SELECT system_name, model_name, strategy, gpus, best_time_s, best_memory_bytes "
                        "FROM v_plan_studies WHERE run_id = ? ORDER BY system_name, gpus", [run_id])
    if frame.empty:
        raise PmdbError(f"no planner studies of a completed run {run_id!r}")
    return frame


def plot_sweep(store: Store, run_id: str, path: Path) -> Path:
    """Draw time per iteration (log scale) and memory per GPU against GPUs for every system of the sweep."""
    path = Path(path)
    if not path.parent.exists():
        raise PmdbError(f"cannot write {path}: directory {path.parent} does not exist")
    frame = sweep_frame(store, run_id)
    fig, (ax_time, ax_mem) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, group in frame.groupby("system_name", sort=True):
        fits = group.dropna(subset=["best_time_s"])
        ax_time.plot(fits["gpus"], fits["best_time_s"], marker="o", label=name)
        ax_mem.plot(fits["gpus"], fits["best_memory_bytes"] / 1e9, marker="o", label=name)
    models = ", ".join(sorted(frame["model_name"].unique()))
    for ax, label in ((ax_time, "time per iteration (s)"), (ax_mem, "memory per GPU (GB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    ax_time.set_yscale("log")
    ax_time.set_title(f"{models}: best configuration ({frame['strategy'].iloc[0]})")
    ax_time.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
