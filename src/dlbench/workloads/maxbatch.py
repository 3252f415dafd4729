"""The largest batch that trains without running out of memory: doubling, then bisection.

:func:`find_max_batch` is the pure search: it asks a ``fits(batch)`` oracle and knows nothing
of devices, so tests drive it with a fake memory limit. :func:`search` gives it a real oracle:
each probe is a few training steps in a fresh process (the subprocess launcher), so an
out-of-memory, a fragmented allocator or a fatal CUDA error cannot leak into the next probe, as
timm's ``decay_batch`` retry cannot promise in-process. Under a strategy (ddp, fsdp, tp,
fsdp+tp on N GPUs) each probe is a torchrun job of all N ranks at that batch per replica: an
out-of-memory on any rank ends the job, and the batch does not fit. Measurement code: it returns a record
and writes nothing.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable, Protocol, Sequence

from dlbench.launch.subprocess_launcher import SubprocessLauncher
from dlbench.launch.torchrun import TorchrunLauncher
from dlbench.measure.stopping import StopRule
from dlbench.records.base import ErrorType
from dlbench.records.maxbatch import FITS, MaxBatchConfig, MaxBatchRecord, Probe
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord

#: A probe: the first step (allocations, autotuning) and two more, so the optimizer state
#: exists and the second step's peak, the steady one, is seen. No warm-up, no interval.
PROBE_STOP = StopRule(min_steps=2, min_seconds=0.0, max_seconds=60.0, max_steps=2)

#: Probe outcomes that mean "too big": an OOM, and what a too-large batch can also cause: a
#: fatal CUDA error (32-bit index overflow in a kernel) or a worker killed without a word (the
#: host's OOM killer). Any other failure stops the search unless a smaller batch ran (search).
TOO_BIG = (ErrorType.OOM, ErrorType.FATAL, ErrorType.CRASHED)

#: Seconds a probe's process may run. Most eager probes take 10-70 s on an H200 (start-up,
#: cuDNN's autotuning, three steps), but cuDNN's first-step autotuning of true fp32 convolutions
#: grows with the batch: a VGG-16 fp32 probe at batch 512 ran past 300 s there. A compiled probe
#: compiles first.
PROBE_TIMEOUT_S = 900.0
COMPILED_PROBE_TIMEOUT_S = 1200.0

#: The share of the device's memory a predicted batch may fill: the peak a probe reports is the
#: allocator's, and the CUDA context, cuDNN workspaces chosen at the larger size and
#: fragmentation come on top of a straight line through two smaller probes.
PREDICT_FILL = 0.95


class Launcher(Protocol):
    """One probe's run: a ThroughputConfig in a process, or a ScalingConfig as a job."""

    def run(self, cfg: ThroughputConfig | ScalingConfig, env: dict) -> ThroughputRecord: ...


class SearchInterrupted(KeyboardInterrupt):
    """Ctrl-C (or a scheduler's SIGINT) during a search; ``record`` keeps the probes that finished.

    A KeyboardInterrupt still, so every handler of an interrupt treats it as one; the caller
    stores the record, and ``--resume`` hands its probes back to :func:`search` as ``known``.
    """

    def __init__(self, record: MaxBatchRecord) -> None:
        super().__init__(record.error)
        self.record = record


class SearchAborted(RuntimeError):
    """A probe failed in a way that says nothing about memory (the record keeps which)."""

    def __init__(self, probe: Probe) -> None:
        super().__init__(probe.error or probe.outcome)
        self.probe = probe


@dataclass(frozen=True)
class SearchResult:
    """``best`` fits (None if not even 1 does); ``first_fail`` is the smallest that did not."""

    best: int | None
    first_fail: int | None
    probed: tuple[tuple[int, bool], ...]


