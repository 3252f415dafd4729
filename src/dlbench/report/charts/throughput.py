"""Throughput charts: per configuration, and against batch size (from throughput records)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench.report import tables
from dlbench.report.charts.base import (
    Chart,
    commands_of,
    finish,
    newest,
    per_s,
    pyplot,
    unit_label,
    yerr,
)
from dlbench.report.plots import plain_log_ticks


def _ok_throughput(records: Sequence[Any]) -> list:
    return [r for r in records if r.kind == "throughput" and r.summary() is not None]


def throughput_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Bar charts of throughput per result (one chart per unit), the 95% interval as error
    bars. Only ok throughput results are drawn; none gives no chart."""
    by_unit: dict[str, list] = {}
    for r in _ok_throughput(records):
        by_unit.setdefault(r.unit, []).append(r)
    out = []
    for unit, recs in by_unit.items():
        recs, left_out = newest(recs)
        plt = pyplot()
        label = unit_label(unit)
        vals = [per_s(r) for r in recs]
        fig, ax = plt.subplots(figsize=(max(6.0, 0.55 * len(recs) + 2), 4.8), dpi=100)
        xs = range(len(recs))
        ax.bar(xs, [v[0] for v in vals], color="tab:blue", yerr=yerr(vals), capsize=3,
               ecolor="black")
        ax.set_xticks(list(xs), [r.config.label for r in recs], rotation=35, ha="right",
                      fontsize=7)
        ax.set_ylabel(f"throughput ({label})")
        ax.set_xlabel("configuration (model, batch, precision, mode)")
        title = f"Throughput per configuration, {label} (error bars: 95% interval){left_out}"
        ax.set_title(title, fontsize=10)
        ax.grid(True, axis="y", lw=0.3, alpha=0.6)
        out.append(finish(plt, fig, title, commands_of(recs, commands)))
    return out


def batch_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Throughput against batch size, one line per setup that has two or more batch sizes."""
    groups: dict[tuple, list] = {}
    for r in _ok_throughput(records):
        groups.setdefault(tables.setup_of(r), []).append(r)
    sweeps = {k: v for k, v in groups.items() if len({r.config.batch_size for r in v}) > 1}
    by_unit: dict[str, dict[tuple, list]] = {}
    for k, v in sweeps.items():
        by_unit.setdefault(v[0].unit, {})[k] = v
    out = []
    for unit, lines in by_unit.items():
        plt = pyplot()
        label = unit_label(unit)
        fig, ax = plt.subplots(figsize=(7, 4.8), dpi=100)
        used = []
        for k, recs in lines.items():
            latest = {r.config.batch_size: r for r in recs}  # a rerun of a batch wins
            bs = sorted(latest)
            vals = [per_s(latest[b]) for b in bs]
            ax.errorbar(bs, [v[0] for v in vals], yerr=yerr(vals), marker="o", capsize=3,
                        label=" ".join(str(x) for x in k[:4] if x))
            used += recs
        ax.set_xscale("log", base=2)
        plain_log_ticks(ax)
        ax.set_xlabel("batch size (samples per step, per device)")
        ax.set_ylabel(f"throughput ({label})")
        title = f"Throughput against batch size, {label}"
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.6)
        ax.legend(fontsize=7)
        out.append(finish(plt, fig, title, commands_of(used, commands)))
    return out
