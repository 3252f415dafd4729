"""The ``comm`` kind: one collective at one size, every rank's raw iteration times, its #wrong.

algbw and busbw are nccl-tests' figures (:mod:`dlbench.measure.bandwidth`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from dlbench.config import INTERCONNECT_PROFILES, ConfigError, choice
from dlbench.measure.bandwidth import COMM_OPS, algbw, busbw_factor
from dlbench.measure.stats import mean
from dlbench.records.base import Record, config_key


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
        interconnect: a profile of :data:`dlbench.config.INTERCONNECT_PROFILES`.
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
        choice("--op", self.op, COMM_OPS)
        choice("--interconnect", self.interconnect, INTERCONNECT_PROFILES)
        if self.size_bytes < 1 or self.ranks < 1 or self.iters < 1 or self.warmup < 0:
            raise ConfigError("--min/--max, --gpus and --iters must be >= 1, --warmup >= 0")

    model = None  # the store's model column: a collective has none

    def key(self) -> str:
        return config_key(asdict(self))

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


@dataclass(frozen=True, kw_only=True)
class CommRecord(Record):
    """A collective's timing at one size, every rank's raw iteration times, and its #wrong.

    ``time_s`` follows nccl-tests' default (``-a 1``): each rank's mean iteration time, averaged
    over ranks; ``max_time_s`` is the slowest rank's. ``wrong`` counts elements that differ from
    the expected result, summed over ranks; a row with ``wrong > 0`` has status ``error``.
    """

    config_type: ClassVar[type] = CommConfig
    kind: ClassVar[str] = "comm"

    rank_times_s: tuple[tuple[float, ...], ...] = ()
    count: int = 0                     # elements per rank's input buffer
    wrong: int | None = None
    launch_env: dict[str, str] = field(default_factory=dict)

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