def find_max_batch(fits: Callable[[int], bool], start: int = 1, limit: int | None = None,
                   tolerance: float = 0.0,
                   guess: Callable[[], int | None] | None = None) -> SearchResult:
    """The largest batch for which ``fits`` holds, assuming it holds below some boundary only.

    Doubling from ``start`` (or halving, if ``start`` does not fit) brackets the boundary; then
    bisection narrows ``[lo fits, hi fails)`` until ``hi - lo <= max(1, tolerance * lo)``. With
    tolerance 0 the answer is exact in at most ``log2(boundary / start) + 1`` probes to bracket
    plus ``log2(bracket)`` to bisect. No batch is probed twice or above ``limit``.

    ``guess``, asked while doubling, may name the batch it expects to be the largest that fits
    (from the memory the probes so far used: :func:`predict_max_batch`). It is tried once, in
    place of the next doubling. If it fits, the search gallops up from it, the first step one
    bracket width (which ends the search when the guess was right), each next step twice the
    last. A wrong guess costs a probe or two and is a bound like any other, so the answer is
    the same with or without it.
    """
    if start < 1 or (limit is not None and limit < 1):
        raise ValueError("start and limit must be >= 1")
    if limit is not None:
        start = min(start, limit)
    probed: list[tuple[int, bool]] = []

    def probe(b: int) -> bool:
        ok = fits(b)
        probed.append((b, ok))
        return ok

    lo: int | None = None
    hi: int | None = None
    if probe(start):
        lo = start
        guessed = False
        step: int | None = None  # after a guess that fitted: gallop up from it, doubling steps
        while limit is None or lo < limit:
            b, is_guess = lo * 2, False
            if step is not None:
                b = lo + step
            elif guess is not None and not guessed:
                g = guess()
                guessed = g is not None
                if g is not None and lo < g < 4 * lo:  # a wild guess is ignored: doubling is
                    b, is_guess = g, True               # the fallback
            b = b if limit is None else min(b, limit)
            if not probe(b):
                hi = b
                break
            lo = b
            if is_guess:
                step = max(1, math.ceil(tolerance * lo))  # one bracket width: ends a right guess
            elif step is not None:
                step *= 2
    else:
        hi = start
        while hi > 1:
            b = hi // 2
            if probe(b):
                lo = b
                break
            hi = b
        if lo is None:
            return SearchResult(None, hi, tuple(probed))
    while hi is not None and hi - lo > max(1, int(tolerance * lo)):
        mid = (lo + hi) // 2
        if probe(mid):
            lo = mid
        else:
            hi = mid
    return SearchResult(lo, hi, tuple(probed))


def predict_max_batch(points: Sequence[tuple[int, int]], total_bytes: int,
                      fill: float = PREDICT_FILL, fixed_bytes: int | None = None) -> int | None:
    """The largest batch a straight line through the two largest fitting probes' peak memory
    ``(batch, bytes)`` puts under ``fill`` of ``total_bytes``; None without two distinct
    batches (or one and ``fixed_bytes``) or with a line that does not grow (the peak then says
    nothing about the batch).

    With one probe, ``fixed_bytes`` (parameters, gradients and optimizer state, which do not
    grow with the batch) is the line's other point, at batch 0. Every other constant (cuDNN's
    workspace, the allocator's slack) then counts as per-sample memory, so the guess errs low,
    where a wrong guess still fits and the search gallops up from it. Where probes take
    minutes (cuDNN autotuning true fp32), that saves the doubling probe that would otherwise
    come before the first guess.
    """
    pts = sorted({b: m for b, m in points if m}.items())
    if not total_bytes or not pts:
        return None
    if len(pts) >= 2:
        (b1, m1), (b2, m2) = pts[-2], pts[-1]
    elif fixed_bytes:
        (b1, m1), (b2, m2) = (0, fixed_bytes), pts[-1]
    else:
        return None
    per_sample = (m2 - m1) / (b2 - b1)
    if per_sample <= 0:
        return None
    return int((fill * total_bytes - m2) / per_sample) + b2


def fixed_bytes(memory: dict) -> int | None:
    """Parameters, gradients and optimizer state of a probe's record (None where not counted)."""
    parts = [memory.get(k) for k in ("params_bytes", "grads_bytes", "optimizer_state_bytes")]
    return sum(p or 0 for p in parts) if parts[0] else None


def probe_config(base: ThroughputConfig, batch: int) -> ThroughputConfig:
    """The config of one probe: the base setup at ``batch``, a few steps, no warm-up, and no
    telemetry (its idle baseline waits for the card's power to settle: seconds per probe)."""
    return replace(base, batch_size=batch, warmup_steps=0, warmup_seconds=0.0, stop=PROBE_STOP,
                   telemetry_interval_s=None)


def probe_run(cfg: MaxBatchConfig, batch: int) -> ThroughputConfig | ScalingConfig:
    """What one probe of ``cfg`` runs: :func:`probe_config` at ``batch``, in one process, or
    under the search's strategy as a job of all its GPUs with ``batch`` per replica."""
    base = probe_config(cfg.base, batch)
    if cfg.parallel is None:
        return base
    # a probe is its few steps: no exposed-communication profile after them
    return replace(cfg.parallel, base=base, comm_profile_steps=0)


def probe_launcher(cfg: MaxBatchConfig) -> Launcher:
    """A fresh process per probe (:class:`SubprocessLauncher`), or under a strategy a fresh
    torchrun job (:class:`TorchrunLauncher`); the time limit covers a compile where there is
    one."""
    # here, when probes are to run: the references import every workload's module
    from dlbench.workloads import workers
    timeout = COMPILED_PROBE_TIMEOUT_S if cfg.base.compile else PROBE_TIMEOUT_S
    if cfg.parallel is not None:
        return TorchrunLauncher(timeout_s=timeout, scaling_worker=workers.SCALING_RANK)
    return SubprocessLauncher({"throughput": workers.THROUGHPUT}, timeout_s=timeout,
                              count_flops=False)


