"""Reference data shipped with dlbench: GPU datasheet figures and published results, each row
with its source, and the points of the ms-per-batch regression (speed on FP32 TFLOPS); the fit
through the origin itself is statistics and lives in :mod:`dlbench.measure.regression`. This
package is data: it imports nothing of dlbench above it.

``gpus.json`` holds one row per GPU: dense FP32 / TF32 / FP16 / BF16 / FP8 TFLOPS, memory
bandwidth and size, TDP, and the document each figure comes from. ``results.json`` holds every
table of three published studies, one value per row, each row naming its source by what it
is: the 2020 tf_cnn_benchmarks study on 4x Quadro RTX 8000 (``tf-cnn-benchmarks``), the 2022
RTX 3060 article's ms per batch of the classic per-model scripts (``ms-per-batch``), and the
2019 PyTorch vs Keras CIFAR-10 study on 2x RTX 2080 Ti (``cifar10-frameworks``), the names
``dlbench gpus --source`` takes. A former id (a script's from before 2026-11) is mapped by
:mod:`dlbench.records.compat`, a layer above, before anything is asked of this package.

The RTX 3060 article's VGG16 analysis, reproduced by :mod:`dlbench.measure.regression`: speed =
1000 / (ms per batch) against FP32 TFLOPS for the six FP32 rows of the article (Titan V, 1080 Ti,
V100, 2080 Ti, T4, RTX 3060; the FP16 rows of the RTX 3060 and MX250 measure another thing and are
left out), a least-squares line through the origin, R^2 uncentred (1 - SSR / sum y^2, the R^2 of a
fit without intercept, as spreadsheets report it). With the spec table's FP32 figures (datasheet or
TechPowerUp's clock-derived ones; the article used a "GPU database") that gives R^2 = 0.984 for
both eval and train, the article's figure, when the V100 is the SXM2 part (15.7 TFLOPS); with the
V100 PCIe (14.0) it is 0.976 (eval) and 0.974 (train). The centred R^2 of the same fit is only
about 0.80: six points, all far from the origin, say less than 0.984 suggests. The article does not
name the V100 variant; the SXM2 row is the one that reproduces it, so the shipped V100 results
point at it (``gpu_id: v100-sxm2``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, Mapping

from dlbench import env as envmod

PRECISIONS = ("fp32", "tf32", "fp16", "bf16", "fp8")


@dataclass(frozen=True)
class GpuSpec:
    """One datasheet row. TFLOPS are dense; None where the part has no such unit or no source."""

    id: str
    name: str
    vendor: str
    architecture: str
    year: int
    match: tuple[str, ...]
    fp32_tflops: float | None
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp8_tflops: float | None
    memory_bandwidth_gbs: float | None
    memory_gb: float | None
    tdp_w: float | None
    source: str
    note: str | None = None

    def tflops(self, precision: str) -> float | None:
        """Dense peak for ``precision`` (fp32 = non-tensor FP32, others = tensor cores)."""
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
        return getattr(self, f"{precision}_tflops")


@dataclass(frozen=True)
class ReferenceResult:
    source: str
    device: str
    gpu_id: str | None
    gpus: int
    framework: str
    model: str
    mode: str
    metric: str
    value: float
    precision: str | None = None
    batch_size: int | None = None
    setup: str | None = None
    note: str | None = None


def _load(name: str) -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath(name).read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def gpu_specs() -> tuple[GpuSpec, ...]:
    """Every row of the spec table."""
    return tuple(GpuSpec(**{**row, "match": tuple(row["match"])}) for row in _load("gpus.json")["gpus"])


def spec_by_id(gpu_id: str) -> GpuSpec:
    for s in gpu_specs():
        if s.id == gpu_id:
            return s
    raise KeyError(f"no GPU {gpu_id!r} in the spec table; known: {', '.join(s.id for s in gpu_specs())}")


def match_gpu(name: str | None) -> GpuSpec | None:
    """The spec row for a device name as torch or NVML reports it, or None when unknown.

    Each row lists lower-case fragments; the longest fragment found in the name wins, so
    "NVIDIA H100 PCIe" is the PCIe part and "NVIDIA H100 80GB HBM3" the SXM one. A name
    such as "H100 NVL" that no fragment matches is unknown (None), never a guess.
    """
    if not name:
        return None
    low = name.lower()
    best: tuple[int, GpuSpec] | None = None
    for s in gpu_specs():
        for frag in s.match:
            if frag in low and (best is None or len(frag) > best[0]):
                best = (len(frag), s)
    if best is not None and best[1].id == "rtx-3060" and "3060 ti" in low:
        return None  # a different part with more cores
    return None if best is None else best[1]


def _gpu_name(env: Mapping[str, Any]) -> str | None:
    """The name of a record's (first) GPU, as its environment holds it."""
    gpus = env.get("gpus") or []
    return str(gpus[0].get("name")) if gpus and gpus[0].get("name") else None


