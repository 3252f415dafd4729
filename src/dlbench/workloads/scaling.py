"""One rank of a training measurement across GPUs: ddp, dp, ps, fsdp, tp or fsdp+tp, timed like
``throughput``.

Runs inside a process that ``dlbench.launch.rank_entry`` started through torch.distributed.run, with
the process group already initialised. The steps run through the one measured window
(:mod:`dlbench.measure.window`), as throughput's do, with its bounded launch queue. The ranks
must step in lockstep and stop together: rank 0 consults the stopping rule on its own step times
every ``check_every`` steps (chosen from the warm-up so that a check comes about every
``CHECK_INTERVAL_S``) and broadcasts the decision on a gloo group, which touches no GPU stream, so
the measured loop still never synchronises a device.

After the window, each rank of a multi-process job profiles a few more steps for the time its
collectives ran with no compute beside them (:mod:`dlbench.measure.comm_profile`), so the
window's figures stay the bare loop's.

Measurement code prints nothing and writes nothing: it returns a dict of raw results.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from dlbench import telemetry
from dlbench.launch.progress import NoProgress, RankProgress
from dlbench.measure.comm_profile import not_profiled, profile_comm
from dlbench.measure.memory import peak_memory, reset_peak_memory
from dlbench.measure.timer import synchronize
from dlbench.measure.window import MeasuredWindow, RankZero
from dlbench.models import get_model
from dlbench.records.scaling import ScalingConfig
from dlbench.workloads.checkpointing import enable_checkpointing
from dlbench.workloads import fp8
from dlbench.workloads.devices import UnsupportedError, check_supported
from dlbench.workloads.fsdp import compile_blocks, shard
from dlbench.workloads.ps import build_ps_step
from dlbench.workloads.size_guard import check_scaling_fits
from dlbench.workloads.throughput import (
    AUTOCAST_DTYPES,
    build_step,
    check_finite,
    compiled_graphs_freed,
    count_flops_safe,
    precision_flags,
)
from dlbench.workloads.tp import parallelize, replica_of


def rank_device(cfg: ScalingConfig, local_rank: int) -> torch.device:
    """The device of this rank: its GPU under NCCL (and dp's first GPU), else the CPU."""
    if cfg.base.device == "cpu" or not torch.cuda.is_available():
        if cfg.strategy == "dp" and cfg.gpus > 1:
            raise UnsupportedError("strategy dp needs CUDA GPUs (nn.DataParallel splits a batch "
                                   "over devices); on the CPU use ddp or ps", "strategy")
        if cfg.backend == "nccl":
            raise UnsupportedError('backend nccl needs CUDA GPUs; use backend="gloo" on the CPU',
                                   "backend")
        return torch.device("cpu")
    visible = torch.cuda.device_count()
    need = cfg.gpus if cfg.strategy == "dp" else cfg.gpus // cfg.nnodes
    if need > visible:
        raise UnsupportedError(f"gpus {cfg.gpus}: only {visible} GPU(s) are visible on "
                               f"{socket.gethostname()}", "gpus")
    index = 0 if cfg.strategy == "dp" else local_rank
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def measure_rank(cfg: ScalingConfig, local_rank: int, control: dist.ProcessGroup | None,
                 fail_at_step: int | None = None,
                 on_done: Callable[[torch.nn.Module], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 warmup_lag_s: float = 0.0, step_lag_s: float = 0.0,
                 progress: RankProgress | NoProgress | None = None) -> dict[str, Any]:
    """Measure this rank's part; returns its raw results (step times, warm-up, first step...).

    ``control`` is a gloo group of all ranks for the stop decision (None in a one-process job).
    ``fail_at_step`` raises on this rank at that measured step (fault injection for tests);
    ``on_done`` is given the trained (unwrapped) module at the end; ``warmup_lag_s`` makes this
    rank sleep after each warm-up step (a slow host), ``step_lag_s`` in every step (slow steps),
    both for tests. ``progress`` is told the phases and counts the steps (rank 0 of a torchrun
    job reports them to the parent: :mod:`dlbench.launch.progress`).
    """
    base = cfg.base
    rank = dist.get_rank() if dist.is_initialized() else 0
    progress = progress or NoProgress()
    world = dist.get_world_size() if dist.is_initialized() else 1
    device = rank_device(cfg, local_rank)
    spec = get_model(base.model)
    check_supported(base, spec, device)
    check_scaling_fits(cfg, spec, device)  # far too large: refused before it is built
    if cfg.fp8:  # before anything is built: a device without fp8 matmuls is a row, at once
        fp8.check_device(device)
    size = base.input_size or spec.input_size
    # The same seed on every rank: identical initial weights (DDP broadcasts them anyway; ps
    # relies on it). The data differ per data-parallel replica, as each replica of a real job
    # reads its own shard; the ranks of one TP group share a replica, so they feed one batch.
    torch.manual_seed(base.seed)
    gen_device = device if device.type == "cuda" else "cpu"
    replica = replica_of(rank, cfg.tp_degree)
    gen = torch.Generator(device=gen_device).manual_seed(base.seed * 1000 + replica)
    batch = base.batch_size * (cfg.gpus if cfg.strategy == "dp" else 1)

    # Telemetry: local rank 0 samples every GPU of its host on a thread (the others none), and
    # takes the idle baseline before any rank starts work (the barrier).
    sampler = _host_sampler(cfg, local_rank, device)
    # Distinct batches per step on this host: one per data-parallel replica (a TP group counts
    # once; a group stays on one host).
    per_host = 1 if cfg.strategy == "dp" else cfg.gpus // cfg.nnodes // cfg.tp_degree
    # per-thread autotuning results: see precision_flags
    autotune = cfg.strategy != "dp" and base.autotune
    with precision_flags(base.precision, device, autotune), compiled_graphs_freed(base), sampler:
        sampler.idle(telemetry.IDLE_BASELINE_S)
        if control is not None and base.telemetry_interval_s is not None \
                and device.type == "cuda":  # the same answer on every rank: all or none wait
            dist.barrier(group=control)  # no rank starts work during the idle baseline
        progress.phase("building the model")
        t = clock()
        model = spec.build_on(device, size)  # DDP then broadcasts rank 0's weights
        x, y = spec.make_batch(batch, device, size, generator=gen)
        if base.channels_last:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        model.train(True)
        if base.checkpointing:  # before the strategy wraps it: the library's own switch
            enable_checkpointing(model, base.checkpoint_policy)
        step = wrap_strategy(cfg, spec, model, x, y, device)
        synchronize(device)
        build_s = clock() - t
        reset_peak_memory(device)

        if step_lag_s:
            step = _lagged(step, step_lag_s)
        step = progress.counting(step)  # rank 0 reports its steps to the parent

        # First step apart: compilation, autotuning, NCCL communicator set-up.
        window = MeasuredWindow(device, clock=clock, mark=sampler.mark,
                                agree=RankZero(control) if control is not None else None)
        progress.phase("first step (compile, communicators)")
        out = window.first_step(step)
        check_finite(base, out)

        # All ranks run the same warm-up steps: rank 0's clock ends it (see MeasuredWindow).
        progress.phase("warm-up")
        window.warm_up(_lagged(step, warmup_lag_s) if warmup_lag_s else step,
                       base.warmup_steps, base.warmup_seconds)
        progress.phase("measured window")
        out = window.run(_failing(step, fail_at_step, rank) if fail_at_step is not None
                         else step, base.stop)
        w = window.times()
        final = check_finite(base, out)
        memory = peak_memory(device)
        if on_done is not None:  # the parameters the window's steps trained, before any more
            on_done(model)
        # After the window and the memory peak: the profiler's cost shows in neither.
        # Named for what runs: with the profile off (or one rank) the job only finishes.
        progress.phase("profiling communication" if world > 1 and cfg.comm_profile_steps
                       else "finishing")
        comm = _comm_profile(cfg, step, device, world)
    tele = telemetry.finish(sampler.stop(), len(w.step_times_s) * batch * per_host)

    return {"rank": rank, "world": world, "host": socket.gethostname(), "ok": True,
            "step_times_s": w.step_times_s, "warmup_times_s": w.warmup_times_s,
            "first_step_s": w.first_step_s, "build_s": build_s, "window_wall_s": w.wall_s,
            "stop_reason": w.stop_reason,
            "samples_per_step": batch, "unit": spec.unit,
            "units_per_sample": spec.units_per_sample(size),
            "flops_per_sample": count_flops_safe(spec, "train", size) if rank == 0 else None,
            "memory": memory, "final_loss": final, "telemetry": tele, "comm_profile": comm}


def _comm_profile(cfg: ScalingConfig, step: Callable[[], torch.Tensor], device: torch.device,
                  world: int) -> dict[str, Any]:
    """This rank's exposed communication over a few profiled steps (every rank of the job runs
    them, so their collectives match), or why none was measured."""
    if world == 1:
        return not_profiled("one process: no collectives between ranks")
    if not cfg.comm_profile_steps:
        return not_profiled("turned off (--no-profile-comm)")
    return profile_comm(step, cfg.comm_profile_steps, device)


def _host_sampler(cfg: ScalingConfig, local_rank: int, device: torch.device):
    """The telemetry sampler of this rank: on local rank 0 every GPU of the host that the job
    uses; a no-op elsewhere, on the CPU, or when telemetry is off."""
    interval = cfg.base.telemetry_interval_s
    if interval is None or local_rank != 0 or device.type != "cuda":
        # On the CPU a data-parallel job's ranks share the host's cores: its CPU% says little
        # about any one of them, so gloo jobs run without a sampler thread.
        return telemetry.NullSampler()
    n = cfg.gpus if cfg.strategy == "dp" else cfg.gpus // cfg.nnodes
    return telemetry.Sampler(interval, gpus=[{"index": i} for i in range(n)], host=True)


class ReplicaAutocast(torch.nn.Module):
    """Autocast entered inside each nn.DataParallel replica, with the run's dtype.

    DataParallel runs each replica in a thread of its own and re-enters autocast there with only
    the caller's on/off state, not its dtype (torch/nn/parallel/parallel_apply.py); a new
    thread's autocast dtype is CUDA's default, fp16. Without this a bf16 run computed in fp16
    without loss scaling, and measured fp16's speed: 2.49x one GPU on two H200s.
    """

    def __init__(self, inner: torch.nn.Module, precision: str) -> None:
        super().__init__()
        self.inner = inner
        self.dtype = AUTOCAST_DTYPES.get(precision)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.dtype is None:
            return self.inner(x)
        with torch.autocast(x.device.type, dtype=self.dtype):
            return self.inner(x)


def wrap_strategy(cfg: ScalingConfig, spec, model: torch.nn.Module, x: torch.Tensor,
                  y: torch.Tensor, device: torch.device) -> Callable[[], torch.Tensor]:
    """The strategy around the model, and the step that trains it."""
    base = cfg.base
    if cfg.fp8:
        # fp8 linear layers swapped in before any strategy wraps the model (torchtitan's
        # order): TP splits them, FSDP shards them, DDP buckets their gradients as any others.
        fp8.convert(model)
    if cfg.strategy == "ps":
        # ps keeps the plain module: its own collectives replace DDP's all-reduce.
        if base.compile:
            model = torch.compile(model, mode=base.compile)
        return build_ps_step(base, spec, model, x, y, device)
    if cfg.strategy in ("tp", "fsdp+tp"):
        # Split (and for fsdp+tp sharded) before the optimizer exists, which then holds the
        # DTensor shards; each block compiled between TP and FSDP (see tp.parallelize).
        model = parallelize(model, device, cfg.tp_degree, sharded=cfg.strategy == "fsdp+tp",
                            precision=base.precision, compile_mode=base.compile,
                            offload=cfg.offload)
        return build_step(base, spec, model, x, y, device)
    if cfg.strategy == "fsdp":
        # Each block compiled before it is sharded (torchtitan's order): FSDP's hooks then run
        # between compiled blocks. A model without a repeated stack is compiled whole, sharded.
        whole = bool(base.compile) and compile_blocks(model, base.compile) == 0
        # Sharded before the optimizer exists (build_step makes it): it then holds the shards
        # (in host memory with --offload, where it then steps).
        model = shard(model, base.precision, offload=cfg.offload)
        if whole:
            model = torch.compile(model, mode=base.compile)
        return build_step(base, spec, model, x, y, device)
    if cfg.strategy == "dp":
        if device.type == "cuda":
            model = torch.nn.DataParallel(ReplicaAutocast(model, base.precision),
                                          device_ids=list(range(cfg.gpus)))
    else:
        model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                    bucket_cap_mb=cfg.bucket_mb)
    if base.compile:
        # Compiling the DDP module lets dynamo split graphs at bucket boundaries (DDPOptimizer).
        model = torch.compile(model, mode=base.compile)
    return build_step(base, spec, model, x, y, device)


def _lagged(step: Callable[[], torch.Tensor], lag_s: float) -> Callable[[], torch.Tensor]:
    """``step``, then a sleep of ``lag_s`` on the host (a slow host or a slow step, for tests)."""
    def lagged() -> torch.Tensor:
        out = step()
        time.sleep(lag_s)
        return out
    return lagged


def _failing(step: Callable[[], torch.Tensor], at: int, rank: int) -> Callable[[], torch.Tensor]:
    """``step`` that raises at measured step ``at`` (fault injection for tests)."""
    issued = 0

    def failing() -> torch.Tensor:
        nonlocal issued
        if issued == at:
            raise RuntimeError(f"failure injected on rank {rank} at measured step {issued}")
        issued += 1
        return step()
    return failing
