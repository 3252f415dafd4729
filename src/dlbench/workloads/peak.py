"""Device ceilings: matmul TFLOP/s, memory bandwidth, host<->device and GPU<->GPU transfers.

Learned from ml-engineering's mamf-finder (Maximum Achievable Matmul FLOPS): the operands are
random (never zeros: some GPUs draw less power and clock higher on zeros), the L2 cache is
flushed between iterations by writing a buffer larger than it, so every iteration reads its
operands from device memory, and a grid of shapes is swept because the best shape is not known
in advance (tile and wave quantization). On a GPU each iteration is timed by a pair of CUDA
events around the operation alone (the flush is outside the pair) and the events are read once,
after the last iteration; on the CPU ``perf_counter`` brackets each iteration.

A matmul point is timed by one of two methods (:data:`dlbench.records.peak.METHODS`):

- ``sustained`` (the default), as mamf-finder measures: the sweep of each precision opens with
  a fixed-length device warm-up, a large product of that precision run back to back (30 s on a
  GPU), so clocks and temperature are at steady state before anything is timed; then every
  shape runs a few untimed iterations and a fixed number of timed ones (100 on a GPU). Each
  shape reports its mean and median; the ceiling is the best per-shape mean.
- ``burst`` (dlbench's method before sustained, kept so that its stored figures keep their
  meaning): no device warm-up; each shape is timed for a short adaptive window (about 0.1 s on
  the grid); the ceiling is the best per-shape median.

Memory and transfer points are timed the burst way under either method. Nothing is printed and
nothing is written: each function returns a ``PeakRecord``.
"""

from __future__ import annotations

import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, replace
from itertools import product
from typing import Callable, Iterator

import torch

from dlbench.records.base import ErrorType
from dlbench.records.peak import METHODS, PeakConfig, PeakRecord

MIB = 2 ** 20

DTYPES = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16,
          "bf16": torch.bfloat16}


#: The grid of a GPU's tensor-core precisions, as mamf-finder sweeps one (M, N and K ranges
#: around large sizes, every shape timed): the best shape depends on how the output tiles fill
#: the SMs in whole waves, which is not known in advance, so a sweep finds it.
GRID_MN = (4096, 6144, 8192, 12288, 16384)
GRID_K = (2048, 4096, 8192)
#: The best bf16 shape an H100 SXM showed in a published MAMF-style search (792.1 TFLOP/s,
#: github.com/mag-/gpu_benchmark, after ml-engineering's mamf-finder): swept too.
#: Then the best bf16 shape of the H100 SXM in ml-engineering's own table, 794.5 TFLOP/s, the
#: mean of 100 iterations after 50 warm-up iterations (mamf-finder, torch 2.7.0+cu126;
#: github.com/stas00/ml-engineering, compute/accelerator/README.md, "Maximum Achievable Matmul
#: FLOPS comparison table"): the sustained grid sweeps both.
PUBLISHED_BEST = ((6144, 17920, 2816), (2048, 2048, 13312))
#: Precisions the grid is swept in; fp32 and tf32 keep the five shapes of ``PeakPlan.shapes``
#: (each of their products takes 10-40 ms: a grid of them would take minutes).
GRID_PRECISIONS = ("bf16", "fp16", "fp8")

#: The sustained grid covers mamf-finder's shape space more widely, coarser than its searches
#: (which step M, N and K by 256 to 1024 from 0 to 16384-20480): M and N from 2048 up, and K up
#: to 16384, where the long-K shapes it found best on Hopper lie (2048x2048x13312 bf16,
#: 1024x9216x14336 fp8 on an H100). 442 shapes; the FLOPs of one iteration of each sum to 0.48
#: PFLOP, so 110 iterations a shape take about 70 s at 750 TFLOP/s (:func:`sweep_estimate_s`).
SUSTAINED_MN = (2048, 3072, 4096, 6144, 8192, 12288, 16384)
SUSTAINED_K = (2048, 4096, 6144, 8192, 10240, 12288, 13312, 14336, 16384)

