"""The ``scaling`` kind: data-parallel training (ddp, dp, ps) at one GPU count.

A :class:`ScalingRecord` keeps every rank's raw step times; its figure is *total samples over the
slowest rank's window time* (never a mean of per-rank rates; :func:`dlbench.measure.stats.aggregate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dlbench.config import BACKENDS, INTERCONNECT_PROFILES, STRATEGIES, ConfigError, choice
from dlbench.measure.stats import Summary, aggregate
from dlbench.records.base import Record, StepRateMixin
from dlbench.records.throughput import OnThroughputConfig, ThroughputConfig


@dataclass(frozen=True)
class ScalingConfig(OnThroughputConfig):
    """One data-parallel training measurement at one GPU count (weak scaling).

    Attributes:
        base: the per-GPU config: model, batch per GPU (``-b``), precision, compile, layout,
            optimizer, stopping rule, seed (as ``dlbench throughput``).
        gpus: GPUs in all (processes for ddp/ps, one per GPU; devices of the one process for dp).
            On a machine without CUDA, gloo processes on the CPU (``--gpus``).
        strategy: ``ddp``, ``dp`` (nn.DataParallel), ``ps`` (parameter server) or ``fsdp``
            (FSDP2: parameters, gradients and optimizer state sharded over the ranks)
            (``--strategy``).
        interconnect: a profile of :data:`dlbench.config.INTERCONNECT_PROFILES` (``--interconnect``).
        bucket_mb: DDP gradient bucket size in MiB (``--bucket-mb``; DDP's default is 25).
        backend: ``auto`` (nccl on CUDA, gloo on the CPU), ``nccl`` or ``gloo`` (``--backend``).
        nnodes: hosts the ``gpus`` are spread over (``--nnodes``).
    """

    base: ThroughputConfig
    gpus: int
    strategy: str = "ddp"
    interconnect: str = "default"
    bucket_mb: float = 25.0
    backend: str = "auto"
    nnodes: int = 1

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ConfigError(f"--gpus must be >= 1, got {self.gpus}")
        choice("--strategy", self.strategy, STRATEGIES)
        choice("--interconnect", self.interconnect, INTERCONNECT_PROFILES)
        choice("--backend", self.backend, BACKENDS)
        if self.bucket_mb <= 0:
            raise ConfigError(f"--bucket-mb must be > 0, got {self.bucket_mb}")
        if self.nnodes < 1 or self.gpus % self.nnodes:
            raise ConfigError(f"--gpus ({self.gpus} in all) must be a multiple of --nnodes "
                              f"({self.nnodes})")
        if self.strategy == "dp" and self.nnodes > 1:
            raise ConfigError("--strategy dp is one process on one host; use ddp or ps across nodes")
        if self.base.mode != "train" or self.base.method != "standard":
            raise ConfigError("dlbench scale measures training (--mode train, --method standard)")

    @property
    def processes(self) -> int:
        """Processes in the job: one per GPU, except dp (one process driving every GPU)."""
        return 1 if self.strategy == "dp" else self.gpus

    @property
    def label(self) -> str:
        parts = [self.base.label, f"x{self.gpus}", self.strategy]
        if self.strategy == "ddp" and self.bucket_mb != 25.0:
            parts.append(f"bucket={self.bucket_mb:g}MiB")
        if self.interconnect != "default":
            parts.append(self.interconnect)
        if self.nnodes > 1:
            parts.append(f"{self.nnodes} nodes")
        return " ".join(parts)


def scaling_factor(throughput: float, baseline: float) -> float:
    """The factor tf_cnn_benchmarks prints in parentheses: throughput at N GPUs over
    throughput at 1 GPU."""
    if baseline <= 0:
        raise ValueError("baseline throughput must be > 0")
    return throughput / baseline


def scaling_efficiency(factor: float, gpus: int, base_gpus: int = 1) -> float:
    """The factor over the ideal one (linear in GPUs): 1.0 is perfect weak scaling."""
    return factor / (gpus / base_gpus)


@dataclass(frozen=True, kw_only=True)
class ScalingRecord(StepRateMixin, Record):
    """One scaling measurement (or its failure), with every rank's raw times.

    ``rank_step_times_s[r]`` is rank r's measured window; ``rank_samples_per_step[r]`` its batch
    (for dp the one process's batch, per-GPU batch x GPUs). ``rank_errors`` holds each failed
    rank's message and traceback; ``error`` is the first failure's (the cause, not the echoes).
    """

    config_type: ClassVar[type] = ScalingConfig
    kind: ClassVar[str] = "scaling"

    failed_rank: int | None = None
    rank_errors: dict[str, str] = field(default_factory=dict)
    rank_step_times_s: tuple[tuple[float, ...], ...] = ()
    rank_warmup_times_s: tuple[tuple[float, ...], ...] = ()
    rank_samples_per_step: tuple[int, ...] = ()
    rank_hosts: tuple[str, ...] = ()
    first_step_s: float | None = None            # slowest rank's first step (compile, autotune)
    build_s: float | None = None                 # slowest rank's model build + wrap
    window_wall_s: float | None = None           # slowest rank's host clock across the window
    stop_reason: str | None = None
    unit: str = "samples"
    units_per_sample: int = 1
    flops_per_sample: int | None = None
    memory: dict[str, int | None] = field(default_factory=dict)  # rank 0's device
    final_loss: float | None = None              # rank 0's
    launch_env: dict[str, str] = field(default_factory=dict)     # variables dlbench set per rank
    backend: str | None = None
    # The first host's GPUs (all of them, sampled by its local rank 0) over the run, with the
    # summary summed over those GPUs (dlbench.telemetry); None when off. In a multi-node job the
    # other hosts' GPUs are not in it.
    telemetry: dict[str, Any] | None = None

    @property
    def samples_per_step(self) -> int:
        return sum(self.rank_samples_per_step)

    @property
    def step_times_s(self) -> tuple[float, ...]:
        """The slowest rank's window (what the figure's time is)."""
        if not self.rank_step_times_s:
            return ()
        return max(self.rank_step_times_s, key=math.fsum)

    def summary(self) -> Summary | None:
        if not self.ok or not self.rank_step_times_s:
            return None
        return aggregate(self.rank_step_times_s, self.rank_samples_per_step,
                         self.config.base.stop.confidence)

    def stop_rule(self):
        return self.config.base.stop
