"""The MFU chart (from throughput records, and peak records where ``dlbench peak`` ran): each
result's model FLOPs utilisation against the datasheet peak and against the measured one."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench.measure.mfu import device_key, mfu
from dlbench.report.charts.base import Chart, commands_of, finish, newest, pyplot, wrap


def mfu_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """One chart per device: a pair of horizontal bars per result (datasheet MFU, measured MFU),
    drawn for results that have at least one of them (:mod:`dlbench.measure.mfu` leaves an MFU
    out, with its reason, where it would mislead; the MFU table gives the reasons)."""
    peak_recs = [r for r in records if r.kind == "peak"]
    by_dev: dict[str, list] = {}
    for r in records:
        if r.kind != "throughput" or not r.ok:
            continue
        m = mfu(r, peak_records=peak_recs)  # its own card's ceiling, sustained first
        if m.datasheet is not None or m.measured is not None:
            by_dev.setdefault(device_key(r.env), []).append((r, m))
    out = []
    for dev, pairs in by_dev.items():
        pairs, left_out = newest(pairs)
        plt = pyplot()
        n = len(pairs)
        fig, ax = plt.subplots(figsize=(8, max(3.5, 1.6 + 0.32 * n)), dpi=100)
        ys = range(n)
        series = [s for s in (
            ("tab:blue", "datasheet dense peak of the result's precision", lambda m: m.datasheet),
            ("tab:orange", "measured matmul ceiling ('dlbench peak')" + _whose(pairs),
             lambda m: m.measured))
            if any(s[2](m) is not None for _, m in pairs)]
        h = 0.8 / len(series)
        top = 0.0
        for k, (color, label, get) in enumerate(series):
            vals = [(y, get(m)) for y, (_, m) in zip(ys, pairs) if get(m) is not None]
            yk = [y + (k - (len(series) - 1) / 2) * h for y, _ in vals]
            xk = [100 * v for _, v in vals]
            ax.barh(yk, xk, height=h * 0.95, color=color, label=label)
            for y, x in zip(yk, xk):
                ax.text(x, y, f" {x:.1f}%", va="center", fontsize=6)
            top = max(top, max(xk))
        ax.set_yticks(list(ys), [r.config.label for r, _ in pairs], fontsize=7)
        ax.invert_yaxis()  # the first result on top, as in the tables
        ax.set_xlim(0, max(10.0, top * 1.15))
        ax.set_xlabel("MFU (% of peak TFLOP/s; model FLOPs, optimizer excluded)")
        ax.set_ylabel("result (model, batch, precision, mode)")
        title = (f"MFU on {dev}: achieved model TFLOP/s over the datasheet and the measured "
                 f"peak{left_out}")
        fig.suptitle(wrap(title, fig), fontsize=9)  # centred on the figure: the labels take room
        ax.grid(True, axis="x", lw=0.3, alpha=0.6)
        ax.legend(fontsize=7, loc="best")
        used = [r for r, _ in pairs]
        ceiling_runs = {m.ceiling.run_id for _, m in pairs if m.ceiling is not None}
        used += [p for p in peak_recs if p.run_id in ceiling_runs]  # the runs of its roofs
        out.append(finish(plt, fig, title, commands_of(used, commands)))
    return out


def _whose(pairs: Sequence[tuple[Any, Any]]) -> str:
    """What the legend must say of the measured ceilings the bars use: burst ones, or another
    card's (:attr:`dlbench.measure.mfu.Ceiling.note` has each result's; the MFU table shows it);
    nothing where every one is the result's own card's sustained ceiling."""
    used = [m.ceiling for _, m in pairs if m.measured is not None and m.ceiling is not None]
    what = []
    for text, hit in (("burst", lambda c: c.method == "burst"),
                      ("another card's", lambda c: c.same_card is False),
                      ("card unrecorded", lambda c: c.same_card is None)):
        n = sum(map(hit, used))
        if n:
            what.append(text if n == len(used) else f"{text} for {n} of {len(used)}")
    return f": {', '.join(what)}" if what else ""
