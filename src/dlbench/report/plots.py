"""Plots written to files: the roofline (PNG and SVG; the HTML report embeds the same figure).
matplotlib is imported lazily, with the Agg backend, so a machine without a display (or without
matplotlib) can run everything else."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from dlbench.measure.roofline import RooflinePoint, Roofs, ridge


def load_pyplot():
    """matplotlib's pyplot on the Agg backend, or an ImportError that says what to install."""
    try:
        import matplotlib  # optional (the report extra): a base install runs without it
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'dlbench[report]' "
                          "(or pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # after use("Agg"): pyplot picks its backend on import
    return plt


def plain_log_ticks(ax, axis: str = "x") -> None:
    """Plain numbers ("16", "0.1") as the major labels of a log axis, none on the minor ticks.

    matplotlib labels log axes in mathtext ("10^{2}"); the report turns math parsing off (a "$"
    in a command line is text), which would print those labels as their source. Call it after
    ``set_xscale`` / ``set_yscale``, which reset the formatters.
    """
    from matplotlib.ticker import FuncFormatter, NullFormatter  # optional, as in load_pyplot
    scale = ax.xaxis if axis == "x" else ax.yaxis
    scale.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    scale.set_minor_formatter(NullFormatter())


def roofline_figure(points: Sequence[RooflinePoint], roofs: Roofs, title: str | None = None):
    """Log-log roofline with one marker per point, as a matplotlib figure: ``dlbench roofline``
    saves it to files, the HTML report embeds it. The caller closes it."""
    plt = load_pyplot()
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    ais = [p.intensity for p in points] or [1.0]
    peaks = list(roofs.compute_tflops.values()) or [1.0]
    bw = roofs.bandwidth_gbs
    lo = min(min(ais) / 4, 0.5)
    hi = max(max(ais) * 4, (ridge(max(peaks), bw) * 4) if bw else 1e3)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    colors = {"fp32": "tab:blue", "tf32": "tab:cyan", "fp16": "tab:orange", "bf16": "tab:red",
              "fp8": "tab:purple"}
    for prec, peak in sorted(roofs.compute_tflops.items(), key=lambda kv: kv[1]):
        ys = [min(peak, x * bw / 1e3) if bw else peak for x in xs]
        ax.plot(xs, ys, color=colors.get(prec, "gray"), lw=1.5,
                label=f"{prec} roof {peak:.4g} TFLOP/s")
    if bw:
        ax.plot([], [], color="black", lw=0, label=f"memory roof {bw:.4g} GB/s (slope)")
    markers = "osD^v<>ph*"
    for i, p in enumerate(points):
        ax.scatter([p.intensity], [p.achieved_tflops], marker=markers[i % len(markers)], s=45,
                   color=colors.get(p.precision, "gray"), edgecolor="black", zorder=3)
        ax.annotate(f"{p.label} {p.precision}", (p.intensity, p.achieved_tflops), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_ticks(ax, "x")
    plain_log_ticks(ax, "y")
    ax.set_xlabel("arithmetic intensity (FLOP / byte, stated byte model)")
    ax.set_ylabel("TFLOP/s (model FLOPs)")
    ax.set_title(title or f"Roofline: {roofs.device} (roofs: {roofs.source})", fontsize=9)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig


def roofline_plot(points: Sequence[RooflinePoint], roofs: Roofs, stem: str | Path,
                  title: str | None = None) -> list[Path]:
    """The roofline of :func:`roofline_figure`; writes ``stem.png`` and ``stem.svg``."""
    plt = load_pyplot()
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    fig = roofline_figure(points, roofs, title)
    out = []
    for ext in ("png", "svg"):
        path = stem.with_suffix(f".{ext}")
        fig.savefig(path)
        out.append(path)
    plt.close(fig)
    return out
