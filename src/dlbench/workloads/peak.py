"""Device ceilings: matmul TFLOP/s, memory bandwidth, host<->device and GPU<->GPU transfers.

Learned from ml-engineering's mamf-finder (Maximum Achievable Matmul FLOPS): the operands are
random (never zeros: some GPUs draw less power and clock higher on zeros), the L2 cache is
flushed between iterations by writing a buffer larger than it, so every iteration reads its
operands from device memory, and a grid of shapes is swept because the best shape is not known
in advance (tile and wave quantization); each shape reports its median and its fastest
iteration, and the ceiling is the best median over the grid, the best iteration beside it. On a GPU each iteration is
timed by a pair of CUDA events around the operation alone (the flush is outside the pair) and
the events are read once, after the last iteration; on the CPU ``perf_counter`` brackets each
iteration. Nothing is printed and nothing is written: each function returns a ``PeakRecord``.
"""

from __future__ import annotations

import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from dlbench.records.base import ErrorType
from dlbench.records.peak import PeakConfig, PeakRecord

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
PUBLISHED_BEST = ((6144, 17920, 2816),)
#: Precisions the grid is swept in; fp32 and tf32 keep the five shapes of ``PeakPlan.shapes``
#: (each of their products takes 10-40 ms: a grid of them would take minutes).
GRID_PRECISIONS = ("bf16", "fp16", "fp8")


def mamf_grid() -> tuple[tuple[int, int, int], ...]:
    """Every (M, N, K) of the grid, then the published best shape."""
    return tuple((m, n, k) for m in GRID_MN for n in GRID_MN for k in GRID_K) + PUBLISHED_BEST


@dataclass(frozen=True)
class PeakPlan:
    """The points of one ``dlbench peak`` run and how long each is measured.

    ``shapes`` are the matmul shapes of every precision; ``grid`` replaces them for the
    precisions in ``grid_precisions`` (the tensor-core ones, whose ceiling is the headline).
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

    def shapes_for(self, precision: str) -> tuple[tuple[int, int, int], ...]:
        return self.grid if self.grid and precision in self.grid_precisions else self.shapes

    def target_for(self, cfg: PeakConfig) -> float:
        on_grid = cfg.verb == "matmul" and cfg.precision in self.grid_precisions and self.grid
        return self.grid_target_s if on_grid else self.target_s


def default_plan(device: torch.device, quick: bool = False) -> PeakPlan:
    """Shapes and sizes: on a GPU, a MAMF-style grid of large matmuls for the tensor-core
    precisions (76 shapes, about 10 s each precision on an H100) and five large shapes for fp32
    and tf32; buffers far larger than any L2 (1 GiB). ``quick`` is for tests and smoke runs."""
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


def _time(op: Callable[[], object], device: torch.device, plan: PeakPlan,
          flush: Callable[[], None] = lambda: None, target_s: float | None = None
          ) -> tuple[list[float], list[float]]:
    """(warm-up times, measured times) of ``op`` in seconds, flushing before each iteration."""
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
                t0 = time.perf_counter()
                op()
                out.append(time.perf_counter() - t0)
            return out
    warm = run(plan.warmup)
    times = run(_iterations(plan, min(warm) if warm else 0.0, target_s))
    return warm, times


def _failed(cfg: PeakConfig, env: dict, exc: BaseException, unit: str) -> PeakRecord:
    etype = ErrorType.OOM if isinstance(exc, torch.OutOfMemoryError) else ErrorType.EXCEPTION
    tail = "".join(traceback.format_exception(exc)[-3:])
    return PeakRecord(config=cfg, env=env, status="error", error_type=etype,
                      error=f"{type(exc).__name__}: {exc}\n{tail}", unit=unit)


def unsupported(cfg: PeakConfig, env: dict, why: str) -> PeakRecord:
    unit = "TFLOP/s" if cfg.verb == "matmul" else "GB/s"
    return PeakRecord(config=cfg, env=env, status="error", error_type=ErrorType.UNSUPPORTED,
                      error=why, unit=unit)


def measure_matmul(cfg: PeakConfig, env: dict, plan: PeakPlan) -> PeakRecord:
    """TFLOP/s of one ``m x k @ k x n`` product (2mnk FLOPs) in ``cfg.precision``."""
    device = torch.device(cfg.device)
    m, n, k = cfg.shape
    try:
        gen = torch.Generator(device=device).manual_seed(0)
        if cfg.precision == "fp8":
            # Per-tensor scaled e4m3 product, bf16 out: what fp8 training recipes run.
            a = torch.randn(m, k, device=device, generator=gen).to(torch.float8_e4m3fn)
            # _scaled_mm wants the second operand column-major.
            b = torch.randn(n, k, device=device, generator=gen).to(torch.float8_e4m3fn).t()
            one = torch.ones((), device=device)
            def op() -> object:
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        else:
            dtype = DTYPES[cfg.precision]
            a = torch.randn(m, k, device=device, dtype=dtype, generator=gen)
            b = torch.randn(k, n, device=device, dtype=dtype, generator=gen)
            out = torch.empty(m, n, device=device, dtype=dtype)
            def op() -> object:
                return torch.mm(a, b, out=out)
        with _tf32(cfg.precision == "tf32"):
            warm, times = _time(op, device, plan, _L2Flush(device), plan.target_for(cfg))
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
    if "matmul" in verbs:
        pts += [PeakConfig("matmul", precision=p, shape=s, device=dev)
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


def measure_point(cfg: PeakConfig, env: dict, plan: PeakPlan) -> PeakRecord:
    """Measure one point, refusing precisions the device lacks (stored as unsupported rows)."""
    device = torch.device(cfg.device)
    if cfg.verb == "matmul":
        why = supported_precisions(device).get(cfg.precision or "", f"unknown precision {cfg.precision!r}")
        if why:
            return unsupported(cfg, env, why)
        return measure_matmul(cfg, env, plan)
    if cfg.verb in ("copy", "read", "write"):
        return measure_memory(cfg, env, plan)
    return measure_transfer(cfg, env, plan)
