"""From a raw telemetry series to the figures a result shows, and to CSV rows. Pure functions.

The window is ``[window_start, window_end]`` from the marks (host clock). The steps tile it on
the GPU: the host issues the first step at ``window_start`` and waits for the last one before
``window_end``, so the GPU's work lies inside it.

Energy per GPU comes from the energy counter where it covers the window, else from integrated
power (``energy_method`` says which). The idle baseline is the mean power between ``idle_start``
and ``idle_end`` (sampled before the model was built, once the power had settled; the mark
``idle_unsettled`` says it had not within the wait, so the baseline reads high:
``idle_settled`` is then False), and ``net_energy_j`` subtracts it over the window.
"""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.telemetry import energy as E
from dlbench.telemetry.sources import GPU_FIELDS, HOST_FIELDS, THROTTLE_GROUPS, reason_names

MIB = 1024 ** 2


def window(raw: dict[str, Any]) -> tuple[float, float] | None:
    m = raw.get("marks") or {}
    if "window_start" in m and "window_end" in m:
        return m["window_start"], m["window_end"]
    return None


def throttle_in(ts: Sequence[float], reasons: Sequence[int | None], t0: float,
                t1: float) -> dict[str, Any]:
    """Which throttle groups were active during ``[t0, t1]``, as fractions of its samples."""
    inside = [int(r) for t, r in zip(ts, reasons) if r is not None and t0 <= t <= t1]
    bits = 0
    for r in inside:
        bits |= r
    frac = {g: (sum(1 for r in inside if r & mask) / len(inside) if inside else 0.0)
            for g, mask in THROTTLE_GROUPS.items()}
    return {"fractions": frac, "flags": [g for g, f in frac.items() if f > 0],
            "reasons": reason_names(bits), "samples": len(inside)}


def gpu_summary(gpu: dict[str, Any], t0: float, t1: float, idle: tuple[float, float] | None,
                samples: float | None) -> dict[str, Any]:
    s = gpu["series"]
    ts = s["t_s"]
    joules, method = E.window_energy_j(ts, s["energy_mj"], s["power_w"], t0, t1)
    idle_w = E.mean_in(ts, s["power_w"], *idle) if idle else None
    dur = t1 - t0
    net = joules - idle_w * dur if joules is not None and idle_w is not None else None
    thr = throttle_in(ts, s["throttle_reasons"], t0, t1)
    mem = E.max_in(ts, s["mem_used_bytes"], t0, t1)
    sampled_w = E.mean_in(ts, s["power_w"], t0, t1)
    return {
        "index": gpu.get("index"), "name": gpu.get("name"), "uuid": gpu.get("uuid"),
        "energy_j": joules, "energy_method": method,
        "mean_power_w": joules / dur if joules is not None and dur > 0 else
        E.mean_in(ts, s["power_w"], t0, t1),
        "max_power_w": E.max_in(ts, s["power_w"], t0, t1),
        "sampled_mean_power_w": sampled_w,
        # The counter's mean power against the samples' (energy.power_agreement); None where
        # the energy came from the samples themselves.
        "power_check": power_check(gpu, t0, t1) if method == "counter" else None,
        "power_limit_w": gpu.get("power_limit_w"),
        "idle_power_w": idle_w, "net_energy_j": net,
        "j_per_sample": joules / samples if joules and samples else None,
        "samples_per_j": samples / joules if joules and samples else None,
        "mean_sm_clock_mhz": E.mean_in(ts, s["sm_clock_mhz"], t0, t1),
        "mean_mem_clock_mhz": E.mean_in(ts, s["mem_clock_mhz"], t0, t1),
        "max_temp_c": E.max_in(ts, s["temp_c"], t0, t1),
        "mean_util_gpu_pct": E.mean_in(ts, s["util_gpu_pct"], t0, t1),
        "mean_util_mem_pct": E.mean_in(ts, s["util_mem_pct"], t0, t1),
        "max_mem_used_bytes": int(mem) if mem is not None else None,
        "memory_total_bytes": gpu.get("memory_total_bytes"),
        "mean_pcie_tx_kbs": E.mean_in(ts, s["pcie_tx_kbs"], t0, t1),
        "mean_pcie_rx_kbs": E.mean_in(ts, s["pcie_rx_kbs"], t0, t1),
        "nvlink_tx_kib": _delta(ts, s["nvlink_tx_kib"], t0, t1),
        "nvlink_rx_kib": _delta(ts, s["nvlink_rx_kib"], t0, t1),
        "throttle": thr,
        "window_samples": sum(1 for t in ts if t0 <= t <= t1),
    }


