"""PyTorch vs JAX as a chart: JAX's throughput relative to PyTorch's, per config (the table:
:mod:`dlbench.report.frameworks`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench.report.charts.base import Chart, commands_of, finish, pyplot
from dlbench.report.frameworks import cfg_of, pairs, rate, torch_setting


def framework_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """One chart: JAX's throughput relative to PyTorch's (= 1) per config and PyTorch setting,
    intervals as error bars (each side's relative half-width, combined), so models of any unit
    share an axis."""
    found = pairs(records)
    if not found:
        return []
    plt = pyplot()
    labels, vals, errs = [], [], []
    for rep, by in found:
        t, j = rate(by["torch"]), rate(by["jax"])
        ratio = j[0] / t[0]
        rel = ((((j[2] - j[1]) / 2 / j[0]) ** 2 + ((t[2] - t[1]) / 2 / t[0]) ** 2) ** 0.5)
        c = cfg_of(rep)
        gpus = getattr(rep.config, "gpus", 1)
        labels.append(f"{c.model} {c.precision} b{c.batch_size}" + (f" x{gpus}" if gpus > 1
                                                                     else "")
                      + f" (PT {torch_setting(by['torch'][0])})")
        vals.append(ratio)
        errs.append(ratio * rel)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.6 * len(vals) + 2), 4.6), dpi=100)
    xs = list(range(len(vals)))
    ax.bar(xs, vals, color=["tab:green" if v >= 1 else "tab:orange" for v in vals],
           yerr=errs, capsize=3, ecolor="black")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(xs, labels, rotation=35, ha="right", fontsize=7)
    ax.set_ylabel("JAX throughput / PyTorch throughput")
    title = "PyTorch vs JAX: JAX's throughput relative to PyTorch's (1 = equal; 95% intervals)"
    ax.set_title(title, fontsize=10)
    ax.grid(True, axis="y", lw=0.3, alpha=0.6)
    recs = [r for _, by in found for side in by.values() for r in side]
    return [finish(plt, fig, title, commands_of(recs, commands))]