#: The bf16 rate the duration of a sustained sweep is estimated at: an H100's, roughly (its
#: measured burst ceilings were 794-818, mamf-finder's sustained figure 794.5). An estimate
#: for ``--help``, not a measurement.
ESTIMATE_TFLOPS = 750.0


def mamf_grid() -> tuple[tuple[int, int, int], ...]:
    """The burst grid: every (M, N, K) of GRID_MN x GRID_MN x GRID_K, then the first published
    best shape. The burst figures dlbench published were measured on these 76 shapes; the
    shapes added since are swept by the sustained grid."""
    return tuple(product(GRID_MN, GRID_MN, GRID_K)) + PUBLISHED_BEST[:1]


def sustained_grid() -> tuple[tuple[int, int, int], ...]:
    """The sustained grid: every (M, N, K) of SUSTAINED_MN x SUSTAINED_MN x SUSTAINED_K, then
    every published best shape the product lacks."""
    return tuple(dict.fromkeys(tuple(product(SUSTAINED_MN, SUSTAINED_MN, SUSTAINED_K))
                               + PUBLISHED_BEST))


@dataclass(frozen=True)
class PeakPlan:
    """The points of one ``dlbench peak`` run and how long each is measured.

    ``shapes`` are the matmul shapes of every precision; ``grid`` replaces them for the
    precisions in ``grid_precisions`` (the tensor-core ones, whose ceiling is the headline).
    ``method`` says how its matmuls are timed: ``burst`` by the adaptive window (``warmup``,
    ``min_iters`` to ``max_iters``, about ``target_s``), which memory and transfer points
    always use; ``sustained`` by a device warm-up of ``warmup_s`` on a ``warmup_shape`` product
    opening each precision's sweep, then ``shape_warmup`` untimed and ``iters`` timed
    iterations a shape.
    """

    shapes: tuple[tuple[int, int, int], ...]
    memory_bytes: int
    transfer_bytes: int
    warmup: int = 3
    min_iters: int = 5
    max_iters: int = 50
    target_s: float = 0.3           # measured time per point, roughly
    grid: tuple[tuple[int, int, int], ...] = ()
    grid_precisions: tuple[str, ...] = ()
    grid_target_s: float = 0.1      # measured time per grid point: many points, each short
    method: str = "burst"
    warmup_s: float = 0.0           # sustained: device warm-up opening each precision's sweep
    warmup_shape: tuple[int, int, int] = (8192, 8192, 8192)
    shape_warmup: int = 10          # sustained: untimed iterations a shape, after the warm-up
    iters: int = 100                # sustained: timed iterations a shape

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {self.method!r}")

    def shapes_for(self, precision: str) -> tuple[tuple[int, int, int], ...]:
        return self.grid if self.grid and precision in self.grid_precisions else self.shapes

    def target_for(self, cfg: PeakConfig) -> float:
        on_grid = cfg.verb == "matmul" and cfg.precision in self.grid_precisions and self.grid
        return self.grid_target_s if on_grid else self.target_s

    def opens_sweep(self, cfg: PeakConfig) -> bool:
        """Whether ``cfg`` is the first shape of a sustained sweep of its precision: the point
        the device warm-up comes before. A run measures its points in plan order
        (:func:`plan_points`), so the warm-up precedes every timed shape of the precision."""
        return (cfg.verb == "matmul" and cfg.method == "sustained"
                and cfg.shape == self.shapes_for(str(cfg.precision))[0])


