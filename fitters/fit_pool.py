"""Trains a fit's learned models in worker processes while the fit registers the ones before them.

A learned search (mlp, gbdt, DeepSets) runs on one thread and is a function of its training rows and seed only
(:mod:`fitters.work`), so it can run in another process with the same result; the worker also scores it for the
champion's choice (the refits of :mod:`fitters.selection`), which are as deterministic. :class:`FitPool` keeps up to ``jobs``
searches in flight, ahead of the task being registered, in the fit's task order; the fit takes each result when it
reaches that task, so versions are numbered and registered exactly as a fit on one process would (`pmdb fit --jobs
1`). Workers are spawned (``python -m`` style, no fork of a process holding DuckDB and MLflow handles), import torch
and scikit-learn once (a few seconds), ignore Ctrl-C (the fit decides) and are stopped with the fit however it
ends. A worker that dies is one :class:`PmdbError`; the versions registered before it stay registered.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable

from fitters.model import TrainConfig, TrainingSet
from fitters.niceness import lower_priority
from pmdb.errors import PmdbError

MAX_JOBS = 4          # default --jobs: the usable cores, at most this many


def default_jobs() -> int:
    """The usable cores of this process (its CPU affinity), at most :data:`MAX_JOBS`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_JOBS))


def _start_worker(started: Any) -> None:
    """A worker says its process id on ``started`` (a queue the pool reads to stop it), ignores Ctrl-C (the fit
    decides) and yields the CPU to the registering process (:mod:`fitters.niceness`)."""
    started.put(os.getpid())
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lower_priority()


def _parent_of(pid: int) -> int | None:
    """The parent process id of ``pid`` (Linux /proc), None where it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()   # after "pid (name) ": state, ppid, ...
    return int(fields[1]) if len(fields) > 1 else None


def train(fit_kernel: Callable[..., Any], family: str, training: TrainingSet, seed: int, budget_s: float,
          config: TrainConfig, gbdt_trials: int) -> tuple[Any, float]:
    """One learned search, in a worker: (what ``fit_kernel`` returns, seconds it took). ``fit_kernel`` returns a model
    or a tuple whose first item is the model (what else the worker computed with it: its validation score); the
    model's weight files are already written (:meth:`fitters.model.Model.keep_weight_files`)."""
    started = time.monotonic()
    result = fit_kernel(family, training, seed, budget_s, config, gbdt_trials)
    seconds = time.monotonic() - started
    (result[0] if isinstance(result, tuple) else result).keep_weight_files()
    return result, seconds


class FitPool:
    """Up to ``jobs`` learned searches in flight in worker processes. Use as a context manager: :meth:`submit`
    returns a handle, :meth:`result` waits for it."""

    def __init__(self, jobs: int):
        self.jobs = jobs
        context = multiprocessing.get_context("spawn")
        self._started = context.SimpleQueue()   # each worker's process id, as it starts
        self._workers: set[int] = set()
        self._executor = ProcessPoolExecutor(max_workers=jobs, mp_context=context, initializer=_start_worker,
                                             initargs=(self._started,))

    def __enter__(self) -> "FitPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(cancel=exc[0] is not None)

    def submit(self, fit_kernel: Callable[..., Any], family: str, training: TrainingSet, seed: int,
               budget_s: float, config: TrainConfig, gbdt_trials: int) -> Future:
        try:
            return self._executor.submit(train, fit_kernel, family, training, seed, budget_s, config, gbdt_trials)
        except BrokenProcessPool as exc:
            raise self._dead() from exc

    def result(self, future: Future, label: str) -> tuple[Any, float]:
        """(what the fit returned, seconds) of a submitted search; the search's own error as raised, a dead worker as one
        PmdbError naming ``label``."""
        try:
            return future.result()
        except BrokenProcessPool as exc:
            raise self._dead(label) from exc

    def close(self, cancel: bool = False) -> None:
        """Stop the workers: after the searches in flight when the fit went well, at once when it did not."""
        if cancel:
            for pid in self.worker_pids():
                if _parent_of(pid) == os.getpid():   # still our worker, not a process that took its id since
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        self._executor.shutdown(wait=True, cancel_futures=cancel)
        self._started.close()

    def worker_pids(self) -> set[int]:
        """The process ids of the workers started so far (some may have ended since)."""
        while not self._started.empty():
            self._workers.add(int(self._started.get()))
        return set(self._workers)

    @staticmethod
    def _dead(label: str | None = None) -> PmdbError:
        what = f" while fitting {label}" if label else ""
        return PmdbError(f"a fit worker process ended{what} (killed, or out of memory); the versions registered so "
                         f"far are kept: run `pmdb fit` again, or with --jobs 1")
