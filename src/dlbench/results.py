"""Result records: frozen, with every raw sample, the full config and the environment.

Summaries are computed from the raw samples on demand (``record.summary()``), so a record never
holds a figure that its samples do not support. Failures are records too (``status="error"``), so
a sweep that meets an out-of-memory keeps going and the report shows where the boundary was.

Every record kind provides what the store needs: ``kind`` (a class variable), ``id``, ``run_id``,
``created_at``, ``status``, ``error_type``, ``config`` (with ``key()``, ``label`` and, where it
applies, ``model``), ``headline()`` (the one figure stored in the index column, or None),
``to_dict()``, ``from_dict()`` and ``with_run()``. A new kind is registered in ``RECORD_TYPES``.
"""

from __future__ import annotations

import datetime as _dt
import math
import uuid
from dataclasses import asdict, dataclass, field, replace
from typing import Any, ClassVar

from dlbench.config import ThroughputConfig
from dlbench.measure.stats import Summary, summarize

SCHEMA_VERSION = 1


class ErrorType:
    OOM = "oom"                   # the batch does not fit; deterministic, skipped by --resume
    NAN = "nan"                   # the loss was not finite
    UNSUPPORTED = "unsupported"   # the device or library cannot run this config
    FATAL = "fatal"               # the process is unusable (illegal memory access, dead NCCL)
    CRASHED = "crashed"           # the worker process died without a result
    TIMEOUT = "timeout"           # the worker process ran past its limit
    EXCEPTION = "exception"       # anything else; the message and traceback tail are kept
    INTERRUPTED = "interrupted"   # stopped by Ctrl-C / SIGINT; what it had measured is kept


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def new_id() -> str:
    return uuid.uuid4().hex[:12]


class RecordBase:
    """What every record kind shares: its status, serialisation with its kind and config, and
    its run."""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["kind"] = self.kind
        d["config"] = self.config.to_dict()
        return d

    def with_run(self, run_id: str):
        return replace(self, run_id=run_id)


class StepRateMixin:
    """Figures derived from ``summary()`` for records timed in steps (throughput, scaling).

    The class provides ``summary()``, ``units_per_sample``, ``flops_per_sample`` and
    ``stop_rule()``.
    """

    def headline(self) -> float | None:
        """Samples per second, the figure the store indexes."""
        s = self.summary()
        return None if s is None else s.throughput

    def units_per_s(self) -> float | None:
        s = self.summary()
        return None if s is None else s.throughput * self.units_per_sample

    def achieved_tflops(self) -> float | None:
        """Model FLOPs per second actually done (counted FLOPs x samples / time), in TFLOP/s."""
        s = self.summary()
        if s is None or not self.flops_per_sample:
            return None
        return self.flops_per_sample * s.throughput / 1e12

    def converged(self) -> bool:
        """Whether the interval reached its target (a capped window is flagged noisy)."""
        s = self.summary()
        return s is not None and s.rel_halfwidth <= self.stop_rule().target_rel_ci


@dataclass(frozen=True)
class ThroughputRecord(StepRateMixin, RecordBase):
    """One throughput measurement (or its failure).

    Times are in seconds. ``step_times_s`` is the measured window only; the first step (which
    holds ``torch.compile`` and autotuning) and the warm-up are kept apart and never enter the
    throughput.
    """

    kind: ClassVar[str] = "throughput"

    config: ThroughputConfig
    env: dict[str, Any]
    status: str = "ok"                           # "ok" or "error"
    error_type: str | None = None
    error: str | None = None
    step_times_s: tuple[float, ...] = ()
    warmup_times_s: tuple[float, ...] = ()
    first_step_s: float | None = None            # includes compilation when compiled
    build_s: float | None = None                 # model build + move to device
    window_wall_s: float | None = None           # host clock across the window, one sync at its end
    stop_reason: str | None = None
    samples_per_step: int = 0
    unit: str = "samples"
    units_per_sample: int = 1
    flops_per_sample: int | None = None          # counted for this mode; optimizer not included
    memory: dict[str, int | None] = field(default_factory=dict)
    final_loss: float | None = None
    # GPU/host series over the run and their summary (dlbench.telemetry); None when off, and in
    # records stored before telemetry existed.
    telemetry: dict[str, Any] | None = None
    # fp16 training: GradScaler's loss scale at the window's start and end. Each overflow skips
    # an optimizer step and halves the scale, so a drop means cheaper, skipped steps were timed.
    loss_scale: tuple[float, float] | None = None
    # --profile: the steps profiled after the window and their kernels, each (name, calls,
    # seconds) summed over those steps (dlbench.measure.kernels); None when not profiled.
    profile: dict[str, Any] | None = None
    run_id: str | None = None
    id: str = field(default_factory=new_id)
    created_at: str = field(default_factory=utc_now)
    schema_version: int = SCHEMA_VERSION

    def summary(self) -> Summary | None:
        """Figures from the raw step times; None for a failed result."""
        if not self.ok or not self.step_times_s:
            return None
        return summarize(self.step_times_s, self.samples_per_step, self.config.stop.confidence)

    def skipped_steps(self) -> int | None:
        """At least this many optimizer steps of the window were skipped for overflow (fp16;
        None where no loss scaling ran). The scale only grows after 2,000 clean steps, so in
        a window shorter than that each halving is one skipped step."""
        if not self.loss_scale:
            return None
        start, end = self.loss_scale
        return max(0, round(math.log2(start / end))) if start > 0 and end > 0 else None

    def stop_rule(self):
        return self.config.stop

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ThroughputRecord":
        d = dict(d)
        d.pop("kind", None)
        d["config"] = ThroughputConfig.from_dict(d["config"])
        for k in ("step_times_s", "warmup_times_s"):
            d[k] = tuple(d.get(k) or ())
        if d.get("loss_scale") is not None:
            d["loss_scale"] = tuple(d["loss_scale"])
        return cls(**d)



# kind -> "module:Class"; imported when a record of that kind is read, so the store can hold
# kinds whose modules a given command never imports.
RECORD_TYPES: dict[str, str] = {
    "throughput": "dlbench.results:ThroughputRecord",
    "scaling": "dlbench.results_dist:ScalingRecord",
    "comm": "dlbench.results_dist:CommRecord",
    "maxbatch": "dlbench.results_memory:MaxBatchRecord",
    "peak": "dlbench.results_peak:PeakRecord",
    "net": "dlbench.results_net:NetRecord",
    "train": "dlbench.results_train:TrainRecord",
}


def record_from_dict(d: dict[str, Any]):
    """Rebuild a record of whatever kind ``d`` says it is."""
    import importlib

    kind = d.get("kind", "throughput")
    if kind not in RECORD_TYPES:
        raise ValueError(f"unknown record kind {kind!r}; is this dlbench older than the file?")
    module, name = RECORD_TYPES[kind].split(":")
    return getattr(importlib.import_module(module), name).from_dict(d)
