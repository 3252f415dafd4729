"""Language-model training across strategies (ddp, fsdp, ...): what a cluster sizer reads.

One row per ``dlbench scale`` record of a model counted in tokens: tokens/s in all and per GPU,
model TFLOP/s per GPU and MFU against the GPU's datasheet dense peak and the measured matmul
ceiling, rank 0's peak memory, and the factor over the same strategy's record at 1 GPU.
MFU counts the model's FLOPs per token as the record counted them (6N + 12LHT for the
transformers LMs: docs/throughput.md); it is None (``-``) on a CPU, which has no datasheet peak.
"""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.measure.mfu import datasheet_mfu, device_key, measured_peaks
from dlbench.records.scaling import scaling_factor
from dlbench.report.flags import flags
from dlbench.report.table import Table, fmt_num


def lm_records(records: Sequence[Any]) -> list[Any]:
    """The scaling records of models counted in tokens (language models)."""
    return [r for r in records if getattr(r, "kind", "") == "scaling" and r.unit == "tokens"]


def _levers(c: Any) -> str:
    b = c.base
    parts = [p for p, on in (("ckpt", b.checkpointing), (b.compile and "compiled", b.compile))
             if on]
    return ", ".join(parts) or "-"


def per_gpu_tflops(r: Any) -> float | None:
    """Model TFLOP/s per GPU: the job's counted FLOPs per second over its GPUs."""
    ach = r.achieved_tflops() if r.ok else None
    return None if ach is None else ach / r.config.gpus


def strategy_table(records: Sequence[Any], peak_records: Sequence[Any] = ()) -> Table:
    """The strategy table of the LM scaling records among ``records``."""
    recs = lm_records(records)
    peaks = measured_peaks(peak_records)
    ones = {}
    for r in recs:
        if r.ok and r.config.gpus == 1:
            ones.setdefault((r.config.base.key(), r.config.strategy), r)
    rows = []
    for r in recs:
        c, b = r.config, r.config.base
        # A sequence's tokens: what the record counted (the model's default length if unset).
        seq = r.units_per_sample if r.ok else b.input_size
        label = (c.model, str(seq or "-"), b.precision, c.strategy, _levers(c),
                 str(c.gpus), str(b.batch_size))
        s = r.summary()
        if s is None:
            rows.append(label + (r.error_type or "error",) + ("-",) * 6)
            continue
        per_gpu = per_gpu_tflops(r)
        ds = meas = None
        if per_gpu is not None and (r.env or {}).get("accelerator") == "cuda":
            ds = datasheet_mfu(per_gpu, r.env, b.precision)[0]
            peak = peaks.get(device_key(r.env), {}).get(b.precision)
            meas = per_gpu / peak if peak else None
        one = ones.get((b.key(), c.strategy))
        factor = (f"{scaling_factor(s.throughput, one.summary().throughput):.2f}"
                  if one is not None and c.gpus > 1 else "-")
        mem = (r.memory or {}).get("allocated_peak_bytes")
        tokens = s.throughput * r.units_per_sample
        rows.append(label + (
            fmt_num(tokens), fmt_num(tokens / c.gpus), fmt_num(per_gpu, 3),
            "-" if ds is None else f"{ds:.1%}", "-" if meas is None else f"{meas:.1%}",
            "-" if not mem else f"{mem / 2**30:.1f}", factor + (
                f"; {'; '.join(flags(r))}" if flags(r) else "")))
    cols = ("model", "seq", "prec", "strategy", "levers", "GPUs", "batch/GPU", "tok/s",
            "tok/s/GPU", "TFLOP/s/GPU", "MFU (datasheet)", "MFU (measured)", "peak GiB (rank 0)",
            "x 1 GPU; flags")
    return Table("Language-model training by strategy", cols, tuple(rows), (
        "tok/s = all ranks' tokens over the slowest rank's window; TFLOP/s/GPU = the model's "
        "counted FLOPs (6N + 12LHT per token for the transformers LMs) per second per GPU; MFU "
        "against the GPU's datasheet dense peak and the measured matmul ceiling of the latest "
        "'dlbench peak' run on the device ('-': none, or a CPU); x 1 GPU = the factor over the "
        "same strategy at 1 GPU",))
