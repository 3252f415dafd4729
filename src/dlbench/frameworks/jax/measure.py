"""Throughput of a JAX model through dlbench's one measured window, with a JAX timer hook.

JAX dispatches asynchronously: a jitted call returns once its work is queued. The window
(:mod:`dlbench.measure.window`) is the same as PyTorch's; only the timer differs. PyTorch's
records a CUDA event per step; JAX has no events to hand, so :class:`JaxStepTimer` keeps each
step's output (the loss: never donated) and learns when a step ended by waiting on that output
(``block_until_ready``) where the window bounds its queue (``throttle``): waiting on step
i-1 while step i stays queued, so the device never runs dry and each completion is read as it
happens (see ``JaxStepTimer.DEPTH``). Completion times on the
host clock, read as each wait returns, tile the window; their sum is its time. Nothing in the
loop waits on the step just issued.

A step's outputs all become ready when its executable ends (one completion event per
execution on XLA's GPU client), so waiting on the loss waits for the optimizer update too.
"""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any, Callable

from dlbench import telemetry
from dlbench.frameworks import dropout
from dlbench.frameworks.jax import step as jstep  # sets XLA preallocation before jax starts
from dlbench.frameworks.jax import versions
from dlbench.frameworks.jax.models import get_jax_model
from dlbench.measure.window import MeasuredWindow
from dlbench.models import get_model
from dlbench.records.base import ErrorType
from dlbench.records.throughput import ThroughputRecord

import jax  # heavy: jax  # noqa: E402  (after step, which sets the preallocation flag)


class JaxStepTimer:
    """The window's timer for JAX (:class:`dlbench.measure.timer.StepTimer`).

    ``last`` returns the output of the step just issued. ``lap`` keeps it; ``throttle(k)``
    waits for the oldest outputs until at most k are unfinished, noting each completion on the
    host clock; ``finish`` waits for the rest, oldest first. A step that was already done when
    its wait began reads as ending then: the bound makes that rare (the host is k steps ahead),
    and the sum over the window is exact whatever happens, since the last wait is the window's
    end.
    """

    def __init__(self, last: Callable[[], Any], clock: Callable[[], float] = time.perf_counter,
                 wait: Callable[[Any], Any] = jax.block_until_ready) -> None:
        self._last, self._clock, self._wait = last, clock, wait
        self._outs: list[Any] = []
        self._ends: list[float] = []

    def start(self) -> None:
        self._outs, self._ends = [], [self._clock()]

    def lap(self) -> None:
        self._outs.append(self._last())

    def _wait_one(self) -> None:
        i = len(self._ends) - 1
        self._wait(self._outs[i])  # note: a sync point on an older step, never the newest
        self._ends.append(self._clock())
        self._outs[i] = None  # its buffer may go

    #: Unfinished steps the host keeps queued, at most: one behind the one just issued. The
    #: window's own bound (about a second of work) would let completions be read in bursts,
    #: many at once when a wait returns, and a step's time would then be the gap between two
    #: reads, not its duration (a ResNet-50 window on an H100 read as +-189%): XLA's client
    #: lets the host enqueue only 32 executions ahead of the device (the semaphore described
    #: in xla/pjrt/pjrt_stream_executor_client.cc), so with steps under 1/32 s dispatch itself
    #: blocked and the timer's waits found their steps long done. Waiting on step
    #: i-1 right after issuing step i reads each completion as it happens, while step i keeps
    #: the device busy; only a step shorter than the host's dispatch would leave it idle.
    DEPTH = 1

    def throttle(self, max_in_flight: int) -> None:
        limit = min(max_in_flight, self.DEPTH)
        while len(self._outs) - (len(self._ends) - 1) > limit:
            self._wait_one()

    def ready(self) -> list[float]:
        e = self._ends
        return [b - a for a, b in zip(e, e[1:])]

    def finish(self) -> list[float]:
        while len(self._ends) - 1 < len(self._outs):
            self._wait_one()
        return self.ready()


class NanLossError(RuntimeError):
    """The loss was NaN or infinite (the same row as PyTorch's)."""

    error_type = ErrorType.NAN


class NoDeviceError(RuntimeError):
    """The device asked for is not one JAX sees."""

    error_type = ErrorType.UNSUPPORTED


def jax_device(name: str):
    """(JAX device, what telemetry samples) for ``--device``: ``auto`` is JAX's first device
    (a GPU where its CUDA plugin loaded), ``cpu``, ``cuda``/``cuda:N`` a GPU."""
    # This process's devices: in a multi-host job jax.devices() lists every host's.
    if name == "cpu":
        return jax.local_devices(backend="cpu")[0], SimpleNamespace(type="cpu", index=None)
    if name == "auto":
        d = jax.local_devices()[0]
    else:
        try:
            gpus = jax.local_devices(backend="gpu")
        except RuntimeError:
            gpus = []
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= len(gpus):
            raise NoDeviceError(f"--device {name} with --framework jax: JAX sees {len(gpus)} "
                                "GPU(s); is JAX's CUDA plugin installed (pip install "
                                "'jax[cuda13]')? Or use --device cpu")
        d = gpus[index]
    kind = "cuda" if d.platform == "gpu" else "cpu"
    return d, SimpleNamespace(type=kind, index=d.id if kind == "cuda" else None)


