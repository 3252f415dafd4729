"""The roofline: arithmetic intensity of each model and mode, and the device's two roofs.

Arithmetic intensity (AI) = FLOPs of a step / bytes the step moves to and from device memory.
FLOPs are counted (``measure.flops``). Bytes come from a stated model, not a profiler, so they
are the same on every device and can be computed on the meta device in a second:

- ``W`` = parameter bytes (fp32 master weights, 4 bytes each, also under autocast);
- ``A`` = activation bytes of the step: the output elements of every leaf module, counted with
  forward hooks on the meta device, times the batch, times 2 bytes (fp16/bf16) or 4 (fp32/tf32);
- eval moves ``W + 2A``: every weight is read once, every activation written once and read once;
- train moves ``3W + 4A``: weights read in the forward and the backward pass and their gradients
  written; activations written and read in the forward pass, then the saved activation read and
  its gradient written once in the backward pass. The optimizer step is not counted (as in FLOPs).

This is a lower bound of the real traffic (no re-reads by kernels whose tiles do not fit in
cache, no workspace, no autocast weight copies), so the AI is an upper bound, which is the safe
side for the question the roofline answers: is this model memory-bound on this device? A model
whose upper-bound AI sits left of the ridge point is memory-bound for certain.

The roofs: compute = the ceiling ``dlbench peak`` measured for the precision (the datasheet
peak where none was measured); bandwidth = the measured device copy bandwidth (the datasheet's
where none was measured). Attainable TFLOP/s at intensity I = min(compute, I x bandwidth).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import torch

from dlbench.measure.flops import params_count
from dlbench.measure.mfu import device_key, measured_peaks
from dlbench.models import ModelSpec, get_model
from dlbench.reference import spec_for_env


@functools.lru_cache(maxsize=None)
def activation_elements(spec: ModelSpec, mode: str = "eval", input_size: int | None = None) -> int:
    """Output elements of every leaf module per sample (forward pass), counted on meta."""
    size = input_size or spec.input_size
    batch = 2
    total = 0

    def hook(_m: Any, _i: Any, out: Any) -> None:
        nonlocal total
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor):
                total += t.numel()

    with torch.device("meta"):
        model = spec.build(size)
    handles = [m.register_forward_hook(hook) for m in model.modules()
               if not any(True for _ in m.children())]
    inputs, _ = spec.make_batch(batch, torch.device("meta"), size)
    model.train(mode == "train")
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return total // batch


def element_bytes(precision: str) -> int:
    return 2 if precision in ("fp16", "bf16") else 1 if precision == "fp8" else 4


def bytes_per_step(spec: ModelSpec, mode: str, precision: str, batch: int,
                   input_size: int | None = None) -> float:
    """Bytes a step moves under the model stated in this module's docstring."""
    w = 4.0 * params_count(spec)
    a = float(activation_elements(spec, mode, input_size)) * batch * element_bytes(precision)
    return w + 2 * a if mode == "eval" else 3 * w + 4 * a


def intensity(flops_per_step: float, nbytes: float) -> float:
    """FLOP per byte."""
    return flops_per_step / nbytes


def attainable(ai: float, compute_tflops: float, bandwidth_gbs: float) -> float:
    """The roof at intensity ``ai`` (FLOP/byte), in TFLOP/s."""
    return min(compute_tflops, ai * bandwidth_gbs / 1e3)


def ridge(compute_tflops: float, bandwidth_gbs: float) -> float:
    """The intensity where the two roofs meet (FLOP/byte)."""
    return compute_tflops * 1e3 / bandwidth_gbs


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    precision: str
    mode: str
    intensity: float          # FLOP/byte
    achieved_tflops: float
    bound: str | None = None  # "memory" or "compute" against the roofs, when known


@dataclass(frozen=True)
class Roofs:
    device: str
    compute_tflops: dict[str, float]      # precision -> TFLOP/s
    bandwidth_gbs: float | None
    source: str                           # "measured", "datasheet" or a mix, said in words


def point_for(record: Any, roofs: Roofs | None = None) -> RooflinePoint | None:
    """The roofline point of a ThroughputRecord (None for a failure or uncounted FLOPs)."""
    ach = record.achieved_tflops() if record.ok else None
    if ach is None:
        return None
    c = record.config
    spec = get_model(c.model)
    nbytes = bytes_per_step(spec, c.mode, c.precision, c.batch_size, c.input_size)
    ai = intensity(record.flops_per_sample * c.batch_size, nbytes)
    bound = None
    if roofs and roofs.bandwidth_gbs and c.precision in roofs.compute_tflops:
        bound = ("memory" if ai < ridge(roofs.compute_tflops[c.precision], roofs.bandwidth_gbs)
                 else "compute")
    return RooflinePoint(f"{c.model} {c.mode} b{c.batch_size}", c.precision, c.mode, ai, ach, bound)


def roofs_for(device: str, env: Mapping[str, Any] | None, peak_records: Iterable[Any]) -> Roofs:
    """Roofs of ``device`` from its latest peak run; datasheet figures fill what is missing."""
    recs = list(peak_records)
    compute = dict(measured_peaks(recs).get(device, {}))
    bw = None
    last_run = None
    for r in recs:
        if r.config.verb == "copy" and r.ok and device_key(r.env) == device:
            if r.run_id != last_run:
                last_run, bw = r.run_id, None
            bw = max(bw or 0.0, r.median())
    parts = ["measured"] if compute or bw else []
    if env is not None:
        spec, _ = spec_for_env(env)
        if spec is not None:
            filled = False
            for p in ("fp32", "tf32", "fp16", "bf16", "fp8"):
                if p not in compute and spec.tflops(p):
                    compute[p] = spec.tflops(p)
                    filled = True
            if bw is None and spec.memory_bandwidth_gbs:
                bw = spec.memory_bandwidth_gbs
                filled = True
            if filled:
                parts.append(f"datasheet ({spec.name})")
    return Roofs(device, compute, bw, " + ".join(parts) or "none")
