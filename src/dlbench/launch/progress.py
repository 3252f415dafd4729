"""What a running job's first rank is doing, for the parent to show while it waits.

A torchrun job is a set of processes the parent only waits on: without word from them, a job
that compiles for a minute and then steps every 13 s (an 8B model whose optimizer runs on the
CPU) shows a clock and nothing else for minutes. Rank 0 therefore keeps a small JSON file in the
job's folder (:class:`RankProgress`): the phase it is in (building the model, the first step,
warm-up, the measured window, the communication profile) and the steps of that phase. A step
pays one counter increment; a daemon thread rewrites the file, atomically, about once a second.
The parent reads it (:func:`read_progress`) and renders one line (:func:`describe`).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

from dlbench.launch.rank_entry import write_json

PROGRESS_FILE = "progress.json"
#: How often rank 0's thread rewrites its file.
WRITE_EVERY_S = 1.0

T = TypeVar("T")


class RankProgress:
    """Rank 0's phase and step count, written to ``folder/progress.json``.

    A phase change is written at once (between phases, outside any window); the steps are
    counted by the wrapper :meth:`counting` (one increment a step) and written by a daemon
    thread about once a second, so no step waits on the file system. ``thread=False`` leaves
    the writing to :meth:`flush` (tests, with a fake clock)."""

    def __init__(self, folder: str | Path, clock: Callable[[], float] = time.monotonic,
                 every_s: float = WRITE_EVERY_S, thread: bool = True) -> None:
        self.path = Path(folder) / PROGRESS_FILE
        self._clock = clock
        self._phase = ""
        self._steps = 0
        self._phase_t0 = clock()
        self._written: tuple[str, int] | None = None
        if thread:
            threading.Thread(target=self._keep_writing, args=(every_s,), daemon=True,
                             name="dlbench-progress").start()

    def phase(self, name: str) -> None:
        """A new phase begins: its step count starts at 0, and the file says so at once."""
        self._phase, self._steps, self._phase_t0 = name, 0, self._clock()
        self.flush()

    def counting(self, step: Callable[[], T]) -> Callable[[], T]:
        """``step``, counted in the current phase."""
        def counted() -> T:
            out = step()
            self._steps += 1
            return out
        return counted

    def flush(self) -> None:
        """Write the phase and its steps now, if they changed since the last write."""
        phase, steps = self._phase, self._steps
        if (phase, steps) == self._written:
            return
        self._written = (phase, steps)
        doc = {"phase": phase, "steps": steps, "phase_s": round(self._clock() - self._phase_t0, 3),
               "time": time.time()}
        try:
            write_json(self.path, doc)  # a reader never sees half a file
        except OSError:
            pass  # progress is a courtesy: a full disk must not fail the measurement

    def _keep_writing(self, every_s: float) -> None:
        while True:
            time.sleep(every_s)
            self.flush()


class NoProgress:
    """What the ranks other than rank 0 (and a job without a folder) report: nothing."""

    def phase(self, name: str) -> None:
        pass

    def counting(self, step: Callable[[], T]) -> Callable[[], T]:
        return step


def for_rank(job: dict[str, Any], rank: int) -> RankProgress | NoProgress:
    """Rank 0 of a job with a folder reports; every other rank does not."""
    folder = job.get("out_dir")
    return RankProgress(folder) if rank == 0 and folder else NoProgress()


def read_progress(folder: str | Path) -> dict[str, Any] | None:
    """Rank 0's last report in ``folder``; None before its first or if it cannot be read."""
    try:
        doc = json.loads((Path(folder) / PROGRESS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def describe(doc: dict[str, Any] | None, now: float | None = None) -> str:
    """One line for a progress display: ``"rank 0: window, step 12 (2.01 s a step)"``.

    Seconds a step are the phase's time over its steps; the phase's age is counted up to
    ``now`` (wall clock) from the report's time, so a step that takes long still shows time
    passing."""
    if not doc or not doc.get("phase"):
        return "starting the ranks"
    try:
        phase, steps = str(doc["phase"]), int(doc.get("steps") or 0)
        phase_s = float(doc.get("phase_s") or 0.0)
        since = phase_s + (max(0.0, now - float(doc["time"]))
                           if now is not None and doc.get("time") else 0.0)
    except (TypeError, ValueError):  # a file that is not rank 0's: say nothing of it
        return "running"
    text = f"rank 0: {phase}"
    if steps:
        text += f", step {steps} ({phase_s / steps:.2f} s a step)"
    return text + f", {_clock(since)} in it"


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 60}:{s % 60:02d}"
