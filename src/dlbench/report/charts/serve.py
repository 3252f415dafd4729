"""Serving charts (from ``serve`` records).

``latency_throughput_charts``: the serving trade-off as vLLM's and NVIDIA's GenAI-Perf plots
show it: per setup (model, API, lengths, client host), TTFT and TPOT at the median and the 99th
percentile against output tokens per second over the load points, each point labelled with its
load, the SLO's limits drawn as horizontal lines. ``goodput_charts``: the rate points' goodput and
completed requests per second against the offered rate, with the line where everything offered
completes in time.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from dlbench import env as envmod
from dlbench.report.charts.base import Chart, commands_of, finish, pyplot, wrap
from dlbench.report.plots import plain_log_ticks


def _setup(r: Any) -> tuple[str, ...]:
    c = r.config
    return (envmod.device_label(r.env or {}), c.model, c.api, c.tokens_label)


def _curves(records: Sequence[Any]) -> dict[tuple[str, ...], list[Any]]:
    """setup -> its ok load points (the latest of each load), by output tokens/s."""
    by: dict[tuple[str, ...], dict[str, Any]] = {}
    for r in records:
        if r.kind == "serve" and r.ok and r.ttft() is not None and r.output_tokens_per_s():
            by.setdefault(_setup(r), {})[r.config.load_label] = r
    return {k: sorted(v.values(), key=lambda r: r.output_tokens_per_s()) for k, v in by.items()}


def latency_throughput_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Per setup with two or more load points: TTFT (left) and TPOT (right) in ms, p50 solid and
    p99 dashed, against output tokens/s; SLO limits as horizontal lines."""
    out = []
    for setup, recs in _curves(records).items():
        if len(recs) < 2:
            continue
        plt = pyplot()
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.6), dpi=100)
        xs = [r.output_tokens_per_s() for r in recs]
        for ax, name, get, limit in (
                (axes[0], "TTFT", lambda r: r.ttft(), recs[0].config.slo_ttft_s),
                (axes[1], "TPOT", lambda r: r.tpot(), recs[0].config.slo_tpot_s)):
            pts = [(x, get(r), r) for x, r in zip(xs, recs) if get(r) is not None]
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1].p50_s * 1e3 for p in pts], marker="o",
                    label=f"{name} p50")
            ax.plot([p[0] for p in pts], [p[1].p99_s * 1e3 for p in pts], marker="s", ls="--",
                    label=f"{name} p99")
            for x, d, r in pts:
                ax.annotate(r.config.load_label, (x, d.p99_s * 1e3), fontsize=6, xytext=(3, 3),
                            textcoords="offset points")
            if limit is not None:
                ax.axhline(limit * 1e3, color="crimson", lw=1.0, ls=":",
                           label=f"SLO {name} {limit * 1e3:g} ms")
            if max(xs) > 20 * min(xs):
                ax.set_xscale("log")
                plain_log_ticks(ax)
            ax.set_xlabel("output tokens/s (completed requests)")
            ax.set_ylabel(f"{name} (ms)")
            ax.grid(True, which="both", lw=0.3, alpha=0.6)
            ax.legend(fontsize=7)
        device, model, api, tokens = setup
        title = (f"Serving {model} ({api}, {tokens} tokens), client on {device}: TTFT and TPOT "
                 "against output tokens/s over the load points")
        fig.suptitle(wrap(title, fig), fontsize=9)
        out.append(finish(plt, fig, title, commands_of(recs, commands)))
    return out


def goodput_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Per setup with two or more rate points: goodput and completed requests per second
    against the offered rate, the ideal y = x dashed."""
    out = []
    for setup, recs in _curves(records).items():
        pts = sorted((r for r in recs if r.config.rate is not None), key=lambda r: r.config.rate)
        if len(pts) < 2:
            continue
        plt = pyplot()
        fig, ax = plt.subplots(figsize=(7.5, 5), dpi=100)
        rates = [r.config.rate for r in pts]
        ax.plot(rates, rates, color="grey", ls="--", lw=1, label="offered (all in time)")
        ax.plot(rates, [r.request_throughput() for r in pts], marker="o",
                label="completed req/s")
        ax.plot(rates, [r.goodput() for r in pts], marker="s",
                label=f"goodput req/s ({pts[0].config.slo.label})")
        ax.set_xlabel("offered request rate (req/s)")
        ax.set_ylabel("requests per second")
        ax.grid(True, lw=0.3, alpha=0.6)
        ax.legend(fontsize=7)
        device, model, api, tokens = setup
        title = (f"Goodput of {model} ({api}, {tokens} tokens), client on {device}: requests "
                 "per second within the SLO against the offered rate")
        ax.set_title(wrap(title, fig), fontsize=9)
        out.append(finish(plt, fig, title, commands_of(pts, commands)))
    return out


def serve_charts(records: Sequence[Any], commands: Mapping[str, str]) -> list[Chart]:
    """Both, in the report's order."""
    return latency_throughput_charts(records, commands) + goodput_charts(records, commands)
