"""Throughput of any step callable: the user's own training or inference step, timed by the one
measured window (:mod:`dlbench.measure.window`) with telemetry beside it.

The step is the user's: dlbench builds nothing and counts no FLOPs; it times the step as it
times its own models' (first step apart, warm-up apart, a window the stopping rule ends, no
synchronisation inside it) and returns the same record. On a GPU the step must queue its work on
the current stream and must not synchronise (a ``loss.item()`` per step would drain the queue
and become part of the figure).

Measurement code prints nothing and writes nothing: it returns a record.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from dlbench import telemetry
from dlbench.measure.memory import peak_memory, reset_peak_memory
from dlbench.measure.window import MeasuredWindow
from dlbench.models.sources import STEP_PREFIX  # noqa: F401  (the model field of a step's config)
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.workloads.devices import resolve_device

def measure_callable(step: Callable[[], Any], cfg: ThroughputConfig, env: dict, *, unit: str,
                     units_per_sample: int = 1,
                     clock: Callable[[], float] = time.perf_counter) -> ThroughputRecord:
    """Time ``step`` (called with no arguments) as ``cfg`` says: ``cfg.batch_size`` samples per
    call, its warm-up and stopping rule, on ``cfg.device``. Raises what the step raises."""
    device = resolve_device(cfg.device)
    with telemetry.for_benchmark(cfg.telemetry_interval_s, device, env) as sampler:
        sampler.idle(telemetry.IDLE_BASELINE_S)  # power before the step runs: the baseline
        reset_peak_memory(device)
        window = MeasuredWindow(device, clock=clock, mark=sampler.mark)
        window.first_step(step)
        window.warm_up(step, cfg.warmup_steps, cfg.warmup_seconds)  # ends with a sync
        window.run(step, cfg.stop)  # one sync, at its end
        memory = peak_memory(device)
    w = window.times()
    return ThroughputRecord(
        config=cfg, env=env, step_times_s=w.step_times_s, warmup_times_s=w.warmup_times_s,
        first_step_s=w.first_step_s, window_wall_s=w.wall_s, stop_reason=w.stop_reason,
        samples_per_step=cfg.batch_size, unit=unit, units_per_sample=units_per_sample,
        flops_per_sample=None, memory=memory,
        telemetry=telemetry.finish(sampler.stop(), len(w.step_times_s) * cfg.batch_size),
    )
