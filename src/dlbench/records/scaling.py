"""The ``scaling`` kind: training across GPUs (ddp, dp, ps, fsdp, tp, fsdp+tp) at one GPU count.

A :class:`ScalingRecord` keeps every rank's raw step times; its figure is *total samples over the
slowest rank's window time* (never a mean of per-rank rates; :func:`dlbench.measure.stats.aggregate`).
The ranks of one tensor-parallel group train on one batch together, so their samples count once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dlbench.config import BACKENDS, INTERCONNECT_PROFILES, STRATEGIES, ConfigError, choice
from dlbench.measure.overlap import ExposedSummary, summarise
from dlbench.measure.stats import Summary, aggregate
from dlbench.records.base import Record, StepRateMixin, config_key
from dlbench.records.throughput import OnThroughputConfig, ThroughputConfig

#: The strategies with tensor parallelism: ``tp`` over every rank, ``fsdp+tp`` inside FSDP2.
TP_STRATEGIES = ("tp", "fsdp+tp")
#: fsdp+tp's TP degree without ``--tp``, where it divides the GPUs per host (else 1: one GPU
#: has nothing to split). Two GPUs per TP group keep TP's per-block all-reduces between a pair
#: of NVLink peers and leave the rest of the ranks to FSDP, which suits the 1B to 8B models.
DEFAULT_TP = 2
#: The strategies whose shards FSDP2 can offload to host memory (``--offload``).
OFFLOAD_STRATEGIES = ("fsdp", "fsdp+tp")
#: The strategies that train with fp8 linear layers under ``--fp8``: ps and dp, kept to
#: reproduce the older studies' setups, are left without it.
FP8_STRATEGIES = ("ddp", "fsdp", "tp", "fsdp+tp")
#: Steps each rank profiles after its window for its exposed communication (``--no-profile-comm``:
#: 0), after one warm-up step under the profiler; :mod:`dlbench.measure.comm_profile`.
COMM_PROFILE_STEPS = 3


@dataclass(frozen=True)
class ScalingConfig(OnThroughputConfig):
    """One data-parallel training measurement at one GPU count (weak scaling).

    Attributes:
        base: the per-GPU config: model, batch per GPU (``-b``), precision, compile, layout,
            optimizer, stopping rule, seed (as ``dlbench throughput``).
        gpus: GPUs in all (processes for ddp/ps, one per GPU; devices of the one process for dp).
            On a machine without CUDA, gloo processes on the CPU (``--gpus``).
        strategy: ``ddp``, ``dp`` (nn.DataParallel), ``ps`` (parameter server), ``fsdp``
            (FSDP2: parameters, gradients and optimizer state sharded over the ranks), ``tp``
            (tensor parallelism over every rank: one batch, one model split) or ``fsdp+tp``
            (TP in groups of ``tp`` ranks, FSDP2 across the groups) (``--strategy``).
        interconnect: a profile of :data:`dlbench.config.INTERCONNECT_PROFILES` (``--interconnect``).
        bucket_mb: DDP gradient bucket size in MiB (``--bucket-mb``; DDP's default is 25).
        backend: ``auto`` (nccl on CUDA, gloo on the CPU), ``nccl`` or ``gloo`` (``--backend``).
        nnodes: hosts the ``gpus`` are spread over (``--nnodes``).
        tp: the tensor-parallel degree, ranks per TP group (``--tp``): ``gpus`` for ``tp``;
            for ``fsdp+tp`` as given, else :data:`DEFAULT_TP` where it divides the GPUs per
            host, else 1 (resolved when the config is made, so a record keeps the degree it ran
            with); None for the other strategies.
        offload: FSDP2's CPU offload of the parameters, gradients and optimizer state
            (``--offload``; fsdp and fsdp+tp): the shards live in host memory, and the optimizer
            steps on the CPU.
        fp8: the model's linear layers trained in fp8 through torchao's float8 training
            (``--fp8``; ddp, fsdp, tp, fsdp+tp), its LM head and layers whose dimensions do not
            divide by 16 left in the run's precision (:mod:`dlbench.workloads.fp8`).
        comm_profile_steps: after the measured window, each rank of a multi-process job runs
            one warm-up and this many more steps under torch.profiler and keeps the time its
            collectives ran that no compute overlapped (:mod:`dlbench.measure.overlap`); 0
            turns it off (``--no-profile-comm``). Outside the window, so it changes no figure
            and is not part of the identity.
    """

    base: ThroughputConfig
    gpus: int
    strategy: str = "ddp"
    interconnect: str = "default"
    bucket_mb: float = 25.0
    backend: str = "auto"
    nnodes: int = 1
    tp: int | None = None
    offload: bool = False
    fp8: bool = False
    comm_profile_steps: int = COMM_PROFILE_STEPS

    def __post_init__(self) -> None:
        if self.comm_profile_steps < 0:
            raise ConfigError(f"comm_profile_steps must be >= 0, got {self.comm_profile_steps}",
                              "comm_profile_steps")
        if self.gpus < 1:
            raise ConfigError(f"gpus must be >= 1, got {self.gpus}", "gpus")
        choice("strategy", self.strategy, STRATEGIES)
        choice("interconnect", self.interconnect, INTERCONNECT_PROFILES)
        choice("backend", self.backend, BACKENDS)
        if self.bucket_mb <= 0:
            raise ConfigError(f"bucket_mb must be > 0, got {self.bucket_mb}", "bucket_mb")
        if self.nnodes < 1 or self.gpus % self.nnodes:
            raise ConfigError(f"gpus ({self.gpus} in all) must be a multiple of nnodes "
                              f"({self.nnodes})", "gpus", also=("nnodes",))
        if self.strategy == "dp" and self.nnodes > 1:
            raise ConfigError("strategy dp is one process on one host; use ddp or ps across "
                              "nodes", "strategy")
        if self.base.mode != "train" or self.base.method != "standard":
            raise ConfigError('dlbench scale measures training (mode="train", '
                              'method="standard")')
        self._check_tp()
        if self.offload and self.strategy not in OFFLOAD_STRATEGIES:
            raise ConfigError(f"offload is FSDP2's CPU offload of its shards: it applies to "
                              f"strategy fsdp and fsdp+tp, not {self.strategy}; drop "
                              f'offload=True or use strategy="fsdp"', "offload",
                              also=("strategy",))
        if self.fp8 and self.strategy not in FP8_STRATEGIES:
            raise ConfigError(f"fp8 applies to strategy {', '.join(FP8_STRATEGIES)}, not "
                              f"{self.strategy}; drop fp8=True or use one of those", "fp8",
                              also=("strategy",))

    def _check_tp(self) -> None:
        """Resolve and check the TP degree (a frozen field, set once here)."""
        if self.strategy not in TP_STRATEGIES:
            if self.tp is not None:
                raise ConfigError(f"tp applies to strategy fsdp+tp, not {self.strategy}", "tp",
                                  also=("strategy",))
            return
        per_host = self.gpus // self.nnodes
        if self.strategy == "tp":
            if self.tp is not None and self.tp != self.gpus:
                raise ConfigError(f"strategy tp splits the model over all gpus ({self.gpus}); "
                                  f'for TP groups of {self.tp}, use strategy="fsdp+tp", '
                                  f"tp={self.tp}", "strategy", also=("gpus",))
            if self.nnodes > 1:
                raise ConfigError("strategy tp keeps its group on one host (an all-reduce per "
                                  'block and pass); across hosts use strategy="fsdp+tp"',
                                  "strategy")
            object.__setattr__(self, "tp", self.gpus)
        elif self.tp is None:
            object.__setattr__(self, "tp", DEFAULT_TP if per_host % DEFAULT_TP == 0 else 1)
        if self.tp < 1 or per_host % self.tp:
            raise ConfigError(f"tp {self.tp} must divide the GPUs per host ({per_host}): a TP "
                              "group stays on one host", "tp")
        if self.base.precision == "fp16":
            # GradScaler's found-inf flag is per rank; a TP group would skip steps apart.
            raise ConfigError(f"strategy {self.strategy} runs fp32, tf32 or bf16 (fp16's loss "
                              "scaling would need its overflow check agreed across the TP group)",
                              "strategy")

    @property
    def tp_degree(self) -> int:
        """Ranks per tensor-parallel group: 1 for the data-parallel strategies."""
        return self.tp or 1

    @property
    def replicas(self) -> int:
        """Data-parallel replicas: model copies, each fed batches of its own (GPUs over the TP
        degree; dp's one process holds ``gpus`` of them)."""
        return self.gpus // self.tp_degree

    @property
    def processes(self) -> int:
        """Processes in the job: one per GPU, except dp (one process driving every GPU)."""
        return 1 if self.strategy == "dp" else self.gpus

    def key(self) -> str:
        d = self.to_dict()
        d["base"] = self.base.key()
        del d["comm_profile_steps"]  # after the window: it measures nothing the key names
        # A field at its default drops out: the keys of records made before it existed.
        if d["tp"] is None:
            del d["tp"]
        for lever in ("offload", "fp8"):
            if not d[lever]:
                del d[lever]
        return config_key(d)

    @property
    def label(self) -> str:
        parts = [self.base.label, f"x{self.gpus}", self.strategy]
        if self.strategy == "fsdp+tp":
            parts.append(f"tp={self.tp}")
        parts += [lever for lever in ("offload", "fp8") if getattr(self, lever)]
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
class ScalingRank:
    """What one rank of a scaling job measured, as its worker reports it
    (:func:`dlbench.workloads.scaling.measure_rank`); the job's ranks make one
    :class:`ScalingRecord` (:meth:`ScalingRecord.from_ranks`)."""

    rank: int
    host: str
    step_times_s: tuple[float, ...]
    warmup_times_s: tuple[float, ...]
    samples_per_step: int
    first_step_s: float
    build_s: float
    window_wall_s: float
    stop_reason: str | None
    unit: str
    units_per_sample: int
    flops_per_sample: int | None           # rank 0 counts them; None on the others
    memory: dict[str, int | None]
    final_loss: float | None
    telemetry: dict[str, Any] | None = None
    comm_profile: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ScalingRank":
        """From a rank's JSON (the fields above; the launcher's own keys, such as ``ok`` and
        ``time``, are not the measurement's and are left out)."""
        return cls(rank=int(d["rank"]), host=str(d["host"]),
                   step_times_s=tuple(d["step_times_s"]),
                   warmup_times_s=tuple(d["warmup_times_s"]),
                   samples_per_step=int(d["samples_per_step"]),
                   first_step_s=float(d["first_step_s"]), build_s=float(d["build_s"]),
                   window_wall_s=float(d["window_wall_s"]), stop_reason=d.get("stop_reason"),
                   unit=str(d["unit"]), units_per_sample=int(d["units_per_sample"]),
                   flops_per_sample=d.get("flops_per_sample"), memory=dict(d.get("memory") or {}),
                   final_loss=d.get("final_loss"), telemetry=d.get("telemetry"),
                   comm_profile=d.get("comm_profile"))


@dataclass(frozen=True, kw_only=True)
class ScalingRecord(StepRateMixin, Record):
    """One scaling measurement (or its failure), with every rank's raw times.

    ``rank_step_times_s[r]`` is rank r's measured window; ``rank_samples_per_step[r]`` the batch
    it fed (for dp the one process's batch, per-GPU batch x GPUs). The ranks of a TP group feed
    one batch between them, so only each group's first rank's counts
    (:meth:`counted_samples_per_step`). ``rank_errors`` holds each failed rank's message and
    traceback; ``error`` is the first failure's (the cause, not the echoes).
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
    # Each rank's profile of its exposed communication after the window, rank order: per
    # profiled step ``exposed_s``, ``comm_s`` and ``step_s`` (None, with a ``reason``, where
    # the rank measured none), ``source``, ``steps``, ``cost_s``
    # (dlbench.measure.comm_profile); () in records made before it existed.
    rank_comm_profile: tuple[dict[str, Any], ...] = ()

    @classmethod
    def from_ranks(cls, config: ScalingConfig, env: dict, ranks: "list[ScalingRank]",
                   launch_env: dict[str, str], backend: str | None) -> "ScalingRecord":
        """The job's record from its ranks' reports: every rank's raw times in rank order; the
        slowest rank's first step, build and window clock; rank 0's memory, loss, FLOPs and
        telemetry (its host's GPUs)."""
        rs = sorted(ranks, key=lambda r: r.rank)
        slow = max(rs, key=lambda r: math.fsum(r.step_times_s))
        first = rs[0]
        return cls(
            config=config, env=env, rank_step_times_s=tuple(r.step_times_s for r in rs),
            rank_warmup_times_s=tuple(r.warmup_times_s for r in rs),
            rank_samples_per_step=tuple(r.samples_per_step for r in rs),
            rank_hosts=tuple(r.host for r in rs),
            first_step_s=max(r.first_step_s for r in rs), build_s=max(r.build_s for r in rs),
            window_wall_s=slow.window_wall_s, stop_reason=first.stop_reason, unit=first.unit,
            units_per_sample=first.units_per_sample, flops_per_sample=first.flops_per_sample,
            memory=first.memory, final_loss=first.final_loss, launch_env=launch_env,
            backend=backend, telemetry=first.telemetry,
            rank_comm_profile=tuple(r.comm_profile for r in rs if r.comm_profile))

    def exposed_comm(self) -> ExposedSummary | None:
        """Exposed communication per step and its share of the profiled steps, over the ranks
        that measured it (:func:`dlbench.measure.overlap.summarise`); None where none did."""
        return summarise(self.rank_comm_profile) if self.ok else None

    def counted_samples_per_step(self) -> tuple[int, ...]:
        """Each rank's samples in the job's figure: its batch on the first rank of its TP group
        (rank % tp == 0, see :mod:`dlbench.workloads.tp`), 0 on the others, which trained on
        that same batch; every rank's batch for the data-parallel strategies."""
        tp = self.config.tp_degree
        return tuple(n if r % tp == 0 else 0 for r, n in enumerate(self.rank_samples_per_step))

    @property
    def samples_per_step(self) -> int:
        """Distinct samples the job trains on per step: per-GPU batch x data-parallel replicas
        (not x GPUs under tensor parallelism)."""
        return sum(self.counted_samples_per_step())

    @property
    def step_times_s(self) -> tuple[float, ...]:
        """The slowest rank's window (what the figure's time is)."""
        if not self.rank_step_times_s:
            return ()
        return max(self.rank_step_times_s, key=math.fsum)

    def summary(self) -> Summary | None:
        if not self.ok or not self.rank_step_times_s:
            return None
        return aggregate(self.rank_step_times_s, self.counted_samples_per_step(),
                         self.config.base.stop.confidence)

    def stop_rule(self):
        return self.config.base.stop
