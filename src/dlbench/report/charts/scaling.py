"""Scaling charts (from scaling records): img/s per GPU count with the factor over 1 GPU (the
2020 tf_cnn_benchmarks study's multi-GPU table as bars), and the interconnect A/B (its NVLink
table: each profile's throughput as a factor over the default profile)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dlbench.records.scaling import scaling_factor
from dlbench.report.charts.base import (
    Chart,
    commands_of,
    finish,
    per_s,
    pyplot,
    unit_label,
    wrap,
    yerr,
)
from dlbench.report.compare import ratio_interval

BASELINE = "default"


def _row(r: Any) -> tuple[str, str, str, int]:
    """One row of the tf_cnn_benchmarks study's tables: model, precision, strategy, batch per
    GPU."""
    c = r.config
    return (c.model, c.base.precision, c.strategy, c.base.batch_size)


def _row_label(row: tuple) -> str:
    return f"{row[0]} {row[1]} {row[2]} b{row[3]}/GPU"


def _cells(recs: Sequence[Any]) -> dict[tuple, Any]:
    """(row, profile, GPUs) -> record; a later record of the same cell wins (a rerun)."""
    return {(_row(r), r.config.interconnect, r.config.gpus): r for r in recs}


def _bars(n_series: int) -> tuple[float, list[float]]:
    """Bar width and each series' offset for ``n_series`` bars side by side per group."""
    width = 0.8 / max(1, n_series)
    return width, [(i - (n_series - 1) / 2) * width for i in range(n_series)]


@dataclass(frozen=True)
class Bar:
    """One bar of the scaling chart: a row of the scaling table at one GPU count."""

    row: tuple
    gpus: int
    unit: str
    value: tuple[float, float, float] | None   # units/s and its interval; None for a failure
    factor: float | None                      # over 1 GPU of the same row, where it ran
    error: str | None = None


def scaling_bars(records: Sequence[Any]) -> list[Bar]:
    """The bars of :func:`scaling_charts`, from the default profile's scaling records; none when
    nothing ran. A failed count is a bar with its error (failures are data)."""
    recs = [r for r in records if r.kind == "scaling" and r.config.interconnect == BASELINE]
    cells = _cells(recs)
    # A failed record keeps the default unit ("samples"): it takes its row's unit, and a row
    # where nothing ran has no scale to draw it on.
    row_unit = {_row(r): r.unit for r in recs if r.summary() is not None}
    out = []
    for (row, _, n), rec in sorted(cells.items(), key=lambda kv: kv[0][2]):
        if row not in row_unit:
            continue
        s = rec.summary()
        if s is None:
            out.append(Bar(row, n, row_unit[row], None, None, rec.error_type or "failed"))
            continue
        base = cells.get((row, BASELINE, 1))
        base_s = base.summary() if base is not None else None
        factor = scaling_factor(s.throughput, base_s.throughput) if base_s else None
        out.append(Bar(row, n, row_unit[row], per_s(rec), factor))
    return out


