"""Memory against batch size with the out-of-memory points marked, as the 2019 PyTorch vs Keras
CIFAR-10 study on 2x RTX 2080 Ti showed where a framework stopped fitting (from maxbatch records'
probes and throughput records' memory figures), beside throughput against batch size relative to
the smallest batch that ran."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dlbench.report.charts.base import Chart, commands_of, finish, pyplot
from dlbench.report.plots import plain_log_ticks

GIB = 1024 ** 3


def _setup(c: Any) -> tuple:
    """Everything of a training setup but its batch size (a ThroughputConfig)."""
    return (c.model, c.mode, c.precision, "NHWC" if c.channels_last else "",
            c.compiled_as, c.optimizer, c.input_size or "",
            getattr(c, "checkpoint_label", ""),
            "" if getattr(c, "autotune", True) else "no-autotune")


def _setup_label(key: tuple) -> str:
    return " ".join(str(k) for k in key if k not in ("", None, "eager", "sgd"))


@dataclass
class MemoryPoint:
    """What is known of one batch size of one setup."""

    alloc: int | None = None       # allocated peak, bytes
    oom: bool = False
    per_s: float | None = None     # samples per second, from a throughput record


def memory_points(records: Sequence[Any]) -> tuple[dict[tuple, dict[int, MemoryPoint]],
                                                   dict[tuple, int], dict[tuple, list]]:
    """Per setup: batch -> point, the device's memory, and the records used. Probes first, then
    throughput records in store order, so the longer measurement (and a later rerun) wins."""
    pts: dict[tuple, dict[int, MemoryPoint]] = {}
    total: dict[tuple, int] = {}
    used: dict[tuple, list] = {}
    for r in records:
        if r.kind != "maxbatch":
            continue
        key = _setup(r.config.base)
        for p in r.probes:
            if p.fits or p.outcome == "oom":
                pt = pts.setdefault(key, {}).setdefault(p.batch, MemoryPoint())
                pt.alloc, pt.oom = (p.allocated_peak_bytes, False) if p.fits else (None, True)
            if p.device_total_bytes:
                total[key] = p.device_total_bytes
        used.setdefault(key, []).append(r)
    for r in records:
        if r.kind != "throughput":
            continue
        key = _setup(r.config)
        oom = not r.ok and r.error_type == "oom"
        alloc = r.memory.get("allocated_peak_bytes") if r.ok else None
        if not oom and alloc is None:
            continue  # a CPU result (no allocator peak) or another failure: nothing to draw
        pt = pts.setdefault(key, {}).setdefault(r.config.batch_size, MemoryPoint())
        pt.oom, pt.alloc = oom, alloc
        s = r.summary()
        pt.per_s = s.throughput if s is not None else None
        if r.memory.get("device_total_bytes"):
            total[key] = r.memory["device_total_bytes"]
        used.setdefault(key, []).append(r)
    return pts, total, used


def memory_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """One chart for every setup with two or more batch sizes known, at least one of them with
    its memory: allocated peak (GiB) against batch, OOM points as red crosses at the device's
    memory; beside it throughput over the smallest batch that ran, where throughput exists."""
    pts, total, used = memory_points(records)
    keep = {k: v for k, v in pts.items()
            if len(v) >= 2 and any(p.alloc is not None for p in v.values())}
    if not keep:
        return []
    with_rate = {k: v for k, v in keep.items() if sum(p.per_s is not None for p in v.values()) >= 2}
    plt = pyplot()
    ncols = 2 if with_rate else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 4.8), dpi=100, squeeze=False)
    ax = axes[0][0]
    colors = plt.get_cmap("tab10")
    oom_label = "out of memory"
    top = max([v for k in keep if (v := total.get(k))] +
              [p.alloc for v in keep.values() for p in v.values() if p.alloc is not None])
    for i, (key, bpts) in enumerate(keep.items()):
        color = colors(i % 10)
        fits = sorted((b, p.alloc) for b, p in bpts.items() if p.alloc is not None)
        ooms = sorted(b for b, p in bpts.items() if p.oom)
        ax.plot([b for b, _ in fits], [a / GIB for _, a in fits], marker="o", color=color,
                label=_setup_label(key))
        if ooms:
            ax.scatter(ooms, [total.get(key, top) / GIB] * len(ooms), marker="x", s=60,
                       color="tab:red", zorder=4, label=oom_label)
            oom_label = "_"  # one legend entry for every OOM cross
    ax.set_xscale("log", base=2)
    plain_log_ticks(ax)
    ax.set_ylim(0, top / GIB * 1.1)
    for mem in sorted({v for k, v in total.items() if k in keep}):
        ax.axhline(mem / GIB, color="black", ls="--", lw=0.8)
        ax.text(ax.get_xlim()[0], mem / GIB, f" device memory {mem / GIB:.1f} GiB",
                fontsize=6, va="bottom")
    ax.set_xlabel("batch size (samples per step, per device)")
    ax.set_ylabel("allocated peak (GiB)")
    ax.set_title("Memory against batch size (x: out of memory)", fontsize=9)
    ax.grid(True, which="both", lw=0.3, alpha=0.6)
    ax.legend(fontsize=6)
    if with_rate:
        ax2 = axes[0][1]
        for i, (key, bpts) in enumerate(keep.items()):
            if key not in with_rate:
                continue
            rates = sorted((b, p.per_s) for b, p in bpts.items() if p.per_s is not None)
            base = rates[0][1]
            ax2.plot([b for b, _ in rates], [v / base for _, v in rates], marker="o",
                     color=colors(i % 10), label=_setup_label(key))
            ooms = sorted(b for b, p in bpts.items() if p.oom)
            if ooms:
                ax2.scatter(ooms, [1.0] * len(ooms), marker="x", s=60, color="tab:red", zorder=4)
        ax2.set_xscale("log", base=2)
        plain_log_ticks(ax2)
        ax2.set_xlabel("batch size (samples per step, per device)")
        ax2.set_ylabel("throughput over the smallest batch that ran (x)")
        ax2.set_title("Throughput against batch size (x at 1.0: out of memory)", fontsize=9)
        ax2.grid(True, which="both", lw=0.3, alpha=0.6)
        ax2.legend(fontsize=6)
    title = ("Memory and throughput against batch size, out-of-memory points marked "
             "(allocated peak: the caching allocator's, one device)")
    recs = [r for k in keep for r in used.get(k, [])]
    return [finish(plt, fig, title, commands_of(recs, commands))]
