"""The lever search behind ``dlbench tune``: greedy, one lever at a time.

Start from the plain config; pull each lever in turn on the best config so far, measure, and
keep it only if it raises throughput by more than ``MARGIN`` (a gain inside run-to-run noise is
not a gain). The same rule replays stored records into the lever table, so the table a report
shows is the decision the search took.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

from dlbench.models.base import ModelSpec
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.tuning.levers import LEVERS, Lever, describe_change

# Keep a lever only if it wins by more than 1%: dlbench's windows stop at a 1% interval.
MARGIN = 0.01

# Which lever changed a config field (to name the lever of a stored record); the first field
# that changed names it. optimizer_impl comes last: on fp16 training the cuda-graph and
# other-16-bit levers set fused kernels along with their own field.
FIELD_LEVER = {"pad_vocab": "pad-vocab", "channels_last": "channels_last",
               "attention": "flash-attention", "compile": "compile",
               "compile_loss": "compile-loss", "cuda_graph": "cuda-graph",
               "precision": "other-16-bit", "batch_size": "batch-x2",
               "optimizer_impl": "fused-optimizer"}
# The compile lever by the mode it set.
COMPILE_LEVER = {"max-autotune-no-cudagraphs": "max-autotune"}


@dataclass(frozen=True)
class Trial:
    """One row of the lever table."""
    lever: str                          # "baseline" for the plain config
    change: str                         # what the lever changed, in words
    record: ThroughputRecord | None     # None: the lever did not apply
    kept: bool
    why: str
    over_previous: float | None = None  # throughput over the best config before this trial
    over_baseline: float | None = None


def throughput_of(record: ThroughputRecord | None) -> float | None:
    s = record.summary() if record is not None and record.ok else None
    return s.throughput if s else None


def decide(candidate: ThroughputRecord, best: ThroughputRecord, baseline: ThroughputRecord,
           lever: str, margin: float = MARGIN) -> Trial:
    """Whether ``candidate`` (the best config with one lever pulled) replaces ``best``."""
    change = describe_change(best.config, candidate.config)
    new, old, base = throughput_of(candidate), throughput_of(best), throughput_of(baseline)
    if new is None:
        return Trial(lever, change, candidate, False,
                     f"failed: {candidate.error_type or 'no figure'}")
    over = new / old if old else None
    over_base = new / base if base else None
    if over is not None and over > 1 + margin:
        return Trial(lever, change, candidate, True, f"+{over - 1:.1%}", over, over_base)
    why = (f"{over - 1:+.1%}, within {margin:.0%}" if over is not None and over > 1 - margin
           else f"{over - 1:+.1%}" if over is not None else "no baseline figure")
    return Trial(lever, change, candidate, False, why, over, over_base)


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


def replay(records: Sequence[ThroughputRecord], margin: float = MARGIN) -> list[Trial]:
    """The lever table of one model's stored search (records in the order measured)."""
    if not records:
        return []
    baseline = records[0]
    trials = [Trial("baseline", "plain eager", baseline, baseline.ok, "", 1.0, 1.0)]
    best = baseline
    for rec in records[1:]:
        a, b = best.config.to_dict(), rec.config.to_dict()
        changed = [f for f in FIELD_LEVER if a[f] != b[f]]
        lever = FIELD_LEVER[changed[0]] if changed else "repeat"
        if lever == "compile":
            lever = COMPILE_LEVER.get(b["compile"], lever)
        trial = decide(rec, best, baseline, lever, margin)
        trials.append(trial)
        if trial.kept:
            best = rec
    return trials


def winner(trials: Sequence[Trial]) -> ThroughputRecord | None:
    """The record of the last kept trial: the fastest config the search found."""
    kept = [t.record for t in trials if t.kept and t.record is not None]
    return kept[-1] if kept else None