def search(cfg: MaxBatchConfig, env: dict, default_start: int,
           launcher: Launcher | None = None,
           on_probe: Callable[[Probe], None] | None = None,
           known: Sequence[Probe] = (),
           on_start: Callable[[int], None] | None = None) -> MaxBatchRecord:
    """Find the largest batch of ``cfg.base`` that fits; every probe in its own process.

    ``default_start`` is used when ``cfg.start`` is None (the model's default batch for the
    device). ``on_start`` sees each batch as its probe starts and ``on_probe`` each probe as it
    finishes (progress output: an fp32 probe can autotune for minutes); ``launcher`` defaults
    to :func:`probe_launcher`'s (a torchrun job per probe under a strategy). ``known`` holds probes
    of the same setup on the same device from a search that was interrupted: a batch among them
    is not probed again (the search takes the same path, so a resumed search costs only the
    probes the interrupted one lacked). An interrupt raises :class:`SearchInterrupted` with the
    probes so far.
    """
    if launcher is None:
        launcher = probe_launcher(cfg)
    probes: list[Probe] = []
    reuse = {p.batch: p for p in known if p.fits or p.outcome in TOO_BIG}

    def fits(batch: int) -> bool:
        if batch in reuse:  # measured before the interrupt: the same answer, no process
            p = reuse[batch]
            probes.append(p)
            return p.fits
        if on_start is not None:
            on_start(batch)
        t = time.perf_counter()
        rec = launcher.run(probe_run(cfg, batch), env)
        outcome = FITS if rec.ok else (rec.error_type or ErrorType.EXCEPTION)
        mem = rec.memory or {}
        p = Probe(batch=batch, outcome=outcome,
                  allocated_peak_bytes=mem.get("allocated_peak_bytes"),
                  reserved_peak_bytes=mem.get("reserved_peak_bytes"),
                  device_total_bytes=mem.get("device_total_bytes"),
                  wall_s=round(time.perf_counter() - t, 3),
                  error=(rec.error or "").splitlines()[0][:300] if rec.error else None,
                  fixed_bytes=fixed_bytes(mem) if rec.ok else None)
        probes.append(p)
        if on_probe is not None:
            on_probe(p)
        if outcome != FITS and outcome not in TOO_BIG and \
                not any(q.fits and q.batch < batch for q in probes):
            # An error where no smaller batch has run says nothing about size: it would fail
            # at every batch. Above a batch that ran, the same setup differs only in size, so
            # the error bounds the search like an OOM (cuDNN's INTERNAL_ERROR near the memory
            # limit, a 32-bit index overflow); the probe keeps its own error type and message.
            raise SearchAborted(p)
        return p.fits

    def guess() -> int | None:
        ran = [p for p in probes if p.fits]
        total = next((p.device_total_bytes for p in ran if p.device_total_bytes), None)
        fixed = next((p.fixed_bytes for p in ran if p.fixed_bytes), None)
        return predict_max_batch([(p.batch, p.reserved_peak_bytes or 0) for p in ran], total,
                                 fixed_bytes=fixed)

    t0 = time.perf_counter()
    start = cfg.start or default_start
    try:
        found = find_max_batch(fits, start=start, limit=cfg.limit, tolerance=cfg.tolerance,
                               guess=guess)
    except KeyboardInterrupt:
        raise SearchInterrupted(MaxBatchRecord(
            config=cfg, env=env, status="error", error_type=ErrorType.INTERRUPTED,
            error=(f"interrupted after {len(probes)} probe(s); a resumed search goes on "
                   "from them"),
            probes=tuple(probes), search_wall_s=time.perf_counter() - t0)) from None
    except SearchAborted as exc:
        return MaxBatchRecord(
            config=cfg, env=env, status="error", error_type=exc.probe.outcome,
            error=f"probe at batch {exc.probe.batch} failed: {exc.probe.error}",
            probes=tuple(probes), search_wall_s=time.perf_counter() - t0)
    wall = time.perf_counter() - t0
    if found.best is None:
        return MaxBatchRecord(config=cfg, env=env, status="error", error_type=ErrorType.OOM,
                              error="not even batch 1 fits", first_oom_batch=found.first_fail,
                              probes=tuple(probes), search_wall_s=wall)
    return MaxBatchRecord(config=cfg, env=env, best_batch=found.best,
                          first_oom_batch=found.first_fail, probes=tuple(probes),
                          search_wall_s=wall)


def with_probe(record: MaxBatchRecord, probe: Probe, best: int | None) -> MaxBatchRecord:
    """``record`` after a later failure at its best batch (the full measurement ran out of
    memory where the short probe did not): the probe is added and the best lowered."""
    first = probe.batch if record.first_oom_batch is None else min(record.first_oom_batch,
                                                                    probe.batch)
    return replace(record, probes=record.probes + (probe,), best_batch=best,
                   first_oom_batch=first if probe.outcome != FITS else record.first_oom_batch)
