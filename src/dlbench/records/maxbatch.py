"""The ``maxbatch`` record: the largest batch that trains without running out of memory.

A search probes batch sizes (doubling, then bisection), each probe a few training steps in a
fresh process. The record keeps every probe, those that ran out of memory included, so the
boundary is bracketed: ``best_batch`` fits and ``first_oom_batch`` does not. The throughput at
``best_batch`` is a normal :class:`~dlbench.records.throughput.ThroughputRecord` of the same run (the base
setup at that batch). Should that measurement run out of memory where the short probe did not,
a corrected record follows in the same run, with the failure as one more probe; the later wins.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from dlbench.config import ConfigError
from dlbench.records.base import Record
from dlbench.records.throughput import ThroughputConfig

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
    """

    base: ThroughputConfig
    start: int | None = None
    limit: int | None = None
    tolerance: float = 0.05

    def __post_init__(self) -> None:
        if self.base.batch_size != 1:
            object.__setattr__(self, "base", replace(self.base, batch_size=1))
        if self.start is not None and self.start < 1:
            raise ConfigError(f"--start must be >= 1, got {self.start}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"--max must be >= 1, got {self.limit}")
        if not 0 <= self.tolerance < 1:
            raise ConfigError(f"--tolerance must be a fraction in [0, 1), got {self.tolerance}")

    @property
    def model(self) -> str:
        return self.base.model

    def key(self) -> str:
        """The setup's identity whatever the search bounds: what ``-b auto`` looks up."""
        return hashlib.sha256(f"maxbatch:{self.base.key()}".encode()).hexdigest()[:16]

    @property
    def label(self) -> str:
        """``maxbatch resnet50 bf16 train cl``: the base label without its batch."""
        parts = self.base.label.split(" ")
        return " ".join(["maxbatch", parts[0], *parts[2:]])

    def to_dict(self) -> dict[str, Any]:
        return {"base": self.base.to_dict(), "start": self.start, "limit": self.limit,
                "tolerance": self.tolerance}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MaxBatchConfig":
        return cls(base=ThroughputConfig.from_dict(d["base"]), start=d.get("start"),
                   limit=d.get("limit"), tolerance=d.get("tolerance", 0.05))


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
