"""Memory against throughput of language-model training by strategy: what a strategy buys in
memory and what it costs in speed, from the ``dlbench scale`` records of models counted in tokens
(the records of :func:`dlbench.report.strategy_tables.strategy_table`, which prints the same
numbers as text for the terminal and Markdown).

One chart per model and device: rank 0's peak memory (GiB, the caching allocator's allocated
peak) on x, tokens/s per GPU on y (the table's tok/s/GPU, with its 95% interval), one point per
strategy, levers and GPU count, one marker per strategy, and the GPU's memory as a vertical
line: a point near it is a setup close to running out. Each point is labelled with its strategy
and GPU count ("fsdp x2") and whatever sets it apart from the chart's other points ("ckpt",
"b4/replica"); what all points share goes in the title. A record without a memory peak (a CPU
run) or a failed one is not drawn and the title names it; a model with no point has no chart.
A config measured twice is drawn once, from its latest ok record (the table shows every record).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dlbench.measure.mfu import device_key
from dlbench.report.charts.base import Chart, commands_of, finish, per_s, pyplot, wrap
from dlbench.report.strategy_tables import latest_per_config, lm_records, strategy_cell

GIB = 1024 ** 3

#: Marker and colour of each strategy's series; another strategy takes the next of OTHERS.
STYLES = {"ddp": ("o", "tab:blue"), "fsdp": ("s", "tab:orange"), "tp": ("^", "tab:green"),
          "fsdp+tp": ("D", "tab:red")}
OTHERS = (("v", "tab:purple"), ("P", "tab:brown"), ("X", "tab:pink"), ("*", "tab:gray"))


@dataclass(frozen=True)
class StrategyPoint:
    """One drawn record: its series, its label and its coordinates."""

    strategy: str                            # the series: ddp, fsdp, tp, fsdp+tp, ...
    label: str                               # "fsdp x2", "ddp x1 ckpt"
    gib: float                               # x: rank 0's allocated peak, GiB
    per_gpu: tuple[float, float, float]      # y: tokens/s per GPU and its 95% interval's ends
    record: Any


@dataclass(frozen=True)
class StrategyPanel:
    """One chart: a model on a device, its points, the GPU's memory and what was left out."""

    model: str
    device: str
    common: tuple[str, ...]                  # what every point shares: "bf16", "seq 2048", ...
    points: tuple[StrategyPoint, ...]
    capacity_gib: tuple[float, ...]          # the GPU's memory (each distinct value), if known
    left_out: tuple[str, ...]                # "ddp x4 (oom)", "fsdp x1 (no GPU memory peak)"
    records: tuple[Any, ...]                 # every record the chart speaks of, for its commands


def _facets(r: Any) -> tuple[str, ...]:
    """What can set two points of one model apart besides strategy and GPU count, each as the
    text a label carries ("" where there is nothing to say: eager, no checkpointing)."""
    c, b = r.config, r.config.base
    seq = r.units_per_sample  # a sequence's tokens, as the record counted them
    compiled = ""
    if b.compile:
        compiled = "compiled" if b.compile == "default" else f"compiled {b.compile}"
    return (b.precision, f"seq {seq}" if seq else "", f"b{b.batch_size}/replica",
            b.checkpoint_label, compiled, "offload" if c.offload else "", "fp8" if c.fp8 else "",
            "" if c.interconnect == "default" else c.interconnect,
            f"{c.nnodes} nodes" if c.nnodes > 1 else "")


def _name(r: Any) -> str:
    return f"{strategy_cell(r.config)} x{r.config.gpus}"


def _capacity(r: Any) -> int | None:
    """The GPU's memory: the environment's first GPU, else what the record's memory says."""
    gpus = (r.env or {}).get("gpus") or [{}]
    return gpus[0].get("memory_total_bytes") or (r.memory or {}).get("device_total_bytes")


def _device(r: Any) -> str:
    """The device the record ran on; a ``--device cpu`` run on a GPU host is its CPU."""
    env = dict(r.env or {})
    on_cpu = r.config.base.device == "cpu" or env.get("accelerator") != "cuda"
    return device_key({**env, "accelerator": "cpu"} if on_cpu else env)


