"""Telemetry timelines (from throughput records that carry GPU telemetry): power, SM clock and
utilisation against time, one line per GPU, with the measured window shaded, so a reader sees
whether the figure came from a GPU at full clocks or one that was warming up or throttling."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench import env as envmod
from dlbench.report.charts.base import Chart, commands_of, finish, pyplot, wrap

#: Timelines drawn at most; each is a chart of its own and a suite of a hundred results would
#: make the page heavy to open. The rest are named in the last one's title, with the command
#: that exports their series.
MAX_TIMELINES = 24

PANELS = (("power_w", "power (W)"), ("sm_clock_mhz", "SM clock (MHz)"),
          ("util_gpu_pct", "GPU utilisation (%)"))


def _has_gpu_series(r: Any) -> bool:
    tele = getattr(r, "telemetry", None) or {}
    return any((g.get("series") or {}).get("t_s") for g in tele.get("gpus") or [])


def telemetry_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """One timeline per result with GPU telemetry (a host-only series, as on a CPU, has no power
    or clocks to draw; ``dlbench telemetry ID --csv -`` exports it)."""
    recs = [r for r in records if _has_gpu_series(r)]
    out = []
    for i, r in enumerate(recs[:MAX_TIMELINES]):
        tele = r.telemetry
        marks = tele.get("marks") or {}
        plt = pyplot()
        fig, axes = plt.subplots(len(PANELS), 1, figsize=(7.5, 5.6), dpi=100, sharex=True)
        for ax, (key, ylabel) in zip(axes, PANELS):
            for g in tele["gpus"]:
                s = g["series"]
                pts = [(t, v) for t, v in zip(s["t_s"], s.get(key) or []) if v is not None]
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1,
                            label=f"GPU {g.get('index', '?')}")
            if "window_start" in marks and "window_end" in marks:
                ax.axvspan(marks["window_start"], marks["window_end"], color="tab:green",
                           alpha=0.12, label="measured window")
            if "idle_start" in marks and "idle_end" in marks:
                ax.axvspan(marks["idle_start"], marks["idle_end"], color="gray", alpha=0.12,
                           label="idle baseline")
            if "warmup_start" in marks:
                ax.axvline(marks["warmup_start"], color="gray", ls=":", lw=1, label="warm-up")
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(True, lw=0.3, alpha=0.6)
        axes[-1].set_xlabel("time since sampling began (s)")
        if axes[0].get_legend_handles_labels()[0]:
            axes[0].legend(fontsize=6, loc="lower right", ncol=4)
        axes[0].set_ylim(bottom=0)
        axes[2].set_ylim(0, 105)
        title = (f"Telemetry of {r.config.label} on {envmod.device_label(r.env)} (result {r.id}; "
                 "shaded green: the measured window)")
        axes[0].set_title(wrap(title, fig, 8), fontsize=8)
        left = recs[MAX_TIMELINES:]
        if left and i == MAX_TIMELINES - 1:  # said in the caption: the list can be long
            title += (f"; {len(left)} more result(s) with telemetry not drawn: "
                      + ", ".join(x.id for x in left) + " ('dlbench telemetry ID --csv -')")
        out.append(finish(plt, fig, title, commands_of([r], commands)))
    return out
