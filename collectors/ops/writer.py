"""Batched writes of op measurements (and their embedding statistics) while a sweep runs.

Rows are written every ``every_s`` seconds or ``max_rows`` rows, so an interruption loses at most one batch. A batch
is written in one transaction with Ctrl-C/SIGTERM held back until it is in the store, so a measurement never lands
without its embedding statistics. A batch that cannot be written (disk full) stays pending and raises
:class:`pmdb.store.StoreWriteError`: the run fails instead of going on with rows missing.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time
from typing import Any, Callable, Iterator

from pmdb.store import Store, StoreWriteError


@contextlib.contextmanager
def _interrupt_handler(handler: Callable[[int, Any], None]) -> Iterator[None]:
    """``handler`` for SIGINT and SIGTERM during the block, then the previous handlers again; a signal the process was
    started ignoring (a background job's SIGINT) stays ignored."""
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig, before in previous.items():
        if before is not signal.SIG_IGN:
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, before in previous.items():
            signal.signal(sig, before)


@contextlib.contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, then raise KeyboardInterrupt if one came (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    with _interrupt_handler(lambda signum, frame: received.append(signum)):
        yield
    if received:
        raise KeyboardInterrupt


@contextlib.contextmanager
def sticky_interrupts() -> Iterator[Callable[[], None]]:
    """Ctrl-C/SIGTERM raise KeyboardInterrupt as usual and are also remembered; the yielded ``check()`` raises it again
    at a safe point (between configs). An interrupt raised while Python runs a finalizer is only printed ("Exception
    ignored in ...") and lost: without this a sweep interrupted at that moment ran to its end and exited 0."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield lambda: None
        return

    def interrupt(signum: int, frame: Any) -> None:
        received.append(signum)
        raise KeyboardInterrupt

    def check() -> None:
        if received:
            raise KeyboardInterrupt

    with _interrupt_handler(interrupt):
        yield check


class BatchWriter:
    """Collects op_measurements rows (each with optional embedding_batch_stats rows) and writes them in batches."""

    def __init__(self, store: Store, run_id: str, every_s: float = 5.0, max_rows: int = 500):
        self.store = store
        self.run_id = run_id
        self.every_s = every_s
        self.max_rows = max_rows
        self.pending: list[tuple[dict[str, Any], list[dict[str, Any]] | None]] = []
        self.rows_written = 0
        self.stats_written = 0
        self.failed: StoreWriteError | None = None
        self._last = time.monotonic()

    def add(self, row: dict[str, Any], stats: list[dict[str, Any]] | None = None) -> None:
        self.pending.append((row, stats))
        if len(self.pending) >= self.max_rows or time.monotonic() - self._last >= self.every_s:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows in one transaction; on failure they stay pending and StoreWriteError is raised."""
        if not self.pending:
            return
        if self.failed is not None:
            raise self.failed
        with deferred_interrupts():
            batch = self.pending
            try:
                with self.store.transaction():
                    ids = [r[0] for r in self.store.conn.execute(
                        "SELECT nextval('seq_measurement_id') FROM range(?)", [len(batch)]).fetchall()]
                    rows, stats_rows = [], []
                    for measurement_id, (row, stats) in zip(ids, batch):
                        rows.append({**row, "measurement_id": measurement_id, "run_id": self.run_id})
                        for stat in stats or ():
                            stats_rows.append({**stat, "measurement_id": measurement_id, "run_id": self.run_id})
                    self.store.insert("op_measurements", rows)
                    if stats_rows:
                        self.store.insert("embedding_batch_stats", stats_rows)
            except Exception as exc:  # noqa: BLE001 - whatever the cause, these rows are not in the store
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                self.failed = StoreWriteError(
                    f"run {self.run_id}: writing {len(batch)} measured rows to the store failed "
                    f"({type(exc).__name__}: {first}); the run failed; its {self.rows_written} rows written "
                    f"before are kept and a re-run of the same command resumes from them (free disk space first)")
                raise self.failed from exc
            self.pending = []
            self.rows_written += len(rows)
            self.stats_written += len(stats_rows)
            self._last = time.monotonic()
