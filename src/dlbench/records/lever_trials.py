"""A lever search's trials, read from throughput records: what changed, and whether it was kept.

``dlbench tune`` (:class:`dlbench.tuning.search.LeverSearch`) pulls one lever at a time on the
best config so far and keeps it only if it raises throughput by more than ``MARGIN`` (a gain
inside run-to-run noise is not a gain). That rule is :func:`decide`, a comparison of two stored
records; :func:`replay` applies it to a search's stored records in the order they were measured,
so the lever table a report shows is the decision the search took. Nothing here runs anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from dlbench.records.throughput import ThroughputConfig, ThroughputRecord

# Keep a lever only if it wins by more than 1%: dlbench's windows stop at a 1% interval.
MARGIN = 0.01

# Which lever changed a config field (to name the lever of a stored record); the first field
# that changed names it. optimizer_impl comes last: on fp16 training the cuda-graph and
# other-16-bit levers set fused kernels along with their own field. The names are those of
# dlbench.tuning.levers.
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


def describe_change(before: ThroughputConfig, after: ThroughputConfig) -> str:
    """What differs between two configs, as a reader would say it (``compile default``)."""
    a, b = before.to_dict(), after.to_dict()
    parts = []
    for name in ("pad_vocab", "channels_last", "optimizer_impl", "attention", "compile",
                 "compile_loss", "cuda_graph", "precision", "batch_size"):
        if a[name] != b[name]:
            value = b[name]
            parts.append({
                "pad_vocab": "vocabulary padded" if value else "vocabulary unpadded",
                "channels_last": "channels_last" if value else "NCHW",
                "optimizer_impl": f"{value} optimizer",
                "attention": f"attention {value}",
                "compile": f"compile {value}" if value else "eager",
                "compile_loss": "loss compiled with the model" if value else "model compiled alone",
                "cuda_graph": "CUDA graph" if value else "no CUDA graph",
                "precision": value,
                "batch_size": f"batch {value}",
            }[name])
    return ", ".join(parts) or "no change"


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
