"""GPU telemetry and energy: what the card did while it was measured.

A :class:`Sampler` reads NVML (per GPU: utilisation, memory, power, the total-energy counter,
temperature, clocks, clock-throttle reasons, PCIe and NVLink traffic) and the host (CPU %, RSS)
on its own thread, every ``interval_s``, with ``perf_counter`` timestamps. The measured loop
only marks the window's start and end. :func:`summary.finish` turns the series into the
figures a result shows: energy over the window (from the energy counter, else integrated
power), J per sample and samples per J, mean and maximum power, the idle baseline, mean SM
clock, maximum temperature, utilisation and throttle flags.

Without NVML (no driver, no nvidia-ml-py) GPU telemetry is absent and a warning says so once per
process; the host is sampled anyway (psutil).
"""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.telemetry.sampler import DEFAULT_INTERVAL_S, NullSampler, Sampler, TelemetryWarning
from dlbench.telemetry.summary import finish, summarize

# Seconds of idle baseline sampled before each GPU benchmark (before the model is built), once
# the power has settled (Sampler.idle waits for that, up to a few seconds, outside the timing).
IDLE_BASELINE_S = 0.5


def for_benchmark(interval_s: float | None, device: Any, env: dict[str, Any],
                  more: Sequence[Any] = ()) -> Sampler | NullSampler:
    """The sampler of one benchmark on ``device`` (a ``torch.device``), to use as a context
    manager, or a no-op one when ``interval_s`` is None. The GPU is matched to NVML by the UUID
    in ``env``. ``more``: the other GPUs one process runs the benchmark on (JAX's data parallel
    splits one batch over them), sampled with it, so its energy is every card's. Samples are
    timed with ``perf_counter``, the clock of the benchmark's marks (a test's injected clock is
    never read from the sampler thread)."""
    if interval_s is None:
        return NullSampler()
    gpus = None
    if getattr(device, "type", None) == "cuda":
        index = device.index
        if index is None:
            import torch  # only for a CUDA device: dlbench monitor samples without torch
            index = torch.cuda.current_device()
        indices = [index] + [d.index for d in more
                             if getattr(d, "type", None) == "cuda" and d.index != index]
        gpus = [{"index": i, "uuid": next((g.get("uuid") for g in env.get("gpus") or []
                                           if g.get("index") == i), None)} for i in indices]
    return Sampler(interval_s, gpus=gpus, host=True)


__all__ = ["Sampler", "NullSampler", "TelemetryWarning", "DEFAULT_INTERVAL_S", "IDLE_BASELINE_S",
           "for_benchmark", "finish", "summarize"]