def peak_memory(device=None) -> dict[str, int | None]:
    """Peak bytes of the first device (``memory_stats``; None where the backend keeps none,
    as the CPU's), under the keys of PyTorch's record. XLA's pool peak stands for PyTorch's
    reserved peak; ``bytes_limit`` is what the allocator may take (75% of the GPU, or all of
    it with preallocation off), which is no peak and is kept apart."""
    stats = (device or jax.devices()[0]).memory_stats() or {}
    return {"allocated_peak_bytes": stats.get("peak_bytes_in_use"),
            "reserved_peak_bytes": stats.get("peak_pool_bytes") or stats.get("peak_bytes_reserved"),
            "allocated_bytes": stats.get("bytes_in_use"),
            "limit_bytes": stats.get("bytes_limit")}


def measure(cfg, env: dict, clock: Callable[[], float] = time.perf_counter, flops=None,
            devices: list | None = None, idle_baseline: bool = True):
    """One :class:`ThroughputConfig` with ``framework == "jax"``: its record (raises on failure;
    the launchers turn that into a row). ``devices``: data parallel over these (one process,
    the batch split over them: :mod:`dlbench.frameworks.jax.data_parallel`)."""
    jm = get_jax_model(cfg.model)
    spec = get_model(jm.torch_name)
    size = cfg.input_size or spec.input_size
    dtype = jstep.compute_dtype(cfg.precision)
    # What this step drops (the PyTorch model's config rates in training, none in inference:
    # dlbench.frameworks.dropout), so the comparison view can say both sides did the same work.
    env = {**env, "jax": {**versions(), "xla_python_client_preallocate":
                          os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
                          "dropout": dropout.applied(cfg.model, cfg.mode)}}
    jdev, device = jax_device(cfg.device)
    sharding = replicated = None
    batch = cfg.batch_size
    more = ()  # the other GPUs of a data-parallel step: their power and energy count too
    if devices and len(devices) > 1:
        sharding, replicated = jstep.batch_sharding(devices)
        batch *= len(devices)
        if device.type == "cuda":
            more = tuple(SimpleNamespace(type="cuda", index=d.id) for d in devices)

    with jstep.precision_flags(cfg.precision), jax.default_device(jdev), \
            telemetry.for_benchmark(cfg.telemetry_interval_s, device, env, more) as sampler:
        if idle_baseline:
            sampler.idle(telemetry.IDLE_BASELINE_S)
        t = clock()
        module = jm.build(dtype, size, spec.num_classes)
        built = jstep.build(module, jm.kind, cfg.mode, cfg.method, cfg.optimizer, batch, size,
                            spec.num_classes, cfg.seed, sharding, replicated)
        jax.block_until_ready((built.state, built.x))
        build_s = clock() - t
        holder = {"state": built.state, "out": None}
        fn, x, y = built.fn, built.x, built.y
        del built

        def step():
            holder["state"], holder["out"] = fn(holder["state"], x, y)
            return holder["out"]

        timer = JaxStepTimer(lambda: holder["out"], clock)
        window = MeasuredWindow(clock=clock, mark=sampler.mark, timer=timer,
                                sync=lambda: jax.block_until_ready(holder["out"]))
        out = window.first_step(step)  # holds tracing and XLA compilation
        check = _finite(cfg, out)
        window.warm_up(step, cfg.warmup_steps, cfg.warmup_seconds)
        out = window.run(step, cfg.stop)
        final = _finite(cfg, out)
        memory = peak_memory(jdev)
    w = window.times()
    del check
    return ThroughputRecord(
        config=cfg, env=env, step_times_s=w.step_times_s, warmup_times_s=w.warmup_times_s,
        first_step_s=w.first_step_s, build_s=build_s, window_wall_s=w.wall_s,
        stop_reason=w.stop_reason, samples_per_step=batch, unit=spec.unit,
        units_per_sample=spec.units_per_sample(size),
        flops_per_sample=(flops or _count_flops)(spec, cfg.mode, size) if jm.twin else None,
        memory=memory, final_loss=final,
        telemetry=telemetry.finish(sampler.stop(), len(w.step_times_s) * batch))


def _finite(cfg, out) -> float | None:
    """The loss as a float (train), raising on NaN/inf; None in eval mode."""
    if cfg.mode == "eval":
        return None
    value = float(out)  # note: a sync point, outside the window
    if value != value or value in (float("inf"), float("-inf")):
        raise NanLossError(f"loss is {value} ({cfg.label})")
    return value


def _count_flops(spec, mode: str, size: int | None) -> int | None:
    """FLOPs per sample counted on the PyTorch twin (the same architecture): never fatal."""
    try:
        from dlbench.measure.flops import count_flops
        return count_flops(spec, "train" if mode == "train" else "eval", size)
    except Exception:  # an annotation; its failure must not lose a measurement
        return None
