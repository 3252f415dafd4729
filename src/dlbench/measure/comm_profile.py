"""Exposed communication of a sharded step, measured by torch.profiler after the window.

A rank of ``dlbench scale`` runs a few more steps once its measured window is closed (the
window's figures stay the bare loop's): one warm-up step, which takes the profiler's own start
(CUPTI's first kernels), then ``steps`` steps, each in a ``dlbench::comm_profile_step`` range
that ends with a synchronize, so every kernel of the step finishes inside its range. The trace
is then read by :func:`dlbench.measure.overlap.trace_steps`: on a GPU the CUDA kernels (NCCL's
against the compute kernels), on the CPU under gloo the host's events (gloo's collectives
against PyTorch's operators).

Every rank runs every step whether its profiler started or not: a rank that skipped steps would
leave its peers' collectives unmatched. A profiler that fails is the rank's figure None with
the reason, never a number made up; a step that fails is the rank's failure, as in the window.
Measurement code prints nothing and writes nothing: it returns a dict for the record.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

import torch

from dlbench.measure.overlap import TraceEvent, trace_steps
from dlbench.measure.timer import synchronize

#: The range around each profiled step.
MARK = "dlbench::comm_profile_step"
#: Steps profiled by default, and warm-up steps under the profiler before them.
DEFAULT_STEPS = 3
WARMUP_STEPS = 1
#: Communication names kept in the record (the longest first), to say what was counted.
KEEP_NAMES = 8
NAME_CHARS = 120


def profile_comm(step: Callable[[], Any], steps: int, device: torch.device,
                 warmup: int = WARMUP_STEPS,
                 clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Run ``warmup + steps`` more steps under torch.profiler; this rank's raw figures.

    Returns ``source`` (what was timed), ``steps``, ``warmup_steps``, per profiled step
    ``exposed_s``, ``comm_s`` and ``step_s`` (lists of seconds, None with a ``reason`` where
    the profiler failed), ``comm_names`` (the communication events counted, seconds in all)
    and ``cost_s`` (the wall time all of it added to the job).
    """
    t0 = clock()
    on_gpu = device.type == "cuda"
    out: dict[str, Any] = {
        "source": "cuda kernels" if on_gpu else "cpu operators", "steps": steps,
        "warmup_steps": warmup, "exposed_s": None, "comm_s": None, "step_s": None,
        "comm_names": None, "reason": None}
    prof, reason = _start(on_gpu)
    try:
        for i in range(warmup + steps):
            with _mark() if prof is not None and i >= warmup else contextlib.nullcontext():
                step()
                # note: a sync per profiled step, after the window: the step's kernels end
                # inside its range, so the trace's steps never overlap
                synchronize(device)
    except BaseException:
        if prof is not None:
            with contextlib.suppress(Exception):
                prof.stop()
        raise
    if prof is not None:
        try:
            prof.stop()
            found, names = trace_steps(_events(prof), MARK, device_trace=on_gpu)
            if len(found) != steps:
                reason = (f"the trace holds {len(found)} of the {steps} profiled steps' "
                          f"ranges")
            else:
                out.update(exposed_s=[s.exposed_s for s in found],
                           comm_s=[s.comm_s for s in found], step_s=[s.step_s for s in found],
                           comm_names={n[:NAME_CHARS]: t for n, t in sorted(
                               names.items(), key=lambda kv: -kv[1])[:KEEP_NAMES]})
        except Exception as exc:  # the trace could not be read: no figure, and why
            reason = f"the profiler's trace could not be read: {type(exc).__name__}: {exc}"
    out["reason"] = reason
    out["cost_s"] = clock() - t0
    return out


def not_profiled(reason: str) -> dict[str, Any]:
    """A rank's entry where nothing was profiled, and why (turned off, one process...)."""
    return {"source": None, "steps": 0, "warmup_steps": 0, "exposed_s": None, "comm_s": None,
            "step_s": None, "comm_names": None, "reason": reason, "cost_s": 0.0}


def _start(on_gpu: bool) -> tuple[Any, str | None]:
    """A started profiler, or None and why it could not start."""
    try:
        from torch.profiler import ProfilerActivity, profile, supported_activities  # heavy: Kineto

        if on_gpu and ProfilerActivity.CUDA not in supported_activities():
            return None, "this torch's profiler cannot time CUDA kernels (no CUPTI/Kineto)"
        # CPU activity on a GPU too: the step ranges are host events.
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
        prof = profile(activities=activities)
        prof.start()
        return prof, None
    except Exception as exc:
        return None, f"the profiler did not start: {type(exc).__name__}: {exc}"


def _mark():
    from torch.profiler import record_function  # heavy: Kineto, loaded by _start already
    return record_function(MARK)


def _events(prof: Any) -> list[TraceEvent]:
    """Kineto's events of the trace (nanoseconds, host and device on one timeline) in seconds."""
    raw = list(prof.profiler.kineto_results.events())
    # From the trace's first instant: epoch nanoseconds as a float would keep only ~0.2 us.
    t0 = min((e.start_ns() for e in raw), default=0)
    host = torch.autograd.DeviceType.CPU
    # A record_function range has a copy on the GPU's timeline (a "gpu_user_annotation"), which
    # is no kernel. torch 2.14's events say so (activity_type); torch 2.11's have no
    # activity_type (AttributeError on an H100), so there a device event named as a host
    # annotation of the same trace is taken for its copy.
    marks = {e.name() for e in raw if e.device_type() == host and e.is_user_annotation()}

    def annotation(e: Any, on_device: bool) -> bool:
        kind = getattr(e, "activity_type", None)
        return (e.is_user_annotation() or (kind is not None and "annotation" in str(kind()))
                or (on_device and e.name() in marks))
    return [TraceEvent(name=e.name(), start=(e.start_ns() - t0) * 1e-9,
                       end=(e.end_ns() - t0) * 1e-9, thread=e.start_thread_id(),
                       on_device=(on := e.device_type() != host),
                       annotation=annotation(e, on))
            for e in raw]
