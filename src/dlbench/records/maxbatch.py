"""The ``maxbatch`` record: the largest batch that trains without running out of memory.

A search probes batch sizes (doubling, then bisection), each probe a few training steps in a
fresh process. The record keeps every probe, those that ran out of memory included, so the
boundary is bracketed: ``best_batch`` fits and ``first_oom_batch`` does not. The throughput at
``best_batch`` is a normal :class:`~dlbench.records.throughput.ThroughputRecord` of the same run (the base
setup at that batch). A search under a strategy (``parallel``: ddp, fsdp, tp, fsdp+tp on N GPUs)
probes the batch per replica with a torchrun job of all its GPUs, where an out-of-memory on any
rank means the batch does not fit, and its throughput is a
:class:`~dlbench.records.scaling.ScalingRecord`. Should that measurement run out of memory where the short probe did not,
a corrected record follows in the same run, with the failure as one more probe; the later wins.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from dlbench.config import ConfigError
from dlbench.records.base import Record
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig

#: The strategies a search can probe under (dp and ps, kept to reproduce older studies, are not).
STRATEGIES = ("ddp", "fsdp", "tp", "fsdp+tp")

#: Outcome of a probe that fitted; any other outcome is an ``ErrorType`` value (``oom``, ...).
FITS = "ok"


@dataclass(frozen=True)
class MaxBatchConfig:
    """What a search looks for: a training setup whose batch size is the unknown.

    Attributes:
        base: the setup (model, mode, precision, layout, compile, optimizer, checkpointing,
            input size, device); its ``batch_size`` is ignored and stored as 1.
        start: first batch probed; None for the model's default batch on this device (``--start``).
        limit: largest batch probed; None for no limit (``--max``).
        tolerance: bisection stops once the bracket ``[fits, OOM)`` is narrower than this
            fraction of the batch that fits; 0 finds the exact boundary (``--tolerance``).
        parallel: None for one process on one device; else the strategy the batch must fit
            under (``--strategy``, ``--gpus``, ``--tp``, ``--offload``, ``--fp8``), a scaling
            config whose base is ``base``: the unknown is then the batch per data-parallel
            replica (a GPU under ddp and fsdp, a TP group under tp and fsdp+tp).
    """

    base: ThroughputConfig
    start: int | None = None
    limit: int | None = None
    tolerance: float = 0.05
    parallel: ScalingConfig | None = None

    def __post_init__(self) -> None:
        if self.base.batch_size != 1:
            object.__setattr__(self, "base", replace(self.base, batch_size=1))
        if self.parallel is not None:
            if self.parallel.strategy not in STRATEGIES:
                raise ConfigError(f"strategy {self.parallel.strategy}: the largest batch is "
                                  f"searched under {', '.join(STRATEGIES)}", "strategy")
            if self.parallel.base != self.base:
                object.__setattr__(self, "parallel", replace(self.parallel, base=self.base))
        if self.start is not None and self.start < 1:
            raise ConfigError(f"start must be >= 1, got {self.start}", "start")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1, got {self.limit}", "limit")
        if not 0 <= self.tolerance < 1:
            raise ConfigError(f"tolerance must be a fraction in [0, 1), got {self.tolerance}",
                              "tolerance")

    @property
    def model(self) -> str:
        return self.base.model

    @property
    def strategy(self) -> str:
        """The strategy the batch must fit under; ``none`` for one process on one device."""
        return "none" if self.parallel is None else self.parallel.strategy

    @property
    def gpus(self) -> int:
        """The GPUs (gloo processes on a CPU) of each probe's job: 1 for one process."""
        return 1 if self.parallel is None else self.parallel.gpus

    def at(self, batch: int) -> ThroughputConfig | ScalingConfig:
        """What runs at ``batch``: the base setup, or the strategy's job with ``batch`` per
        replica."""
        base = replace(self.base, batch_size=batch)
        return base if self.parallel is None else replace(self.parallel, base=base)

    def key(self) -> str:
        """The setup's identity whatever the search bounds: what ``-b auto`` looks up. A search
        under a strategy is keyed by the strategy's config too (one process keeps its key)."""
        what = self.base.key() if self.parallel is None else f"{self.parallel.key()}:parallel"
        return hashlib.sha256(f"maxbatch:{what}".encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """``maxbatch resnet50 bf16 train cl``: the base label without its batch; under a
        strategy with its GPUs and levers (``maxbatch llama-3.2-1b bf16 train x8 fsdp``)."""
        parts = self.base.label.split(" ")
        tail = [] if self.parallel is None else \
            self.parallel.label[len(self.base.label):].split()
        return " ".join(["maxbatch", parts[0], *parts[2:], *tail])

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"base": self.base.to_dict(), "start": self.start,
                             "limit": self.limit, "tolerance": self.tolerance}
        if self.parallel is not None:  # its base is ``base``: stored once
            d["parallel"] = {k: v for k, v in self.parallel.to_dict().items() if k != "base"}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MaxBatchConfig":
        base = ThroughputConfig.from_dict(d["base"])
        par = d.get("parallel")
        return cls(base=base, start=d.get("start"), limit=d.get("limit"),
                   tolerance=d.get("tolerance", 0.05),
                   parallel=None if par is None else ScalingConfig.from_dict(
                       {**par, "base": d["base"]}))


@dataclass(frozen=True)
class Probe:
    """One probed batch size: whether it fitted and, if it did, its memory peaks (bytes)."""

    batch: int
    outcome: str                                # "ok" or an ErrorType value ("oom", "fatal", ...)
    allocated_peak_bytes: int | None = None
    reserved_peak_bytes: int | None = None
    device_total_bytes: int | None = None
    wall_s: float | None = None                 # the probe's process, start-up included
    error: str | None = None                    # first line of the error, for a failed probe
    fixed_bytes: int | None = None              # parameters, gradients, optimizer state

    @property
    def fits(self) -> bool:
        return self.outcome == FITS


@dataclass(frozen=True, kw_only=True)
class MaxBatchRecord(Record):
    """The result of one search (or its failure, e.g. when not even batch 1 fits)."""

    config_type: ClassVar[type] = MaxBatchConfig
    kind: ClassVar[str] = "maxbatch"

    best_batch: int | None = None
    first_oom_batch: int | None = None          # smallest batch seen not to fit; None if none
    probes: tuple[Probe, ...] = ()
    search_wall_s: float | None = None

    def best_probe(self) -> Probe | None:
        return next((p for p in self.probes if p.fits and p.batch == self.best_batch), None)

    def headline(self) -> float | None:
        """The largest batch that fits, the figure the store indexes."""
        return None if self.best_batch is None else float(self.best_batch)

    @classmethod
    def _decode(cls, name: str, value: Any) -> Any:
        if name == "probes":
            return tuple(Probe(**p) for p in value or ())
        return super()._decode(name, value)
