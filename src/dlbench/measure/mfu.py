"""Model FLOPs utilisation: achieved TFLOP/s over a peak, against two peaks.

(a) the datasheet: the dense peak of the GPU's spec row for the run's precision (fp32 = the
non-tensor FP32 peak, because dlbench's fp32 turns TF32 off; tf32 = the TF32 tensor peak; fp16
and bf16 = the dense tensor peak; autocast runs most FLOPs of a step in that type); (b) the
matmul ceiling ``dlbench peak`` measured for that precision (:func:`pick_ceiling`): of the card
the result ran on where the store has one (matched by the GPU's UUID), else of a card of the
same model (matched by the GPU's name as the environment records it); of a sustained sweep (the
best per-shape mean after a device warm-up) before a burst one (the best per-shape median of
short windows with no warm-up, which can sit above what the card sustains); the latest run of
that method. The MFU says whose ceiling
it used where it is not the card's own sustained one (:attr:`Ceiling.note`).

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
class Ceiling:
    """A measured matmul ceiling picked as the roof of a result's MFU, and where it came from."""

    tflops: float
    precision: str
    method: str                       # sustained (best per-shape mean) or burst (best median)
    run_id: str | None
    model: str                        # the GPU's name (the CPU's label) it measured
    card: str | None = None           # UUID of the card it measured; None: a CPU, or unrecorded
    same_card: bool | None = None     # the result's own card; None: a UUID is not recorded

    @property
    def note(self) -> str | None:
        """What a reader of the MFU must know of this roof; None for the result's own card's
        sustained ceiling."""
        parts = [] if self.method == "sustained" else ["burst (no warm-up, short windows)"]
        if self.same_card is False:
            parts.append(f"another card's ({short_card(self.card)})")
        elif self.same_card is None:
            parts.append(f"of an unrecorded card ({self.model})")
        if not parts:
            return None
        return f"measured peak: {', '.join(parts)}; run {self.run_id}"


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
    ceiling: Ceiling | None = None    # the measured peak and its source, where it was picked

    @property
    def notes(self) -> list[str]:
        """Why an MFU is missing, and whose ceiling the measured one is against where that
        is not the card's own sustained one; each once."""
        why = (self.datasheet_reason, self.measured_reason, self.ceiling and self.ceiling.note)
        return list(dict.fromkeys(w for w in why if w))


def short_card(uuid: str | None) -> str:
    """A GPU UUID as the pages name a card (``GPU-3563e156``)."""
    return (uuid or "unrecorded")[:12]


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


def _matmuls(peak_records: Iterable[Any]) -> list[Any]:
    return [r for r in peak_records
            if getattr(r, "kind", None) == "peak" and r.config.verb == "matmul" and r.ok]


def _method(r: Any) -> str:
    """A peak record's method; ``burst`` for one stored before methods existed."""
    return getattr(r.config, "method", "burst")


def _latest(matmuls: list[Any]) -> dict[str, tuple[float, Any]]:
    """precision -> (ceiling TFLOP/s, a record of the run that set it), over matmul records of
    one device in store order (oldest first): the latest burst run's ceilings (best per-shape
    median), replaced precision by precision by the latest sustained run's (best per-shape
    mean). A later run of a method replaces an earlier one as a whole, so a quick run does not
    mix with a full one."""
    out: dict[str, tuple[float, Any]] = {}
    for method in ("burst", "sustained"):  # sustained last: it wins where it measured
        mine = [r for r in matmuls if _method(r) == method]
        if not mine:
            continue
        last = mine[-1].run_id
        run: dict[str, tuple[float, Any]] = {}
        for r in mine:
            if r.run_id == last and r.ceiling_rate() > run.get(r.config.precision, (0.0,))[0]:
                run[r.config.precision] = (r.ceiling_rate(), r)
        out.update(run)
    return out