def power_check(gpu: dict[str, Any], t0: float, t1: float) -> dict[str, Any] | None:
    """The counter's mean power over ``[t0, t1]`` against the mean of the power samples inside
    it (:func:`dlbench.telemetry.energy.power_agreement`); None without both."""
    s = gpu["series"]
    ts = s["t_s"]
    joules = E.counter_energy_j(ts, s["energy_mj"], t0, t1, s["power_w"])
    if joules is None or t1 <= t0:
        return None
    return E.power_agreement(joules / (t1 - t0), E.mean_in(ts, s["power_w"], t0, t1), t1 - t0,
                             E.sample_interval(ts))


def energy_mismatch(telemetry: dict[str, Any] | None) -> dict[str, Any] | None:
    """The GPU whose counter and sampled mean power disagree the most beyond the tolerance, as
    its :func:`power_check` with ``gpu`` (its index) and ``gpus`` (how many disagree) added;
    None when every GPU agrees or there is nothing to compare. Computed from the raw series, so
    records stored before the check existed get it too."""
    w = window(telemetry or {})
    if w is None:
        return None
    bad = []
    for g in (telemetry or {}).get("gpus") or []:
        check = power_check(g, *w)
        if check is not None and not check["agree"]:
            bad.append({**check, "gpu": g.get("index")})
    if not bad:
        return None
    worst = max(bad, key=lambda c: abs(c["rel_diff"]))
    return {**worst, "gpus": len(bad)}


def mismatch_note(m: dict[str, Any]) -> str:
    """``energy-mismatch (counter 702.9 W, sampled 689.5 W)``: a flag with its two values."""
    where = f"; {m['gpus']} GPUs" if m.get("gpus", 1) > 1 else ""
    return (f"energy-mismatch (counter {m['counter_w']:.1f} W, sampled {m['sampled_w']:.1f} W"
            f"{where})")


def _delta(ts: Sequence[float], counter: Sequence[float | None], t0: float,
           t1: float) -> float | None:
    pts = [(t, float(v)) for t, v in zip(ts, counter) if v is not None]
    a, b = E.interpolate(pts, t0), E.interpolate(pts, t1)
    return b - a if a is not None and b is not None and b >= a else None


def summarize(raw: dict[str, Any], samples: float | None) -> dict[str, Any]:
    """Figures over the measured window: per GPU and summed. ``samples`` is the number of samples
    the window processed over all GPUs (split evenly for per-GPU figures)."""
    w = window(raw)
    out: dict[str, Any] = {"samples": samples, "window_s": None, "gpus": [], "total": None,
                           "throttled": [], "host": None}
    if w is None:
        return out
    t0, t1 = w
    out["window_s"] = t1 - t0
    m = raw.get("marks") or {}
    idle = (m["idle_start"], m["idle_end"]) if "idle_start" in m and "idle_end" in m else None
    gpus = raw.get("gpus") or []
    per = samples / len(gpus) if samples and gpus else None
    out["gpus"] = [gpu_summary(g, t0, t1, idle, per) for g in gpus]
    out["idle_settled"] = None if idle is None else "idle_unsettled" not in m
    if out["gpus"]:
        out["total"] = _total(out["gpus"], samples, t1 - t0)
        mismatch = energy_mismatch(raw)
        out["energy_mismatch"] = mismatch  # None: the counter and the samples agree
        out["throttled"] = sorted({f for g in out["gpus"] for f in g["throttle"]["flags"]},
                                  key=list(THROTTLE_GROUPS).index)
    host = raw.get("host")
    if host:
        s = host["series"]
        ts = s["t_s"]
        rss = E.max_in(ts, s["rss_bytes"], t0, t1)
        out["host"] = {"mean_cpu_pct": E.mean_in(ts, s["cpu_pct"], t0, t1),
                       "mean_proc_cpu_pct": E.mean_in(ts, s["proc_cpu_pct"], t0, t1),
                       "max_rss_bytes": int(rss) if rss is not None else None}
    return out


def _total(gpus: list[dict[str, Any]], samples: float | None, dur: float) -> dict[str, Any]:
    def sum_of(key: str) -> float | None:
        vals = [g[key] for g in gpus]
        return None if any(v is None for v in vals) else sum(vals)

    joules = sum_of("energy_j")
    return {
        "energy_j": joules, "net_energy_j": sum_of("net_energy_j"),
        "idle_power_w": sum_of("idle_power_w"),
        "mean_power_w": joules / dur if joules is not None and dur > 0 else None,
        "max_power_w": sum_of("max_power_w"),  # the sum of each GPU's maximum
        "j_per_sample": joules / samples if joules and samples else None,
        "samples_per_j": samples / joules if joules and samples else None,
        "net_j_per_sample": (sum_of("net_energy_j") / samples
                             if sum_of("net_energy_j") and samples else None),
        "methods": sorted({g["energy_method"] for g in gpus if g["energy_method"]}),
    }