#: The sustained timing per kind of run, (on a GPU, quick) -> the plan's fields. A GPU warms up
#: for 30 s as mamf-finder does, then times 100 iterations a shape, as mamf-finder reports
#: them (after 10 untimed ones, where it runs 50: the device is already warm). A CPU warms up
#: for 2 s (its clock ramps up in milliseconds; a thermal steady state would take minutes) and
#: times 10 iterations a shape: its largest fp32 product (a 2048 cube) takes tenths of a second
#: or more, so 100 would make the run minutes long. ``--quick`` keeps every kind at seconds.
SUSTAINED_TIMING = {
    (True, False): dict(warmup_s=30.0, warmup_shape=(8192, 8192, 8192), shape_warmup=10,
                        iters=100),
    (True, True): dict(warmup_s=1.0, warmup_shape=(4096, 4096, 4096), shape_warmup=2, iters=10),
    (False, False): dict(warmup_s=2.0, warmup_shape=(1024, 1024, 1024), shape_warmup=1,
                         iters=10),
    (False, True): dict(warmup_s=0.25, warmup_shape=(256, 256, 256), shape_warmup=1, iters=5),
}


def default_plan(device: torch.device, quick: bool = False,
                 method: str = METHODS[0]) -> PeakPlan:
    """Shapes, sizes and timing. On a GPU, a MAMF-style grid of matmuls for the tensor-core
    precisions (sustained: :func:`sustained_grid`, 442 shapes, about 100 s each precision on an
    H100 by :func:`sweep_estimate_s`; burst: :func:`mamf_grid`, 76 shapes, about 5 s) and five
    large shapes for fp32 and tf32; buffers far larger than any L2 (1 GiB). ``quick`` is for
    tests and smoke runs."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, not {method!r}")
    plan = _burst_plan(device, quick)
    if method == "burst":
        return plan
    return replace(plan, method=method, grid=sustained_grid() if plan.grid else (),
                   **SUSTAINED_TIMING[(device.type == "cuda", quick)])


def sweep_estimate_s(plan: PeakPlan, precision: str, tflops: float = ESTIMATE_TFLOPS) -> float:
    """Seconds a sustained sweep of ``precision`` should take at ``tflops``: the device warm-up
    and every shape's iterations, the products alone (allocations and launches uncounted). An
    estimate for ``--help``, never a figure."""
    flops = sum(2.0 * m * n * k for m, n, k in plan.shapes_for(precision))
    return plan.warmup_s + (plan.shape_warmup + plan.iters) * flops / (tflops * 1e12)


def _burst_plan(device: torch.device, quick: bool) -> PeakPlan:
    """The burst plan of a device: dlbench peak's shapes, sizes and timing before sustained."""
    if device.type == "cuda":
        if quick:
            return PeakPlan(shapes=((2048, 2048, 2048), (4096, 4096, 4096)), memory_bytes=256 * MIB,
                            transfer_bytes=64 * MIB, warmup=2, min_iters=5, max_iters=20, target_s=0.1)
        return PeakPlan(shapes=((4096, 4096, 4096), (8192, 8192, 8192), (8192, 8192, 16384),
                                (16384, 8192, 8192), (6144, 12288, 8192)),
                        memory_bytes=1024 * MIB, transfer_bytes=256 * MIB, min_iters=10,
                        grid=mamf_grid(), grid_precisions=GRID_PRECISIONS)
    if quick:
        return PeakPlan(shapes=((128, 128, 128), (256, 256, 256)), memory_bytes=16 * MIB,
                        transfer_bytes=0, warmup=1, min_iters=3, max_iters=10, target_s=0.05)
    return PeakPlan(shapes=((512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048)),
                    memory_bytes=256 * MIB, transfer_bytes=0, target_s=0.5)


def supported_precisions(device: torch.device) -> dict[str, str | None]:
    """precision -> None when the device can multiply in it, else why not."""
    out: dict[str, str | None] = {}
    if device.type == "cpu":
        for p in ("fp32", "bf16"):
            out[p] = None
        out["tf32"] = "tf32 is a mode of NVIDIA tensor cores; the CPU has none"
        out["fp16"] = "fp16 matmul on the CPU is emulated in most builds: not a ceiling"
        out["fp8"] = "fp8 matmul needs an NVIDIA GPU of compute capability 8.9 or newer"
        return out
    major, minor = torch.cuda.get_device_capability(device)
    out["fp32"] = None
    out["fp16"] = None
    out["tf32"] = None if major >= 8 else f"tf32 needs Ampere (sm_80) or newer; this is sm_{major}{minor}"
    out["bf16"] = (None if torch.cuda.is_bf16_supported(including_emulation=False)
                   else f"no native bf16 on sm_{major}{minor}")
    out["fp8"] = (None if (major, minor) >= (8, 9) and hasattr(torch, "float8_e4m3fn")
                  and hasattr(torch, "_scaled_mm")
                  else f"fp8 needs sm_89 or newer and torch._scaled_mm; this is sm_{major}{minor}")
    return out


