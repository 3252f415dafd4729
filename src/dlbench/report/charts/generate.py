"""Generation charts (from ``generate`` records, with peak records for a measured roof).

``latency_charts``: the serving trade-off as vLLM and TensorRT-LLM plot it, output tokens/s
against the time per output token, one line per model, path, precision and lengths over its
batch sweep, each point labelled with its batch. ``decode_roofline_charts``: the bandwidth a
decode step achieved at each batch against the device's memory roof (the measured copy
bandwidth, else the datasheet's), the fraction of the roof on the right axis.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench.report.charts.base import Chart, commands_of, finish, pyplot, wrap
from dlbench.report.generate_figures import bandwidth_roof, device_of, device_of_peak
from dlbench.report.plots import plain_log_ticks


def _setup(r: Any) -> tuple[str, ...]:
    """A line of a batch sweep: everything but the batch (fp8's recipes apart: fp8, fp8-wo)."""
    c = r.config
    return (c.model, c.path_label, c.precision_label, c.tokens_label)


def _sweeps(records: Sequence[Any]) -> dict[str, dict[tuple, dict[int, Any]]]:
    """device -> line -> batch -> the latest ok record (a rerun of a batch wins)."""
    out: dict[str, dict[tuple, dict[int, Any]]] = {}
    for r in records:
        if r.kind == "generate" and r.ok and r.tpot() is not None and r.summary() is not None:
            out.setdefault(device_of(r), {}).setdefault(_setup(r), {})[r.config.batch_size] = r
    return out


def latency_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Per device: mean TPOT (ms) against output tokens/s, one line per setup, points labelled by
    batch. Drawn where some setup ran two or more batch sizes (one point is no trade-off)."""
    out = []
    for dev, lines in _sweeps(records).items():
        if not any(len(b) > 1 for b in lines.values()):
            continue
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7.5, 5), dpi=100)
        used, xs_all = [], []
        for setup, by_batch in lines.items():
            bs = sorted(by_batch)
            xs = [by_batch[b].output_tokens_per_s() for b in bs]
            ys = [by_batch[b].tpot().mean_s * 1e3 for b in bs]
            ax.plot(xs, ys, marker="o", label=" ".join(setup))
            for b, x, y in zip(bs, xs, ys):
                ax.annotate(f"b{b}", (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
            used += [by_batch[b] for b in bs]
            xs_all += xs
        if max(xs_all) > 20 * min(xs_all):  # a wide sweep: equal steps per doubling
            ax.set_xscale("log")
            plain_log_ticks(ax)
        ax.set_xlabel("output tokens/s (all sequences of the batch)")
        ax.set_ylabel("time per output token, mean (ms)")
        title = f"Generation on {dev}: time per output token against output tokens/s over batch"
        ax.set_title(wrap(title, fig), fontsize=9)
        ax.grid(True, which="both", lw=0.3, alpha=0.6)
        ax.legend(fontsize=7, title="model path precision prompt+output", title_fontsize=7)
        out.append(finish(plt, fig, title, commands_of(used, commands)))
    return out


def decode_roofline_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Per device with a memory roof: each setup's decode GB/s against batch, the roof as a
    horizontal line, the fraction of the roof on the right axis. None without a roof (a CPU
    with no ``dlbench peak`` copy run) or without a decode figure."""
    peaks = [r for r in records if r.kind == "peak"]
    out = []
    for dev, lines in _sweeps(records).items():
        first = next(iter(next(iter(lines.values())).values()))
        roof = bandwidth_roof(first, peaks)
        pts = {s: {b: r.decode_gbs() for b, r in by.items() if r.decode_gbs() is not None}
               for s, by in lines.items()}
        if roof is None or not any(pts.values()):
            continue
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7.5, 5), dpi=100)
        used, batches = [], set()
        for setup, by_batch in pts.items():
            if not by_batch:
                continue
            bs = sorted(by_batch)
            ax.plot(bs, [by_batch[b] for b in bs], marker="o", label=" ".join(setup))
            used += [lines[setup][b] for b in bs]
            batches.update(bs)
        ax.axhline(roof.gbs, color="black", lw=1.2, ls="--",
                   label=f"memory roof {roof.gbs:,.0f} GB/s, {roof.label}")
        if len(batches) > 1:
            ax.set_xscale("log", base=2)
            plain_log_ticks(ax)
        # a small model's working set can sit in cache and beat the DRAM roof: keep it in view
        ax.set_ylim(0, max([roof.gbs] + [g for by in pts.values() for g in by.values()]) * 1.1)
        # the same axis read as a share of the roof, so no second scale can disagree with it
        right = ax.secondary_yaxis("right", functions=(lambda y: 100 * y / roof.gbs,
                                                       lambda p: p * roof.gbs / 100))
        right.set_ylabel("% of the memory roof")
        ax.set_xlabel("batch (sequences decoded together)")
        ax.set_ylabel("decode GB/s (bytes a step must read / mean TPOT)")
        title = (f"Decode against the memory roof on {dev} (roof: {roof.label}): achieved "
                 "bandwidth per batch")
        ax.set_title(wrap(title, fig), fontsize=9)
        ax.grid(True, which="both", lw=0.3, alpha=0.6)
        ax.legend(fontsize=7, loc="lower right")
        used += [p for p in peaks if p.ok and p.config.verb == "copy"
                 and roof.source == "measured" and device_of_peak(p) == dev]
        out.append(finish(plt, fig, title, commands_of(used, commands)))
    return out