def strategy_panels(records: Sequence[Any]) -> list[StrategyPanel]:
    """The charts of :func:`strategy_charts` as data, one per model and device with at least
    one point to draw, in the order the records first name them."""
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in latest_per_config(lm_records(records)):
        groups.setdefault((r.config.model, _device(r)), []).append(r)
    out = []
    for (model, device), recs in groups.items():
        drawn, left_out = [], []
        for r in recs:
            s = r.summary()
            mem = (r.memory or {}).get("allocated_peak_bytes")
            if s is None:
                left_out.append(f"{_name(r)} ({r.error_type or 'failed'})")
            elif not mem:
                left_out.append(f"{_name(r)} (no GPU memory peak)")
            else:
                drawn.append(r)
        if not drawn:
            continue
        facets = [_facets(r) for r in drawn]
        differ = [len(set(col)) > 1 for col in zip(*facets)]
        common = tuple(t for t, d in zip(facets[0], differ) if t and not d)
        points = []
        for r, fs in zip(drawn, facets):
            extra = [t for t, d in zip(fs, differ) if t and d]
            gpus = r.config.gpus
            points.append(StrategyPoint(
                r.config.strategy, " ".join([_name(r)] + extra),
                r.memory["allocated_peak_bytes"] / GIB,
                tuple(v / gpus for v in per_s(r)), r))
        caps = sorted({c / GIB for r in drawn if (c := _capacity(r))})
        out.append(StrategyPanel(model, device, common, tuple(points), tuple(caps),
                                 tuple(left_out), tuple(recs)))
    return out


def _styles(points: Sequence[StrategyPoint]) -> dict[str, tuple[str, str]]:
    others = iter(OTHERS * (1 + len(points) // len(OTHERS)))
    return {s: STYLES.get(s) or next(others) for s in dict.fromkeys(p.strategy for p in points)}


def panel_title(panel: StrategyPanel) -> str:
    shared = f" ({', '.join(panel.common)})" if panel.common else ""
    title = (f"Memory against throughput by strategy: {panel.model}{shared} on {panel.device}; "
             "rank 0's peak memory and tokens/s per GPU (error bars: 95% interval)")
    if panel.left_out:
        title += f"; not drawn: {', '.join(panel.left_out)}"
    return title


def strategy_figure(plt: Any, panel: StrategyPanel, title: str) -> Any:
    """The chart of one panel as a matplotlib figure (the caller closes it)."""
    from matplotlib.ticker import FuncFormatter  # optional: pyplot() has loaded matplotlib
    fig, ax = plt.subplots(figsize=(7, 4.8), dpi=100)
    styles = _styles(panel.points)
    for strategy, (marker, color) in styles.items():
        pts = [p for p in panel.points if p.strategy == strategy]
        ys = [p.per_gpu for p in pts]
        ax.errorbar([p.gib for p in pts], [y[0] for y in ys],
                    yerr=[[max(0.0, y[0] - y[1]) for y in ys], [max(0.0, y[2] - y[0]) for y in ys]],
                    fmt=marker, color=color, ms=7, capsize=2, ls="none", label=strategy)
    right = max([p.gib for p in panel.points] + list(panel.capacity_gib)) * 1.1
    for cap in panel.capacity_gib:
        ax.axvline(cap, color="black", ls="--", lw=1, label=f"GPU memory {cap:.1f} GiB")
    top = max(p.per_gpu[2] for p in panel.points) * 1.15
    for p in panel.points:
        # A label sits above right of its point; below it where another point sits just to
        # the right at about its height (under the label's text); to the left near the edge.
        crowded = any(0 < q.gib - p.gib < 0.12 * right
                      and abs(q.per_gpu[0] - p.per_gpu[0]) < 0.05 * top for q in panel.points)
        edge = p.gib > 0.75 * right
        xy, ha, va = (((0, -7), "center", "top") if crowded else
                      ((-5, 4), "right", "bottom") if edge else ((5, 4), "left", "bottom"))
        ax.annotate(p.label, (p.gib, p.per_gpu[0]), fontsize=7, textcoords="offset points",
                    xytext=xy, ha=ha, va=va)
    ax.set_xlim(0, right)
    ax.set_ylim(0, top)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:,.0f}"))
    ax.set_xlabel("rank 0's peak memory, GiB (the caching allocator's allocated peak)")
    ax.set_ylabel("tokens/s per GPU (distinct tokens over all GPUs)")
    ax.set_title(wrap(title, fig), fontsize=9)
    ax.grid(True, lw=0.3, alpha=0.6)
    ax.legend(fontsize=7, title="strategy", title_fontsize=7, loc="best")
    return fig


def strategy_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Per model and device: tokens/s per GPU against rank 0's peak memory, one point per
    language-model scaling record with a memory peak (:func:`strategy_panels`)."""
    out = []
    for panel in strategy_panels(records):
        plt = pyplot()
        title = panel_title(panel)
        fig = strategy_figure(plt, panel, title)
        out.append(finish(plt, fig, title, commands_of(panel.records, commands)))
    return out
