"""Model FLOPs utilisation: achieved TFLOP/s over a peak, against two peaks.

(a) the datasheet: the dense peak of the GPU's spec row for the run's precision (fp32 = the
non-tensor FP32 peak, because dlbench's fp32 turns TF32 off; tf32 = the TF32 tensor peak; fp16
and bf16 = the dense tensor peak; autocast runs most FLOPs of a step in that type); (b) the
ceiling ``dlbench peak`` measured on the same device: the largest median matmul rate of that
precision in the latest peak run of that device in the store.

Each MFU is None, with the reason, where the figure would mislead: no counted FLOPs, a failed
result, a datasheet MFU on a CPU (there is no table of CPU peaks), a GPU the spec table does not
know, a precision the part has no peak for, or no measured peak of that precision on that device.
Achieved FLOPs are model FLOPs (counted, optimizer excluded), so MFU is below the hardware
utilisation: element-wise work is done but not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from dlbench import env as envmod
from dlbench.reference import spec_for_env


@dataclass(frozen=True)
class Mfu:
    achieved_tflops: float | None
    datasheet: float | None           # fraction, e.g. 0.31
    datasheet_peak_tflops: float | None
    datasheet_reason: str | None      # why datasheet is None
    measured: float | None
    measured_peak_tflops: float | None
    measured_reason: str | None
    gpu: str | None = None            # spec row used


def device_key(env: Mapping[str, Any]) -> str:
    """The device a record ran on, as the peak lookup keys it (the label of its environment)."""
    return envmod.device_label(dict(env))


def datasheet_mfu(achieved_tflops: float, env: Mapping[str, Any],
                  precision: str) -> tuple[float | None, float | None, str | None, str | None]:
    """(mfu, peak, reason, spec id) against the datasheet."""
    spec, why = spec_for_env(env)
    if spec is None:
        return None, None, why, None
    try:
        peak = spec.tflops(precision)
    except ValueError as exc:
        return None, None, str(exc), spec.id
    if not peak:
        why = f"{spec.name} has no {precision} peak in the spec table ({spec.note or 'none listed'})"
        return None, None, why, spec.id
    return achieved_tflops / peak, peak, None, spec.id


def measured_peaks(peak_records: Iterable[Any]) -> dict[str, dict[str, float]]:
    """device key -> precision -> ceiling TFLOP/s, from the latest peak run of each device.

    ``peak_records`` are PeakRecords in store order (oldest first); a later run of a device
    replaces an earlier one as a whole, so a quick run does not mix with a full one.
    """
    runs: dict[str, str | None] = {}
    by_run: dict[tuple[str, str | None], dict[str, float]] = {}
    for r in peak_records:
        if getattr(r, "kind", None) != "peak" or r.config.verb != "matmul" or not r.ok:
            continue
        dev = device_key(r.env)
        runs[dev] = r.run_id  # last one wins: records come oldest first
        d = by_run.setdefault((dev, r.run_id), {})
        d[r.config.precision] = max(d.get(r.config.precision, 0.0), r.median())
    return {dev: by_run[(dev, run)] for dev, run in runs.items()}


def mfu(record: Any, peaks: Mapping[str, Mapping[str, float]] | None = None) -> Mfu:
    """Both MFUs of a ThroughputRecord; ``peaks`` from :func:`measured_peaks`."""
    ach = record.achieved_tflops() if record.ok else None
    if ach is None:
        why = (f"failed result ({record.error_type})" if not record.ok
               else "no counted FLOPs for this model")
        return Mfu(None, None, None, why, None, None, why)
    if getattr(record.config, "device", "auto") == "cpu":
        # Run on the CPU of a GPU machine: the environment names the GPU, whose peaks say
        # nothing about this result.
        why = "CPU: no datasheet peak table for CPUs"
        return Mfu(ach, None, None, why, None, None, why)
    prec = record.config.precision
    ds, ds_peak, ds_why, gpu = datasheet_mfu(ach, record.env, prec)
    meas = meas_peak = None
    dev = device_key(record.env)
    got = (peaks or {}).get(dev, {})
    if prec in got and got[prec] > 0:
        meas_peak = got[prec]
        meas = ach / meas_peak
        meas_why = None
    else:
        meas_why = f"no measured {prec} peak for {dev}; run 'dlbench peak'"
    if (ds or 0) > 1 or (meas or 0) > 1:
        # Not a timing error: model FLOPs count a convolution as the direct product, and the
        # Winograd and FFT algorithms cuDNN may pick do fewer operations (seen: VGG-16 in true
        # fp32 on an H100 at 103% of the measured fp32 matmul ceiling). Kept, and said.
        note = ("above 100%: the convolution algorithms (Winograd/FFT) do fewer operations than "
                "the model's counted FLOPs")
        ds_why = ds_why or (note if (ds or 0) > 1 else None)
        meas_why = meas_why or note
    return Mfu(ach, ds, ds_peak, ds_why, meas, meas_peak, meas_why, gpu)
