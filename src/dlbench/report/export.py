"""Records to flat rows (CSV) and to JSON documents. Pure: the caller writes the text."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any, Sequence

from dlbench.measure.stats import Summary
from dlbench.records.throughput import ThroughputRecord

CSV_COLUMNS = (
    "id", "run_id", "created_at", "model", "mode", "method", "batch_size", "precision", "compile",
    "channels_last", "optimizer", "input_size", "status", "error_type", "samples_per_s",
    "samples_per_s_low", "samples_per_s_high", "units_per_s", "unit", "rel_halfwidth",
    "mean_ms", "median_ms", "p5_ms", "p95_ms", "cv", "steps", "stop_reason", "converged",
    "first_step_s", "build_s", "flops_per_sample", "tflops", "allocated_peak_bytes",
    "reserved_peak_bytes", "device", "gpu", "driver", "cuda", "torch", "host", "error",
)


def flat_row(r: ThroughputRecord) -> dict[str, Any]:
    """One CSV row; a record of another kind fills the columns every kind has."""
    if r.kind != "throughput":
        return {k: "" for k in CSV_COLUMNS} | {
            "id": r.id, "run_id": r.run_id, "created_at": r.created_at,
            "model": getattr(r.config, "model", ""), "status": r.status,
            "error_type": r.error_type or "", "unit": r.kind, "units_per_s": r.headline(),
            "error": (r.error or "").splitlines()[0] if r.error else ""}
    c, s, env = r.config, r.summary(), r.env
    gpus = env.get("gpus") or []
    row: dict[str, Any] = {
        "id": r.id, "run_id": r.run_id, "created_at": r.created_at, "model": c.model,
        "mode": c.mode, "method": c.method, "batch_size": c.batch_size, "precision": c.precision,
        "compile": c.compiled_as if c.compile else "", "channels_last": c.channels_last,
        "optimizer": c.optimizer,
        "input_size": c.input_size or "", "status": r.status, "error_type": r.error_type or "",
        "unit": r.unit, "stop_reason": r.stop_reason or "", "first_step_s": r.first_step_s,
        "build_s": r.build_s, "flops_per_sample": r.flops_per_sample,
        "tflops": r.achieved_tflops(),
        "allocated_peak_bytes": r.memory.get("allocated_peak_bytes"),
        "reserved_peak_bytes": r.memory.get("reserved_peak_bytes"),
        "device": env.get("accelerator"), "gpu": gpus[0].get("name") if gpus else "",
        "driver": env.get("driver"), "cuda": env.get("cuda_runtime"),
        "torch": (env.get("packages") or {}).get("torch"), "host": env.get("hostname"),
        "error": (r.error or "").splitlines()[0] if r.error else "",
    }
    if s is not None:
        row.update({
            "samples_per_s": s.throughput, "samples_per_s_low": s.throughput_low,
            "samples_per_s_high": s.throughput_high,
            "units_per_s": s.throughput * r.units_per_sample, "rel_halfwidth": s.rel_halfwidth,
            "mean_ms": s.mean_s * 1e3, "median_ms": s.median_s * 1e3, "p5_ms": s.p5_s * 1e3,
            "p95_ms": s.p95_s * 1e3, "cv": s.cv, "steps": s.steps, "converged": r.converged(),
        })
    return {k: row.get(k, "") for k in CSV_COLUMNS}


def to_csv(records: Sequence[ThroughputRecord]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in records:
        w.writerow({k: "" if v is None else v for k, v in flat_row(r).items()})
    return buf.getvalue()


def to_json(records: Sequence[ThroughputRecord]) -> str:
    """Full records (raw step times, config, environment) plus their summaries."""
    docs = []
    for r in records:
        d = r.to_dict()
        s = r.summary() if hasattr(r, "summary") else None
        if isinstance(s, Summary):  # throughput and scaling records: figures from raw step times
            per_sample = getattr(r, "units_per_sample", 1)
            tflops = r.achieved_tflops() if hasattr(r, "achieved_tflops") else None
            d["summary"] = {
                "samples_per_s": s.throughput,
                "interval": [s.throughput_low, _finite(s.throughput_high)],
                "rel_halfwidth": _finite(s.rel_halfwidth), "median_s": s.median_s, "p5_s": s.p5_s,
                "p95_s": s.p95_s, "steps": s.steps, "cv": s.cv, "confidence": s.confidence,
                "units_per_s": s.throughput * per_sample, "tflops": tflops,
                "converged": r.converged() if hasattr(r, "converged") else None,
            }
        elif s is None and r.kind == "throughput":
            d["summary"] = None
        docs.append(d)
    return json.dumps(docs, indent=1)


def _finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded interval end is written as null."""
    return x if math.isfinite(x) else None