def scaling_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Per unit: grouped bars of throughput (all GPUs) per model and GPU count, for the default
    interconnect profile; each bar labelled with its factor over 1 GPU of the same row where that
    row has a 1-GPU result, and a failed count labelled with its error instead of a bar."""
    bars = scaling_bars(records)
    out = []
    for unit in dict.fromkeys(b.unit for b in bars):
        ubars = [b for b in bars if b.unit == unit]
        rows = list(dict.fromkeys(b.row for b in ubars))
        counts = sorted({b.gpus for b in ubars})
        plt = pyplot()
        label = unit_label(unit)
        fig, ax = plt.subplots(figsize=(max(6.5, 1.0 + 0.45 * len(rows) * len(counts)), 4.8),
                               dpi=100)
        width, offsets = _bars(len(counts))
        colors = plt.get_cmap("viridis")
        top = max(b.value[2] for b in ubars if b.value is not None)
        for j, n in enumerate(counts):
            drawn = [(rows.index(b.row) + offsets[j], b) for b in ubars if b.gpus == n]
            for x, b in drawn:
                if b.value is None:  # a failure is data: said where its bar would be
                    ax.text(x, 0, f" {n} GPUs: {b.error}", rotation=90, ha="center",
                            va="bottom", fontsize=7, color="tab:red")
            ok = [(x, b) for x, b in drawn if b.value is not None]
            if not ok:
                continue
            ax.bar([x for x, _ in ok], [b.value[0] for _, b in ok], width=width * 0.95,
                   color=colors(j / max(1, len(counts) - 1) * 0.85),
                   yerr=yerr([b.value for _, b in ok]), capsize=2, ecolor="black",
                   label=f"{n} GPU" if n == 1 else f"{n} GPUs")
            for x, b in ok:
                if b.factor is not None:
                    ax.text(x, b.value[2] + 0.01 * top, f"{b.factor:.2f}x", ha="center",
                            va="bottom", fontsize=7)
        ax.set_xticks(range(len(rows)), [_row_label(r) for r in rows], rotation=20, ha="right",
                      fontsize=7)
        ax.set_xlim(-0.5, len(rows) - 0.5)  # room for every count, a failed one included
        ax.set_ylim(0, top * 1.12)
        ax.set_xlabel("model, precision, strategy, batch per GPU (weak scaling)")
        ax.set_ylabel(f"throughput, all GPUs ({label})")
        title = (f"Scaling: throughput by GPU count, {label} (label: factor over 1 GPU; "
                 "error bars: 95% interval)")
        ax.set_title(wrap(title, fig), fontsize=9)
        ax.grid(True, axis="y", lw=0.3, alpha=0.6)
        ax.legend(fontsize=7, title="GPUs", title_fontsize=7)
        used = [r for r in records if r.kind == "scaling" and r.config.interconnect == BASELINE
                and _row(r) in rows]
        out.append(finish(plt, fig, title, commands_of(used, commands)))
    return out


def interconnect_factors(records: Sequence[Any]) -> dict[tuple[tuple, int, str],
                                                         tuple[float, float, float]]:
    """(row, GPUs, profile) -> (factor over the default profile, its 95% interval's ends), for
    every ok result of a non-default profile whose row and GPU count ran on the default one."""
    cells = _cells([r for r in records if r.kind == "scaling" and r.summary() is not None])
    out = {}
    for (row, prof, n), rec in cells.items():
        base = cells.get((row, BASELINE, n))
        if prof == BASELINE or base is None:
            continue
        s, bs = rec.summary(), base.summary()
        f = s.throughput / bs.throughput
        lo, hi = ratio_interval(f, s.rel_halfwidth, bs.rel_halfwidth)
        out[(row, n, prof)] = (f, lo, hi if hi != float("inf") else f)
    return out


def interconnect_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Each interconnect profile's throughput over the default profile's, for the same row and
    GPU count, as grouped bars around 1.0 (error bars: the ratio's 95% interval). Drawn where at
    least one other profile has a result beside a default one."""
    pairs = interconnect_factors(records)
    if not pairs:
        return []
    groups = list(dict.fromkeys((row, n) for row, n, _ in pairs))
    profiles = list(dict.fromkeys(p for _, _, p in pairs))
    used = [r for r in records if r.kind == "scaling"
            and (_row(r), r.config.gpus) in groups]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.5, 1.0 + 0.5 * len(groups) * len(profiles)), 4.8),
                           dpi=100)
    width, offsets = _bars(len(profiles))
    for j, prof in enumerate(profiles):
        xs, vals = [], []
        for i, (row, n) in enumerate(groups):
            if (row, n, prof) in pairs:
                xs.append(i + offsets[j])
                vals.append(pairs[(row, n, prof)])
        ax.bar(xs, [v[0] - 1.0 for v in vals], bottom=1.0, width=width * 0.95,
               yerr=yerr(vals), capsize=2, ecolor="black", label=prof)
        for x, v in zip(xs, vals):
            ax.text(x, v[2] if v[0] >= 1 else v[1], f"{v[0]:.3f}", ha="center",
                    va="bottom" if v[0] >= 1 else "top", fontsize=7)
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(range(len(groups)), [f"{_row_label(row)} x{n}" for row, n in groups],
                  rotation=20, ha="right", fontsize=7)
    lows = [v[1] for v in pairs.values()]
    highs = [v[2] for v in pairs.values()]
    span = max(1.0 - min(lows), max(highs) - 1.0, 0.02)
    ax.set_ylim(1.0 - span * 1.3, 1.0 + span * 1.3)
    ax.set_xlabel("model, precision, strategy, batch per GPU, GPU count")
    ax.set_ylabel(f"throughput over the {BASELINE} profile (x)")
    title = (f"Interconnect A/B: each profile's throughput as a factor over {BASELINE} "
             "(1.0 = no effect; error bars: 95% interval of the ratio)")
    ax.set_title(wrap(title, fig), fontsize=9)
    ax.grid(True, axis="y", lw=0.3, alpha=0.6)
    ax.legend(fontsize=7, title="profile", title_fontsize=7)
    return [finish(plt, fig, title, commands_of(used, commands))]