def measured_peaks(peak_records: Iterable[Any]) -> dict[str, dict[str, float]]:
    """device key -> precision -> ceiling TFLOP/s: per device, the latest sustained peak run's
    ceilings, and for precisions it lacks the latest burst run's (see :func:`_latest`).

    ``peak_records`` are PeakRecords in store order (oldest first).
    """
    by_dev: dict[str, list[Any]] = {}
    for r in _matmuls(peak_records):
        by_dev.setdefault(device_key(r.env), []).append(r)
    return {dev: {p: v for p, (v, _) in _latest(recs).items()} for dev, recs in by_dev.items()}


def device_index(device: str | None) -> int:
    """``cuda:3`` -> 3; ``auto``/``cuda`` -> 0 (the first visible GPU, which env lists first)."""
    if device and device.startswith("cuda:"):
        try:
            return int(device.split(":", 1)[1])
        except ValueError:
            return 0
    return 0


def _on_cpu(env: Mapping[str, Any], device: str | None) -> bool:
    return device == "cpu" or env.get("accelerator") != "cuda"


def card_of(env: Mapping[str, Any], device: str | None) -> tuple[str | None, str | None]:
    """(UUID, name) of the GPU a record's ``device`` is in its environment; (None, the CPU's
    label) on the CPU (a CPU run on a GPU host included). A UUID is None where the
    environment has none (records older than its capture)."""
    if _on_cpu(env, device):
        return None, device_key({**env, "accelerator": "cpu"})
    gpus = env.get("gpus") or []
    i = device_index(device)
    gpu = gpus[i] if i < len(gpus) else {}
    return gpu.get("uuid"), gpu.get("name") or device_key(env)


def pick_ceiling(record: Any, peak_records: Iterable[Any],
                 precision: str | None = None) -> Ceiling | None:
    """The measured matmul ceiling of ``precision`` (default: the record's) for ``record``:
    of the card it ran on where ``peak_records`` have one (its GPU's UUID), else of a card of
    the same model (its GPU's name as the environment records it; on the CPU, the CPU's
    label); within each, the latest sustained run before the latest burst one. None where
    neither has one. The result says which it is (:attr:`Ceiling.note`)."""
    prec = precision or record.config.precision
    env = record.env or {}
    device = getattr(record.config, "device", "auto")
    uuid, name = card_of(env, device)
    cpu = _on_cpu(env, device)
    mine = [p for p in _matmuls(peak_records) if p.config.precision == prec
            and _on_cpu(p.env or {}, p.config.device) == cpu]
    cards = {id(p): card_of(p.env or {}, p.config.device) for p in mine}
    own = [p for p in mine if uuid and cards[id(p)][0] == uuid]
    got = _latest(own).get(prec) or _latest([p for p in mine if cards[id(p)][1] == name]).get(prec)
    if got is None:
        return None
    tflops, p = got
    card, model = cards[id(p)]
    # a CPU has no UUID: its label is all there is to match, and the only match
    same = True if cpu else (card == uuid if card and uuid else None)
    return Ceiling(tflops, prec, _method(p), p.run_id, str(model), card, same)


def mfu(record: Any, peaks: Mapping[str, Mapping[str, float]] | None = None, *,
        peak_records: Iterable[Any] | None = None) -> Mfu:
    """Both MFUs of a ThroughputRecord. The measured peak comes from ``peak_records`` (stored
    ``dlbench peak`` records) by :func:`pick_ceiling`, which says whose ceiling it is; or, from
    callers that picked it themselves, from ``peaks`` (:func:`measured_peaks`' mapping, keyed
    by the record's device)."""
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
    meas = meas_peak = ceiling = None
    dev = device_key(record.env)
    if peak_records is not None:
        ceiling = pick_ceiling(record, peak_records, prec)
        got = {prec: ceiling.tflops} if ceiling else {}
    else:
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
    return Mfu(ach, ds, ds_peak, ds_why, meas, meas_peak, meas_why, gpu, ceiling)
