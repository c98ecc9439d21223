"""Draws a fit's figures in a second process while the fit goes on, and attaches each to its version's MLflow run.

Drawing a version's figures takes about as long as fitting a small model; on a machine with two cores the fit need not
wait for it. :class:`FigureWorker` starts ``python -m fitters.figure_worker`` (matplotlib, nothing else: it never
opens the store or MLflow), hands it each version's :class:`fitters.plots.FigureJob` list (arrays in an ``.npz``, the
rest as one JSON line on its stdin) and, as the worker answers, logs the PNGs into the run with ``attach``
(:meth:`fitters.registry.Registry.attach_figures`).

Failures are one :class:`PmdbError`, never a hang: a figure that fails to draw, a worker that dies, or one that
answers nothing for ``STALL_S`` seconds while figures are outstanding. The versions registered before stay registered
(with the figures attached so far). The worker ignores Ctrl-C (the fit decides) and ends when its stdin closes, so it
ends with the fit however the fit ends.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, TextIO

import numpy as np

from fitters.niceness import lower_priority
from fitters.plots import FigureJob
from pmdb.errors import PmdbError

STALL_S = 300.0        # no answer for this long while figures are outstanding: the worker is stuck
CLOSE_S = 10.0         # how long a closing worker may take to finish before it is killed
STDERR_TAIL = 400      # characters of the worker's stderr quoted in an error


@dataclass
class _Pending:
    run_id: str
    label: str
    paths: list[Path]


class FigureWorker:
    """One drawing process for one fit; figures go to MLflow runs through ``attach(run_id, paths)``.

    Use as a context manager: :meth:`submit` per version, :meth:`attach_ready` whenever convenient (``submit`` calls
    it), :meth:`finish` once every version is submitted (waits for the rest). Leaving the block without ``finish``
    (an error, Ctrl-C) attaches what is drawn already and stops the worker at once."""

    def __init__(self, directory: Path, attach: Callable[[str, list[Path]], None], stall_s: float = STALL_S):
        self.directory, self.attach, self.stall_s = Path(directory), attach, stall_s
        self.directory.mkdir(parents=True, exist_ok=True)
        self._pending: dict[int, _Pending] = {}
        self._next = 0
        self._answers: queue.Queue[str | None] = queue.Queue()
        self._requests: queue.Queue[str | None] = queue.Queue()
        self._stderr = open(self.directory / "worker.stderr", "w+")
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parent.parent)   # the checkout holding the fitters package
        env["PYTHONPATH"] = os.pathsep.join([root, env["PYTHONPATH"]]) if env.get("PYTHONPATH") else root
        self._proc = subprocess.Popen([sys.executable, "-m", "fitters.figure_worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env)
        # threads on both pipes: the fit never blocks on a busy (or stuck) worker
        self._threads = [threading.Thread(target=_write_lines, args=(self._requests, self._proc.stdin),
                                          name="figure-worker-requests", daemon=True),
                         threading.Thread(target=_read_lines, args=(self._proc.stdout, self._answers),
                                          name="figure-worker-answers", daemon=True)]
        for thread in self._threads:
            thread.start()

    def __enter__(self) -> "FigureWorker":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, run_id: str, label: str, jobs: list[FigureJob]) -> None:
        """Queue the figures of one version (``label`` names it in errors); they are attached to ``run_id``. Attaches
        what is drawn by now (:meth:`attach_ready`)."""
        number, self._next = self._next, self._next + 1
        message: dict[str, Any] = {"id": number, "jobs": []}
        for i, job in enumerate(jobs):
            arrays = self.directory / f"job{number}.{i}.npz"
            np.savez(arrays, **{k: np.asarray(v, dtype=float) for k, v in job.arrays.items()})
            message["jobs"].append({"kind": job.kind, "path": str(job.path), "arrays": str(arrays),
                                    "options": job.options})
        self._pending[number] = _Pending(run_id, label, [Path(job.path) for job in jobs])
        self._requests.put(json.dumps(message) + "\n")
        self.attach_ready()

    def attach_ready(self) -> None:
        """Attach every version whose figures are drawn; raise the first failure."""
        while True:
            try:
                line = self._answers.get_nowait()
            except queue.Empty:
                return
            self._handle(line)

    def finish(self) -> None:
        """Wait until every submitted version has its figures attached, then stop the worker."""
        last_answer = time.monotonic()
        while self._pending:
            try:
                line = self._answers.get(timeout=0.5)
            except queue.Empty:
                if time.monotonic() - last_answer > self.stall_s:
                    raise PmdbError(f"the figure worker drew nothing for {self.stall_s:.0f} s with the figures of "
                                    f"{len(self._pending)} version(s) outstanding (the versions registered so far "
                                    f"are kept)") from None
                continue
            last_answer = time.monotonic()
            self._handle(line)
        self.close()

    def close(self) -> None:
        """Stop the worker: when nothing is outstanding, let it end (killed after CLOSE_S); else (an error or an
        interruption ends the fit) attach the figures drawn already and kill it without waiting for the rest."""
        self._requests.put(None)   # the writer closes the worker's stdin: it ends after the figures it was given
        if self._proc.poll() is None:
            try:
                self._proc.wait(timeout=0 if self._pending else CLOSE_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for thread in self._threads:
            thread.join(timeout=CLOSE_S)
        while self._pending:   # best effort: the fit is ending with an error already
            try:
                line = self._answers.get_nowait()
                if line is None:
                    break
                answer = json.loads(line)
                done = self._pending.pop(answer["id"])
                if not answer.get("error"):
                    self.attach(done.run_id, done.paths)
            except Exception:  # noqa: BLE001 (queue.Empty, or a failed attach: the first error is the one to show)
                break
        self._stderr.close()

    def _handle(self, line: str | None) -> None:
        if line is None:   # the worker's stdout ended: it died
            self._raise_dead()
        answer = json.loads(line)
        pending = self._pending.pop(answer["id"])
        if answer.get("error"):
            raise PmdbError(f"drawing the figures of {pending.label} failed in the figure worker: {answer['error']} "
                            f"(the versions registered so far are kept)")
        self.attach(pending.run_id, pending.paths)

    def _raise_dead(self) -> None:
        code = self._proc.wait()
        self._stderr.flush()
        self._stderr.seek(0)
        tail = " ".join(self._stderr.read()[-STDERR_TAIL:].split())
        raise PmdbError(f"the figure worker ended (exit code {code}) before drawing the figures of "
                        f"{len(self._pending)} version(s)" + (f": {tail}" if tail else "")
                        + " (the versions registered so far are kept)")


def _write_lines(requests: "queue.Queue[str | None]", stream: TextIO) -> None:
    try:
        while (line := requests.get()) is not None:
            stream.write(line)
            stream.flush()
    except (OSError, ValueError):   # the worker died: its answers' end says so
        return
    finally:
        try:
            stream.close()
        except (OSError, ValueError):
            pass


def _read_lines(stream: TextIO, answers: "queue.Queue[str | None]") -> None:
    for line in stream:
        answers.put(line)
    answers.put(None)


def serve(requests: TextIO = sys.stdin, answers: TextIO = sys.stdout) -> None:
    """The worker's loop: one JSON line per version in, one out (``{"id": n}`` or ``{"id": n, "error": "..."}``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C goes to the fit, which stops this worker
    lower_priority()   # the fit waits on the registering process, not on figures
    for line in requests:
        message = json.loads(line)
        answer: dict[str, object] = {"id": message["id"]}
        try:
            for job in message["jobs"]:
                with np.load(job["arrays"], allow_pickle=False) as arrays:
                    FigureJob(job["kind"], Path(job["path"]), {k: arrays[k] for k in arrays.files},
                              job["options"]).draw()
                os.unlink(job["arrays"])
        except Exception as exc:  # reported to the fit, which stops with one error
            answer["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve()