@contextmanager
def _tf32(enabled: bool) -> Iterator[None]:
    """TF32 on for tf32, off for true fp32; restored afterwards."""
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


class _L2Flush:
    """Writing a buffer twice the L2 size evicts the operands between iterations."""

    def __init__(self, device: torch.device) -> None:
        self.buf = None
        if device.type == "cuda":
            l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 64 * MIB
            self.buf = torch.empty(2 * l2 // 4, dtype=torch.float32, device=device)

    def __call__(self) -> None:
        if self.buf is not None:
            self.buf.fill_(1.0)


def _iterations(plan: PeakPlan, warm_s: float, target_s: float | None = None) -> int:
    est = max(warm_s, 1e-6)
    target = plan.target_s if target_s is None else target_s
    return max(plan.min_iters, min(plan.max_iters, int(target / est)))


def _runner(op: Callable[[], object], device: torch.device, flush: Callable[[], None],
            clock: Callable[[], float]) -> Callable[[int], list[float]]:
    """``run(n)``: the times of ``n`` iterations of ``op`` in seconds, each timed alone,
    flushing before each (outside the timed part)."""
    if device.type == "cuda":
        def run(n: int) -> list[float]:
            pairs = []
            for _ in range(n):
                flush()  # outside the timed pair
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                op()
                end.record()
                pairs.append((start, end))
            # note: the one CPU-GPU sync point, after the last iteration
            torch.cuda.synchronize(device)
            return [s.elapsed_time(e) / 1e3 for s, e in pairs]
    else:
        def run(n: int) -> list[float]:
            out = []
            for _ in range(n):
                flush()
                t0 = clock()
                op()
                out.append(clock() - t0)
            return out
    return run


def _time(op: Callable[[], object], device: torch.device, plan: PeakPlan,
          flush: Callable[[], None] = lambda: None, target_s: float | None = None,
          clock: Callable[[], float] = time.perf_counter) -> tuple[list[float], list[float]]:
    """Burst: (warm-up times, measured times) of ``op`` in seconds, the count of measured
    iterations set by the fastest warm-up one."""
    run = _runner(op, device, flush, clock)
    warm = run(plan.warmup)
    times = run(_iterations(plan, min(warm) if warm else 0.0, target_s))
    return warm, times


def _time_fixed(op: Callable[[], object], device: torch.device, plan: PeakPlan,
                flush: Callable[[], None], clock: Callable[[], float]
                ) -> tuple[list[float], list[float]]:
    """Sustained: (untimed iterations' times, timed ones) of ``op``, ``plan.shape_warmup`` and
    ``plan.iters`` of them whatever a product takes."""
    run = _runner(op, device, flush, clock)
    return run(plan.shape_warmup), run(plan.iters)


def warm_device(op: Callable[[], object], device: torch.device, seconds: float,
                clock: Callable[[], float] = time.perf_counter) -> int:
    """Run ``op`` back to back until ``seconds`` have passed on ``clock``: the device warm-up
    of a sustained sweep, which brings clocks and temperature to where a long run holds them.
    Returns how many products it ran; none is timed or kept."""
    start, n = clock(), 0
    while clock() - start < seconds:
        op()
        if device.type == "cuda":
            # note: a CPU-GPU sync point after each product, so the host clock counts finished
            # work, not launches queued ahead of it
            torch.cuda.synchronize(device)
        n += 1
    return n


def _failed(cfg: PeakConfig, env: dict, exc: BaseException, unit: str) -> PeakRecord:
    etype = ErrorType.OOM if isinstance(exc, torch.OutOfMemoryError) else ErrorType.EXCEPTION
    tail = "".join(traceback.format_exception(exc)[-3:])
    return PeakRecord(config=cfg, env=env, status="error", error_type=etype,
                      error=f"{type(exc).__name__}: {exc}\n{tail}", unit=unit)


def unsupported(cfg: PeakConfig, env: dict, why: str) -> PeakRecord:
    unit = "TFLOP/s" if cfg.verb == "matmul" else "GB/s"
    return PeakRecord(config=cfg, env=env, status="error", error_type=ErrorType.UNSUPPORTED,
                      error=why, unit=unit)


def _matmul_op(precision: str, shape: tuple[int, ...], device: torch.device
               ) -> Callable[[], object]:
    """One ``m x k @ k x n`` product in ``precision`` on random operands, ready to repeat."""
    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(0)
    if precision == "fp8":
        # Per-tensor scaled e4m3 product, bf16 out: what fp8 training recipes run.
        a = torch.randn(m, k, device=device, generator=gen).to(torch.float8_e4m3fn)
        # _scaled_mm wants the second operand column-major.
        b = torch.randn(n, k, device=device, generator=gen).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        def op() -> object:
            return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        return op
    dtype = DTYPES[precision]
    a = torch.randn(m, k, device=device, dtype=dtype, generator=gen)
    b = torch.randn(k, n, device=device, dtype=dtype, generator=gen)
    out = torch.empty(m, n, device=device, dtype=dtype)
    def op() -> object:
        return torch.mm(a, b, out=out)
    return op


def measure_matmul(cfg: PeakConfig, env: dict, plan: PeakPlan,
                   clock: Callable[[], float] = time.perf_counter) -> PeakRecord:
    """TFLOP/s of one ``m x k @ k x n`` product (2mnk FLOPs) in ``cfg.precision``, timed by
    ``cfg.method``; the first shape of a sustained sweep runs the device warm-up first.
    ``clock`` is the host clock (the CPU's timer and the warm-up's; injectable for tests)."""
    device = torch.device(cfg.device)
    m, n, k = cfg.shape
    try:
        with _tf32(cfg.precision == "tf32"):
            if plan.opens_sweep(cfg):
                # before anything of this precision is timed; its operands are freed before
                # the shape's are made
                warm_device(_matmul_op(str(cfg.precision), plan.warmup_shape, device), device,
                            cfg.warmup_s, clock)
            op = _matmul_op(str(cfg.precision), cfg.shape, device)
            if cfg.method == "sustained":
                warm, times = _time_fixed(op, device, plan, _L2Flush(device), clock)
            else:
                warm, times = _time(op, device, plan, _L2Flush(device), plan.target_for(cfg),
                                    clock)
    except Exception as exc:  # an OOM or a kernel the build lacks becomes a row
        return _failed(cfg, env, exc, "TFLOP/s")
    return PeakRecord(config=cfg, env=env, times_s=tuple(times), warmup_times_s=tuple(warm),
                      work=2.0 * m * n * k, unit="TFLOP/s")


def measure_memory(cfg: PeakConfig, env: dict, plan: PeakPlan) -> PeakRecord:
    """Device memory bandwidth: copy (read + write, 2x bytes), read (a sum), write (a fill)."""
    device = torch.device(cfg.device)
    numel = cfg.nbytes // 4
    try:
        src = torch.rand(numel, device=device)
        if cfg.verb == "copy":
            dst = torch.empty_like(src)
            op, work = (lambda: dst.copy_(src)), 2.0 * numel * 4
        elif cfg.verb == "read":
            op, work = (lambda: src.sum()), float(numel * 4)
        else:
            op, work = (lambda: src.fill_(1.5)), float(numel * 4)
        warm, times = _time(op, device, plan, _L2Flush(device))
    except Exception as exc:
        return _failed(cfg, env, exc, "GB/s")
    return PeakRecord(config=cfg, env=env, times_s=tuple(times), warmup_times_s=tuple(warm),
                      work=work, unit="GB/s")


def measure_transfer(cfg: PeakConfig, env: dict, plan: PeakPlan) -> PeakRecord:
    """Host<->device (pinned or pageable) or GPU->GPU copy bandwidth, bytes counted once."""
    device = torch.device(cfg.device)
    numel = cfg.nbytes // 4
    try:
        if cfg.verb == "p2p":
            src = torch.rand(numel, device=device)
            dst = torch.empty(numel, device=torch.device(cfg.peer))
            op = lambda: dst.copy_(src, non_blocking=True)  # noqa: E731
        else:
            host = torch.rand(numel)
            if cfg.pinned:
                host = host.pin_memory()
            dev = torch.empty(numel, device=device)
            if cfg.verb == "h2d":
                op = lambda: dev.copy_(host, non_blocking=bool(cfg.pinned))  # noqa: E731
            else:
                op = lambda: host.copy_(dev, non_blocking=bool(cfg.pinned))  # noqa: E731
        with torch.cuda.device(device):
            warm, times = _time(op, device, plan)
    except Exception as exc:
        return _failed(cfg, env, exc, "GB/s")
    return PeakRecord(config=cfg, env=env, times_s=tuple(times), warmup_times_s=tuple(warm),
                      work=float(numel * 4), unit="GB/s")


def plan_points(device: torch.device, precisions: list[str], plan: PeakPlan,
                verbs: tuple[str, ...] = ("matmul", "memory", "transfer", "p2p")) -> list[PeakConfig]:
    """Every point of a run, in order: matmuls, device memory, host transfers, GPU pairs."""
    dev = str(device)
    pts: list[PeakConfig] = []
    timing = ({"method": plan.method, "warmup_s": plan.warmup_s} if plan.method == "sustained"
              else {})
    if "matmul" in verbs:
        pts += [PeakConfig("matmul", precision=p, shape=s, device=dev, **timing)
                for p in precisions for s in plan.shapes_for(p)]
    if "memory" in verbs:
        pts += [PeakConfig(v, nbytes=plan.memory_bytes, device=dev) for v in ("copy", "read", "write")]
    if device.type == "cuda" and "transfer" in verbs and plan.transfer_bytes:
        pts += [PeakConfig(v, nbytes=plan.transfer_bytes, pinned=p, device=dev)
                for v in ("h2d", "d2h") for p in (True, False)]
    if device.type == "cuda" and "p2p" in verbs and plan.transfer_bytes:
        n = torch.cuda.device_count()
        pts += [PeakConfig("p2p", nbytes=plan.transfer_bytes, device=f"cuda:{i}", peer=f"cuda:{j}")
                for i in range(n) for j in range(n) if i != j]
    return pts


def replan(points: list[PeakConfig], device: torch.device, plan: PeakPlan) -> list[PeakConfig]:
    """``points`` with their matmuls planned anew by ``plan`` (its method's shapes and timing),
    in the same precisions and first, as :func:`plan_points` orders them; the other points as
    they were (their timing does not depend on the method)."""
    precisions = list(dict.fromkeys(str(p.precision) for p in points if p.verb == "matmul"))
    return (plan_points(device, precisions, plan, verbs=("matmul",))
            + [p for p in points if p.verb != "matmul"])


def measure_point(cfg: PeakConfig, env: dict, plan: PeakPlan,
                  clock: Callable[[], float] = time.perf_counter) -> PeakRecord:
    """Measure one point, refusing precisions the device lacks (stored as unsupported rows).
    ``clock``: the host clock of a matmul's warm-up and CPU timer (injectable for tests)."""
    device = torch.device(cfg.device)
    if cfg.verb == "matmul":
        why = supported_precisions(device).get(cfg.precision or "", f"unknown precision {cfg.precision!r}")
        if why:
            return unsupported(cfg, env, why)
        return measure_matmul(cfg, env, plan, clock)
    if cfg.verb in ("copy", "read", "write"):
        return measure_memory(cfg, env, plan)
    return measure_transfer(cfg, env, plan)
