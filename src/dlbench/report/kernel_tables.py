"""``--profile``'s tables: a step's time by kernel category, and its top kernels."""

from __future__ import annotations

from typing import Sequence

from dlbench.records.throughput import ThroughputRecord
from dlbench.report.table import Table, fmt_pct

KERNEL_COLUMN = 72  # a kernel's name is cut here in the table; the record keeps more


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def kernel_tables(records: Sequence[ThroughputRecord], top: int = 8) -> list[Table]:
    """Two tables per profiled record: the categories, then the ``top`` kernels."""
    from dlbench.measure.kernels import summarise  # measure.kernels imports torch (--help)
    out = []
    for r in records:
        if not r.ok or not r.profile:
            continue
        summary = r.summary()
        s = summarise(r.profile, summary.median_s if summary else None, top=top)
        notes = [f"{s['steps']} steps under torch.profiler after the measured window "
                 f"({s['activity']}): {_ms(s['per_step_s'])} ms per step"]
        if s["busy"] is not None and summary:
            notes.append(f"the window's median step is {_ms(summary.median_s)} ms: the GPU "
                         f"ran kernels {fmt_pct(s['busy'])} of it (under 100%: gaps between "
                         "kernels, or host-bound; over 100%: kernels overlapped on streams, or "
                         "the profiled steps ran slower than the window's)")
        elif summary:
            notes.append(f"the window's median step is {_ms(summary.median_s)} ms; operators' "
                         "self times include the profiler's cost per operator")
        out.append(Table(
            f"Where the time went: {r.config.label}",
            ("category", "ms per step", "share", "distinct kernels"),
            tuple((c["category"], _ms(c["per_step_s"]), fmt_pct(c["share"]), str(c["distinct"]))
                  for c in s["categories"]),
            tuple(notes)))
        out.append(Table(
            f"Top kernels: {r.config.label}",
            ("kernel", "category", "calls per step", "ms per step", "share"),
            tuple((_cut(k["name"]), k["category"], f"{k['calls_per_step']:g}",
                   _ms(k["per_step_s"]), fmt_pct(k["share"])) for k in s["top"])))
    return out


def _cut(name: str) -> str:
    name = name.replace("|", "/")  # a pipe would split a markdown cell
    return name if len(name) <= KERNEL_COLUMN else name[:KERNEL_COLUMN - 1] + "…"
