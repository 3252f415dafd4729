"""Record kinds of the distributed workloads: scaling (ddp, dp, ps) and collectives (comm).

A :class:`ScalingRecord` keeps every rank's raw step times; its figure is *total samples over the
slowest rank's window time* (never a mean of per-rank rates). A :class:`CommRecord` keeps every
rank's raw per-iteration times of one collective at one size, and its algbw / busbw as nccl-tests
defines them (doc/PERFORMANCE.md). Both fulfil the contract of :mod:`dlbench.results` and are
registered in ``RECORD_TYPES``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, Sequence

from dlbench.config import ConfigError, ThroughputConfig, _choice
from dlbench.measure.stats import Summary, mean, summarize
from dlbench.results import SCHEMA_VERSION, RecordBase, StepRateMixin, new_id, utc_now

STRATEGIES = ("ddp", "dp", "ps")
BACKENDS = ("auto", "nccl", "gloo")

# Variables passed to every rank, always: dlbench never turns NVLink multicast (NVLS) on, since
# on some systems it needs fabric-manager state that a benchmark must not depend on or disturb.
SAFETY_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
              "NVSHMEM_DISABLE_NVLS": "1"}

# Interconnect profiles: NCCL's own switches for its transports (NCCL docs, "Environment
# Variables"). P2P = NVLink / PCIe peer-to-peer between GPUs; SHM = through host shared memory;
# IB = InfiniBand / RoCE verbs. With P2P and SHM both off, NCCL goes through its network path.
INTERCONNECTS: dict[str, dict[str, str]] = {
    "default": {},
    "no-p2p": {"NCCL_P2P_DISABLE": "1"},
    "no-shm": {"NCCL_SHM_DISABLE": "1"},
    "no-p2p+no-shm": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
    "no-ib": {"NCCL_IB_DISABLE": "1"},
}


def interconnect_env(name: str) -> dict[str, str]:
    """The variables of a profile plus the safety variables (which no profile can override)."""
    _choice("--interconnect", name, tuple(INTERCONNECTS))
    return {**INTERCONNECTS[name], **SAFETY_ENV}


def _key(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ScalingConfig:
    """One data-parallel training measurement at one GPU count (weak scaling).

    Attributes:
        base: the per-GPU config: model, batch per GPU (``-b``), precision, compile, layout,
            optimizer, stopping rule, seed (as ``dlbench throughput``).
        gpus: GPUs in all (processes for ddp/ps, one per GPU; devices of the one process for dp).
            On a machine without CUDA, gloo processes on the CPU (``--gpus``).
        strategy: ``ddp``, ``dp`` (nn.DataParallel) or ``ps`` (parameter server) (``--strategy``).
        interconnect: a profile of :data:`INTERCONNECTS` (``--interconnect``).
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
        _choice("--strategy", self.strategy, STRATEGIES)
        _choice("--interconnect", self.interconnect, tuple(INTERCONNECTS))
        _choice("--backend", self.backend, BACKENDS)
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
    def model(self) -> str:
        return self.base.model

    @property
    def processes(self) -> int:
        """Processes in the job: one per GPU, except dp (one process driving every GPU)."""
        return 1 if self.strategy == "dp" else self.gpus

    def key(self) -> str:
        d = self.to_dict()
        d["base"] = self.base.key()
        return _key(d)

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

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["base"] = self.base.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ScalingConfig":
        d = dict(d)
        d["base"] = ThroughputConfig.from_dict(d["base"])
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def aggregate(rank_step_times: Sequence[Sequence[float]], rank_samples_per_step: Sequence[int],
              confidence: float = 0.95) -> Summary:
    """The figure of a data-parallel window from every rank's raw step times.

    Ranks step in lockstep (they agree when to stop), so each did the same number of steps. The
    throughput is all ranks' samples over the *slowest* rank's window time; its interval comes
    from that rank's steps. Never a mean of per-rank rates.
    """
    if not rank_step_times or any(not t for t in rank_step_times):
        raise ValueError("every rank needs step times")
    counts = {len(t) for t in rank_step_times}
    if len(counts) != 1:
        raise ValueError(f"ranks measured different step counts {sorted(counts)}; "
                         "data-parallel ranks must step in lockstep")
    slowest = max(rank_step_times, key=math.fsum)
    return summarize(slowest, sum(rank_samples_per_step), confidence)


def scaling_factor(throughput: float, baseline: float) -> float:
    """Seed 000's figure in parentheses: throughput at N GPUs over throughput at 1 GPU."""
    if baseline <= 0:
        raise ValueError("baseline throughput must be > 0")
    return throughput / baseline


def scaling_efficiency(factor: float, gpus: int, base_gpus: int = 1) -> float:
    """The factor over the ideal one (linear in GPUs): 1.0 is perfect weak scaling."""
    return factor / (gpus / base_gpus)


