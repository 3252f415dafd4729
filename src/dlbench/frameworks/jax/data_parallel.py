"""Data parallel in JAX: one process driving the local devices with a sharded batch, and several
processes (hosts) through ``jax.distributed``.

The batch is split over a one-axis mesh (``jax.sharding``: ``NamedSharding(mesh, P("data"))``)
and the state is replicated; ``jax.jit`` compiles one SPMD program whose gradient reduction
XLA's partitioner inserts (an all-reduce over the mesh, NCCL on GPUs). This is the JAX
counterpart of ``dlbench scale --strategy dp`` (one process, every local GPU), with one
difference of method: BatchNorm's batch statistics are those of the global batch (XLA reduces
them over the mesh too), where PyTorch's DDP and DataParallel keep them per GPU.

Several hosts: every process calls :func:`initialize` (``jax.distributed.initialize``) and then
runs the same program over ``jax.devices()``, all hosts' devices; the synthetic batch is made
shard by shard where each shard lives. Each process times its own window; rank 0's record is
kept, its batch the global one.
"""

from __future__ import annotations

import os
import time
import traceback
from typing import Callable

from dlbench.frameworks.jax.measure import NoDeviceError, measure
from dlbench.launch.failures import classify, describe
from dlbench.records.scaling import ScalingRecord
from dlbench.frameworks.jax.step import batch_sharding  # noqa: F401  (preallocation off first)

import jax  # heavy: jax  # noqa: E402


def local_devices(count: int, device: str = "auto") -> list:
    """The first ``count`` devices of this process (GPUs unless ``--device cpu``)."""
    if device == "cpu":
        devs = jax.devices("cpu")
    else:
        devs = jax.local_devices()
    if count > len(devs):
        raise NoDeviceError(f"--gpus {count} with --framework jax: this process sees "
                            f"{len(devs)} {devs[0].platform} device(s)"
                            + (" (on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N "
                               "makes N)" if devs[0].platform == "cpu" else ""))
    return devs[:count]


def initialize(coordinator: str | None = None, num_processes: int | None = None,
               process_id: int | None = None) -> None:
    """Join a multi-process JAX job (one process per host). Without arguments, from torchrun's
    variables (``MASTER_ADDR``/``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``) where they are set,
    else JAX's own discovery (Slurm, ...)."""
    if coordinator is None and "MASTER_ADDR" in os.environ:
        coordinator = f"{os.environ['MASTER_ADDR']}:{os.environ.get('MASTER_PORT', '29500')}"
        num_processes = int(os.environ["WORLD_SIZE"])
        process_id = int(os.environ["RANK"])
    try:  # the CPU backend's cross-process collectives (GPUs use NCCL): before JAX starts
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except (AttributeError, ValueError):  # a JAX without the option: its default stands
        pass
    jax.distributed.initialize(coordinator, num_processes, process_id)


def measure_scaling(cfg, env: dict, clock: Callable[[], float] = time.perf_counter,
                    flops=None, devices: list | None = None):
    """One ``ScalingConfig`` (``base.framework == "jax"``, strategy ``dp``): its
    :class:`ScalingRecord`, the one process's window over ``cfg.gpus`` devices (or ``devices``:
    all hosts' after :func:`initialize`)."""
    devs = devices if devices is not None else local_devices(cfg.gpus, cfg.base.device)
    rec = measure(cfg.base, env, clock, flops, devices=devs)
    return ScalingRecord(
        config=cfg, env=rec.env, rank_step_times_s=(rec.step_times_s,),
        rank_warmup_times_s=(rec.warmup_times_s,), rank_samples_per_step=(rec.samples_per_step,),
        rank_hosts=(os.uname().nodename,), first_step_s=rec.first_step_s, build_s=rec.build_s,
        window_wall_s=rec.window_wall_s, stop_reason=rec.stop_reason, unit=rec.unit,
        units_per_sample=rec.units_per_sample, flops_per_sample=rec.flops_per_sample,
        memory=rec.memory, final_loss=rec.final_loss, backend="xla", telemetry=rec.telemetry)


class JaxDataParallelLauncher:
    """Runs JAX scaling configs in this process, one at a time (the launcher protocol of
    :mod:`dlbench.jobs.sweep`): a failure becomes the config's row, and the sweep goes on."""

    name = "jax-inline"
    survives_fatal = False

    def __init__(self, count_flops: bool = True) -> None:
        self.count_flops = count_flops

    def run(self, cfg, env: dict):
        try:
            return measure_scaling(cfg, env, flops=None if self.count_flops else _no_flops)
        except Exception as exc:  # failures are data
            return ScalingRecord(config=cfg, env=env, status="error", error_type=classify(exc),
                                 error=describe(exc) or traceback.format_exc(limit=3))


def _no_flops(spec, mode, size) -> None:
    return None

