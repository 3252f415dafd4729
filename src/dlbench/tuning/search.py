"""The lever search behind ``dlbench tune``: greedy, one lever at a time.

Start from the plain config; pull each lever in turn on the best config so far, measure, and
keep it only if it raises throughput by more than ``MARGIN`` (a gain inside run-to-run noise is
not a gain). The keep rule and its replay over stored records are a reading of records, so they
live in :mod:`dlbench.records.lever_trials`, where the report reads them too: the table a report
shows is the decision the search took.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from dlbench.models.base import ModelSpec
from dlbench.records.lever_trials import MARGIN, Trial, decide
from dlbench.records.lever_trials import replay, winner  # noqa: F401 (re-exported)
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.tuning.levers import LEVERS, Lever


class LeverSearch:
    """Iterate over it for the configs to measure; hand each record to :meth:`observe` before
    asking for the next. :attr:`trials` is the lever table, :attr:`best` the winner."""

    def __init__(self, base: ThroughputConfig, spec: ModelSpec, device: str,
                 levers: Sequence[Lever] = LEVERS, margin: float = MARGIN) -> None:
        self.base, self.spec, self.device = base, spec, device
        self.levers, self.margin = tuple(levers), margin
        self.trials: list[Trial] = []
        self.best: ThroughputRecord | None = None
        self._last: ThroughputRecord | None = None

    def __len__(self) -> int:  # an upper bound, for progress
        return 1 + len(self.levers)

    def observe(self, record: ThroughputRecord) -> None:
        self._last = record

    def __iter__(self) -> Iterator[ThroughputConfig]:
        yield self.base
        baseline = self._take()
        self.trials.append(Trial("baseline", "plain eager", baseline, baseline.ok,
                                 "" if baseline.ok else f"failed: {baseline.error_type}", 1.0, 1.0))
        if not baseline.ok:
            return
        self.best = baseline
        for lever in self.levers:
            candidate, why_not = lever.apply(self.best.config, self.spec, self.device)
            if candidate is None:
                self.trials.append(Trial(lever.name, "-", None, False, f"n/a: {why_not}"))
                continue
            yield candidate
            trial = decide(self._take(), self.best, baseline, lever.name, self.margin)
            self.trials.append(trial)
            if trial.kept:
                self.best = trial.record

    def _take(self) -> ThroughputRecord:
        if self._last is None:
            raise RuntimeError("LeverSearch: observe() the record of each config it yields")
        record, self._last = self._last, None
        return record
