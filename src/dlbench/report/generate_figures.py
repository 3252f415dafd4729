"""What a ``generate`` record's figures need from outside the record: the device's peaks.

A record computes its own figures from its raw times (:mod:`dlbench.records.generate`); its
prefill MFU and its decode roofline fraction also need a peak, which comes from the spec table
(the datasheet) or from ``dlbench peak`` records of the same device (measured). This module
finds those peaks, says which one it used, and gathers a record's flags. Shared by the tables,
the charts and the CSV export, so all of them pick the same roof.

Pure: nothing here prints, and torch is imported only where a measured copy roof is read
(:func:`dlbench.measure.roofline.roofs_for`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from dlbench.measure.mfu import datasheet_mfu, device_key, measured_peaks
from dlbench.reference import spec_for_env
from dlbench.report.cards import card_uuids
from dlbench.report.flags import flags


def on_cpu(r: Any) -> bool:
    """Whether the record ran on the CPU (``--device cpu`` on a GPU host included)."""
    return r.config.device == "cpu" or (r.env or {}).get("accelerator") != "cuda"


def device_of(r: Any) -> str:
    """The device the record ran on, as the peak lookup keys it; a CPU run on a GPU host is
    its CPU, not the GPU its environment lists."""
    env = dict(r.env or {})
    return device_key({**env, "accelerator": "cpu"} if on_cpu(r) else env)


def _same_device(r: Any, peaks: Iterable[Any]) -> list[Any]:
    """The ok peak records of ``r``'s device, measured on the same side (CPU or GPU); of its
    very card where the store has a peak run of that card (cards of one model differ by about
    2%, and a roof from the card that ran is the one that bounds it)."""
    dev, cpu = device_of(r), on_cpu(r)
    sided = [p for p in peaks if getattr(p, "kind", None) == "peak" and p.ok
             and (p.config.device == "cpu") == cpu]
    card = card_uuids(r)[:1]
    # The very card, however many of its host's GPUs the peak run saw (it measures the first)
    mine = [p for p in sided if card and not cpu and card_uuids(p)[:1] == card]
    return mine or [p for p in sided if device_of_peak(p) == dev]


def device_of_peak(p: Any) -> str:
    """The device a peak record measured, keyed as :func:`device_of` keys a generate record."""
    env = dict(p.env or {})
    return device_key({**env, "accelerator": "cpu"} if p.config.device == "cpu" else env)


@dataclass(frozen=True)
class Roof:
    """A memory-bandwidth roof (GB/s, 1e9 bytes/s) and where it came from."""

    gbs: float
    source: str   # "measured" (a `dlbench peak` copy run) or "datasheet"
    detail: str   # the spec row's name, or the device measured

    @property
    def label(self) -> str:
        return f"{self.source} ({self.detail})"


def datasheet_roof(r: Any) -> Roof | None:
    """The GPU's datasheet memory bandwidth; None on the CPU or for a GPU the table lacks."""
    if on_cpu(r):
        return None
    spec, _ = spec_for_env(r.env or {})
    if spec is None or not spec.memory_bandwidth_gbs:
        return None
    return Roof(spec.memory_bandwidth_gbs, "datasheet", spec.name)


def bandwidth_roof(r: Any, peak_records: Sequence[Any] = ()) -> Roof | None:
    """The memory roof of ``r``'s device: the copy bandwidth of the latest ``dlbench peak`` run
    of that device among ``peak_records`` (as ``dlbench roofline`` takes it), else the
    datasheet's; None where there is neither (a CPU without a peak run)."""
    copies = [p for p in _same_device(r, peak_records) if p.config.verb == "copy"]
    if copies:
        # function-level: measure.roofline imports torch (dlbench --help stays light)
        from dlbench.measure.roofline import roofs_for
        # roofs_for keys a peak by its environment's device; on a GPU host a CPU peak's is the
        # GPU's, so it is asked for the key these copies (all of one device) have
        bw = roofs_for(device_key(copies[-1].env), None, copies).bandwidth_gbs
        if bw:
            return Roof(bw, "measured", device_of(r))
    return datasheet_roof(r)


@dataclass(frozen=True)
class PrefillMfu:
    """The prefill's counted TFLOP/s over the two peaks (fractions), None where there is none."""

    tflops: float | None
    datasheet: float | None
    measured: float | None
    why_not: str | None = None


def prefill_mfu(r: Any, peak_records: Sequence[Any] = ()) -> PrefillMfu:
    """Prefill MFU against the datasheet dense peak of the precision the record's matmuls run
    in (:attr:`~dlbench.records.generate.GenerateConfig.matmul_precision`: bf16 for weight-only
    fp8) and against the measured matmul ceiling of its device (the latest ``dlbench peak`` run
    among ``peak_records``). The datasheet has no CPU peaks; a measured CPU ceiling counts."""
    ach = r.prefill_tflops() if r.ok else None
    if ach is None:
        return PrefillMfu(None, None, None, "no prefill figure")
    prec = r.config.matmul_precision
    ds = why = None
    if on_cpu(r):
        why = "CPU: no datasheet peak table for CPUs"
    else:
        ds, _, why, _ = datasheet_mfu(ach, r.env or {}, prec)
    same = _same_device(r, peak_records)
    # measured_peaks keys by the environment's device (a GPU host's CPU peak: the GPU's)
    got = measured_peaks(same).get(device_key(same[-1].env), {}) if same else {}
    meas = ach / got[prec] if got.get(prec) else None
    return PrefillMfu(ach, ds, meas, why)


def generate_flags(r: Any) -> list[str]:
    """Why a generate figure deserves care: the throughput flags (noisy, time cap, spread,
    throttled, energy mismatch: :func:`dlbench.report.flags.flags`), no GPU telemetry on a GPU
    run (no energy figure), and what the run had to say (``notes``, where the record has them)."""
    if not r.ok:
        return []
    out = flags(r)
    gpus = (((r.telemetry or {}).get("summary") or {}).get("gpus")) or []
    if not on_cpu(r) and not gpus:
        out.append("no telemetry")
    return out + list(getattr(r, "notes", None) or ())