def spec_for_env(env: Mapping[str, Any]) -> tuple[GpuSpec | None, str | None]:
    """The spec row of the record's (first) GPU, or None and why."""
    if env.get("accelerator") != "cuda":
        return None, "CPU: no datasheet peak table for CPUs"
    name = _gpu_name(env)
    spec = match_gpu(name)
    if spec is None:
        return None, f"GPU {name or 'unknown'!r} is not in the spec table"
    return spec, None


@functools.lru_cache(maxsize=None)
def sources() -> dict[str, dict[str, str]]:
    return _load("results.json")["sources"]


@functools.lru_cache(maxsize=None)
def reference_results() -> tuple[ReferenceResult, ...]:
    return tuple(ReferenceResult(**row) for row in _load("results.json")["results"])


def select(results: Iterable[ReferenceResult] | None = None, **where: Any) -> list[ReferenceResult]:
    """Rows whose fields equal every given value
    (``select(source="ms-per-batch", model="vgg16")``: the ms-per-batch table's VGG16 rows)."""
    rows = reference_results() if results is None else results
    return [r for r in rows if all(getattr(r, k) == v for k, v in where.items() if v is not None)]


@dataclass(frozen=True)
class FitPoint:
    label: str
    x_tflops: float
    y_speed: float      # per second: 1000 / ms per batch, or throughput
    own: bool = False   # measured by this user, not published


def own_point(record: Any, x_precision: str = "fp32") -> FitPoint | None:
    """A user's FP32 throughput result as a point beside the published ms-per-batch ones: its
    GPU's datasheet TFLOPS and their speed, batches of 16 per second (other batch sizes scaled to
    16 samples).
    None for a failure, another precision, or a device the spec table does not know."""
    s = record.summary() if record.ok else None
    if s is None or record.config.precision != "fp32":
        return None
    spec, _ = spec_for_env(record.env)
    if spec is None or not spec.tflops(x_precision):
        return None
    c = record.config
    return FitPoint(f"{envmod.device_label(record.env)} (yours, b{c.batch_size}, {c.method})",
                    spec.tflops(x_precision), s.throughput / 16.0, own=True)


def speed_of(r: ReferenceResult) -> float:
    """A "faster is larger" figure: 1/time for times, the value itself for rates."""
    if r.metric == "ms_per_batch":
        return 1000.0 / r.value
    if r.metric.endswith("_per_s"):
        return r.value
    raise ValueError(f"metric {r.metric!r} is not a speed")


def reference_points(model: str, mode: str, precision: str = "fp32",
                     source: str = "ms-per-batch", x_precision: str = "fp32") -> list[FitPoint]:
    """Published single-GPU rows of ``model``/``mode`` as (spec TFLOPS, speed) points."""
    pts = []
    for r in select(source=source, model=model, mode=mode, precision=precision, gpus=1):
        spec = spec_by_id(r.gpu_id) if r.gpu_id else None
        x = spec.tflops(x_precision) if spec else None
        if x:
            pts.append(FitPoint(f"{r.device} ({spec.name})", x, speed_of(r)))
    return pts