def finish(raw: dict[str, Any] | None, samples: float | None) -> dict[str, Any] | None:
    """The record's telemetry: the raw series with its summary added."""
    if raw is None:
        return None
    return {**raw, "summary": summarize(raw, samples)}


# -- series as rows -------------------------------------------------------------------------
def phase(marks: dict[str, float], t: float) -> str:
    """Which part of a benchmark the time ``t`` falls in."""
    if "idle_start" in marks and marks["idle_start"] <= t <= marks.get("idle_end", t):
        return "idle"
    if "window_start" in marks and t >= marks["window_start"]:
        return "window" if t <= marks.get("window_end", t) else "after"
    if "warmup_start" in marks and t >= marks["warmup_start"]:
        return "warmup"
    return "setup" if marks else ""


GPU_CSV_COLUMNS = ("t_s", "phase", "gpu", "power_w", "energy_j", "util_gpu_pct", "util_mem_pct",
                   "mem_used_mib", "mem_total_mib", "temp_c", "sm_clock_mhz", "mem_clock_mhz",
                   "throttle", "pcie_tx_mbs", "pcie_rx_mbs", "nvlink_tx_mbs", "nvlink_rx_mbs")
HOST_CSV_COLUMNS = ("t_s", "phase", "cpu_pct", "proc_cpu_pct", "rss_mib", "mem_used_mib")


def _r(x: Any, nd: int = 1) -> Any:
    return None if x is None else round(float(x), nd)


def gpu_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per GPU per sample, in time order; energy is the counter since the series began."""
    marks = raw.get("marks") or {}
    rows = []
    for g in raw.get("gpus") or []:
        s = g["series"]
        ts = s["t_s"]
        e0 = next((v for v in s["energy_mj"] if v is not None), None)
        unwrapped = dict(E.unwrap_counter(ts, s["energy_mj"], s["power_w"])) if e0 is not None else {}
        tx = E.counter_rate(ts, s["nvlink_tx_kib"], 1024 / 1e6)
        rx = E.counter_rate(ts, s["nvlink_rx_kib"], 1024 / 1e6)
        total = g.get("memory_total_bytes")
        for i, t in enumerate(ts):
            v = {k: s[k][i] for k in GPU_FIELDS}
            rows.append({
                "t_s": round(t, 4), "phase": phase(marks, t), "gpu": g.get("index"),
                "power_w": _r(v["power_w"], 2), "energy_j": _r(unwrapped.get(t), 3),
                "util_gpu_pct": v["util_gpu_pct"], "util_mem_pct": v["util_mem_pct"],
                "mem_used_mib": _r(v["mem_used_bytes"] / MIB if v["mem_used_bytes"] is not None
                                   else None),
                "mem_total_mib": _r(total / MIB if total else None),
                "temp_c": v["temp_c"], "sm_clock_mhz": v["sm_clock_mhz"],
                "mem_clock_mhz": v["mem_clock_mhz"],
                "throttle": "|".join(reason_names(v["throttle_reasons"] or 0))
                if v["throttle_reasons"] is not None else None,
                "pcie_tx_mbs": _r(v["pcie_tx_kbs"] / 1e3 if v["pcie_tx_kbs"] is not None else None),
                "pcie_rx_mbs": _r(v["pcie_rx_kbs"] / 1e3 if v["pcie_rx_kbs"] is not None else None),
                "nvlink_tx_mbs": _r(tx[i]), "nvlink_rx_mbs": _r(rx[i]),
            })
    rows.sort(key=lambda r: (r["t_s"], r["gpu"]))
    return rows


def host_rows(raw: dict[str, Any]) -> list[dict[str, Any]]:
    host = raw.get("host")
    if not host:
        return []
    marks = raw.get("marks") or {}
    s = host["series"]
    return [{"t_s": round(t, 4), "phase": phase(marks, t), "cpu_pct": s["cpu_pct"][i],
             "proc_cpu_pct": s["proc_cpu_pct"][i],
             "rss_mib": _r(s["rss_bytes"][i] / MIB if s["rss_bytes"][i] is not None else None),
             "mem_used_mib": _r(s["mem_used_bytes"][i] / MIB
                                if s["mem_used_bytes"][i] is not None else None)}
            for i, t in enumerate(s["t_s"])]


def rows(raw: dict[str, Any]) -> tuple[tuple[str, ...], list[dict[str, Any]]]:
    """``(columns, rows)``: the GPU series where there is one, else the host series."""
    if raw.get("gpus"):
        return GPU_CSV_COLUMNS, gpu_rows(raw)
    return HOST_CSV_COLUMNS, host_rows(raw)


__all__ = ["finish", "summarize", "power_check", "energy_mismatch", "mismatch_note", "rows", "gpu_rows", "host_rows", "throttle_in", "phase",
           "GPU_CSV_COLUMNS", "HOST_CSV_COLUMNS", "HOST_FIELDS"]