@dataclass(frozen=True)
class ScalingRecord(StepRateMixin, RecordBase):
    """One scaling measurement (or its failure), with every rank's raw times.

    ``rank_step_times_s[r]`` is rank r's measured window; ``rank_samples_per_step[r]`` its batch
    (for dp the one process's batch, per-GPU batch x GPUs). ``rank_errors`` holds each failed
    rank's message and traceback; ``error`` is the first failure's (the cause, not the echoes).
    """

    kind: ClassVar[str] = "scaling"

    config: ScalingConfig
    env: dict[str, Any]
    status: str = "ok"
    error_type: str | None = None
    error: str | None = None
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
    run_id: str | None = None
    id: str = field(default_factory=new_id)
    created_at: str = field(default_factory=utc_now)
    schema_version: int = SCHEMA_VERSION

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

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ScalingRecord":
        d = dict(d)
        d.pop("kind", None)
        d["config"] = ScalingConfig.from_dict(d["config"])
        for k in ("rank_step_times_s", "rank_warmup_times_s"):
            d[k] = tuple(tuple(x) for x in d.get(k) or ())
        for k in ("rank_samples_per_step", "rank_hosts"):
            d[k] = tuple(d.get(k) or ())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


# -- collectives --------------------------------------------------------------------------------
COMM_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md, "Bus bandwidth"): busbw = algbw x this.

    AllReduce 2(n-1)/n; ReduceScatter and AllGather (n-1)/n; Broadcast 1 (and Reduce 1);
    AllToAll (n-1)/n, as nccl-tests' alltoall.cu computes it. The factor makes the figure
    comparable with the hardware's peak link bandwidth whatever the rank count.
    """
    _choice("--op", op, COMM_OPS)
    if n < 1:
        raise ValueError(f"rank count must be >= 1, got {n}")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def algbw(size_bytes: int, time_s: float) -> float:
    """nccl-tests' algorithm bandwidth: the operation's size over its time, bytes per second.

    The size is nccl-tests' "size" column: the buffer being reduced or broadcast; for all_gather
    the gathered (output) buffer; for reduce_scatter the input buffer; for all_to_all one rank's
    send buffer.
    """
    return size_bytes / time_s


@dataclass(frozen=True)
class CommConfig:
    """One collective at one size.

    Attributes:
        op: one of :data:`COMM_OPS` (``--op``).
        size_bytes: nccl-tests' size column (see :func:`algbw`) (``--min`` .. ``--max``).
        dtype: element type (``--dtype``), float32 by default as nccl-tests.
        inplace: the output buffer is (or holds) the input, as nccl-tests' in-place columns.
        ranks: processes in all (``--gpus`` x ``--nnodes``).
        backend: ``nccl`` or ``gloo``.
        interconnect: a profile of :data:`INTERCONNECTS`.
        iters: timed iterations (``--iters``, nccl-tests' ``-n``); warmup: untimed ones (``-w``).
    """

    op: str
    size_bytes: int
    ranks: int
    backend: str
    dtype: str = "float32"
    inplace: bool = False
    interconnect: str = "default"
    iters: int = 20
    warmup: int = 5

    def __post_init__(self) -> None:
        _choice("--op", self.op, COMM_OPS)
        _choice("--interconnect", self.interconnect, tuple(INTERCONNECTS))
        if self.size_bytes < 1 or self.ranks < 1 or self.iters < 1 or self.warmup < 0:
            raise ConfigError("--min/--max, --gpus and --iters must be >= 1, --warmup >= 0")

    model = None  # the store's model column: a collective has none

    def key(self) -> str:
        return _key(asdict(self))

    @property
    def label(self) -> str:
        return (f"{self.op} {self.size_bytes}B {self.dtype} {'in-place' if self.inplace else 'out-of-place'}"
                f" x{self.ranks} {self.backend}"
                + ("" if self.interconnect == "default" else f" {self.interconnect}"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CommConfig":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass(frozen=True)
class CommRecord(RecordBase):
    """A collective's timing at one size, every rank's raw iteration times, and its #wrong.

    ``time_s`` follows nccl-tests' default (``-a 1``): each rank's mean iteration time, averaged
    over ranks; ``max_time_s`` is the slowest rank's. ``wrong`` counts elements that differ from
    the expected result, summed over ranks; a row with ``wrong > 0`` has status ``error``.
    """

    kind: ClassVar[str] = "comm"

    config: CommConfig
    env: dict[str, Any]
    status: str = "ok"
    error_type: str | None = None
    error: str | None = None
    rank_times_s: tuple[tuple[float, ...], ...] = ()
    count: int = 0                     # elements per rank's input buffer
    wrong: int | None = None
    launch_env: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None
    id: str = field(default_factory=new_id)
    created_at: str = field(default_factory=utc_now)
    schema_version: int = SCHEMA_VERSION

    @property
    def time_s(self) -> float | None:
        if not self.rank_times_s or any(not t for t in self.rank_times_s):
            return None
        return mean([mean(t) for t in self.rank_times_s])

    @property
    def max_time_s(self) -> float | None:
        if not self.rank_times_s or any(not t for t in self.rank_times_s):
            return None
        return max(mean(t) for t in self.rank_times_s)

    def algbw(self) -> float | None:
        """Bytes per second (nccl-tests prints GB/s = 1e9 bytes/s)."""
        t = self.time_s
        return None if t is None else algbw(self.config.size_bytes, t)

    def busbw(self) -> float | None:
        a = self.algbw()
        return None if a is None else a * busbw_factor(self.config.op, self.config.ranks)

    def headline(self) -> float | None:
        """Bus bandwidth in GB/s (only for a correct result)."""
        b = self.busbw()
        return None if b is None or not self.ok else b / 1e9

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CommRecord":
        d = dict(d)
        d.pop("kind", None)
        d["config"] = CommConfig.from_dict(d["config"])
        d["rank_times_s"] = tuple(tuple(x) for x in d.get("rank_times_s") or ())
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})
