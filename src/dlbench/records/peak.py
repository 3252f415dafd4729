"""Device-ceiling records: one ``PeakRecord`` per measured point of ``dlbench peak``.

A point is one verb at one size: a matrix multiply of one shape and precision, a memory copy,
read or write of one buffer size, a host<->device or GPU<->GPU transfer. The record keeps every
iteration's time (seconds) and the work of one iteration (FLOPs, or bytes moved), so the rates
are computed from raw samples: ``best`` from the fastest iteration, ``median`` from the median one,
``mean`` from the mean iteration time.

Two methods time a matmul point (``PeakConfig.method``). ``sustained`` (the default of
``dlbench peak``) opens each precision's sweep with a fixed-length device warm-up, so clocks and
temperature are at steady state, then times every shape for a fixed number of iterations; the
ceiling of a precision is the largest per-shape *mean* rate (mamf-finder's figure), the largest
median beside it. ``burst`` (dlbench's method before sustained) times each shape for a short
adaptive window with no device warm-up; its ceiling is the largest per-shape *median* rate
(robust to one lucky iteration). Records stored before the method existed were burst and read
so. Memory and transfer points are timed the burst way under either method. The best rate (the
fastest single iteration) is shown beside the ceiling.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass
from typing import Any, ClassVar

from dlbench.records.base import Record, asdict

VERBS = ("matmul", "copy", "read", "write", "h2d", "d2h", "p2p")
#: How a matmul point is timed; the first is ``dlbench peak``'s default.
METHODS = ("sustained", "burst")
#: The method of a record that names none: every record stored before methods existed.
LEGACY_METHOD = "burst"


@dataclass(frozen=True)
class PeakConfig:
    """What one point measures.

    Attributes:
        verb: matmul, copy / read / write (device memory), h2d / d2h (host<->device), p2p.
        precision: matmul element type (fp32 with TF32 off, tf32, fp16, bf16, fp8); None otherwise.
        shape: (m, n, k) of a matmul; () otherwise.
        nbytes: buffer size of a memory or transfer verb; 0 for matmul.
        pinned: host memory is page-locked (h2d / d2h).
        device: the device measured (``cuda:0``, ``cpu``); for p2p the source.
        peer: destination device of p2p.
        method: how the point was timed: ``sustained`` (a matmul: fixed iterations in a sweep
            opened by a device warm-up) or ``burst`` (a short adaptive window, no device
            warm-up; every memory and transfer point, and every record stored before methods
            existed).
        warmup_s: sustained: the seconds of device warm-up (a large matmul of this precision)
            that open the sweep of this precision; 0 for burst.
    """

    verb: str
    precision: str | None = None
    shape: tuple[int, ...] = ()
    nbytes: int = 0
    pinned: bool | None = None
    device: str = "cpu"
    peer: str | None = None
    method: str = LEGACY_METHOD
    warmup_s: float = 0.0

    def __post_init__(self) -> None:
        if self.verb not in VERBS:
            raise ValueError(f"verb must be one of {', '.join(VERBS)}, not {self.verb!r}")
        if self.verb == "matmul" and (len(self.shape) != 3 or not self.precision):
            raise ValueError("a matmul point needs a shape (m, n, k) and a precision")
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {', '.join(METHODS)}, not {self.method!r}")
        if self.method == "sustained" and self.verb != "matmul":
            raise ValueError(f"only a matmul is timed the sustained way, not {self.verb}")
        if self.warmup_s < 0 or (self.method == LEGACY_METHOD and self.warmup_s):
            raise ValueError("warmup_s is the sustained sweep's device warm-up: >= 0, and 0 "
                             "for burst")

    model: ClassVar[None] = None  # the store's model column: not a model benchmark

    def key(self) -> str:
        blob = json.dumps(self.to_dict(), sort_keys=True).encode()
        return hashlib.sha256(b"peak" + blob).hexdigest()[:16]

    @property
    def label(self) -> str:
        if self.verb == "matmul":
            return f"matmul {self.precision} {'x'.join(map(str, self.shape))}"
        size = f"{self.nbytes / 2**20:.0f} MiB"
        if self.verb in ("h2d", "d2h"):
            return f"{self.verb} {'pinned' if self.pinned else 'pageable'} {size}"
        if self.verb == "p2p":
            return f"p2p {self.device}->{self.peer} {size}"
        return f"{self.verb} {size}"

    def to_dict(self) -> dict[str, Any]:
        """The stored form. A burst point is written as every point was before methods
        existed (no ``method``, no ``warmup_s``), so its ``key()`` and its stored JSON are
        those of the same point measured by an older dlbench."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        if self.method == LEGACY_METHOD:
            del d["method"], d["warmup_s"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PeakConfig":
        d = dict(d)
        d["shape"] = tuple(d.get("shape") or ())
        return cls(**d)


@dataclass(frozen=True, kw_only=True)
class PeakRecord(Record):
    """One ceiling point (or its failure). ``work`` is FLOPs (matmul) or bytes moved per iteration.

    Bytes moved: copy counts the read and the write (2 x buffer), as STREAM does; read, write,
    h2d, d2h and p2p count the buffer once.
    """

    config_type: ClassVar[type] = PeakConfig
    kind: ClassVar[str] = "peak"

    times_s: tuple[float, ...] = ()
    warmup_times_s: tuple[float, ...] = ()
    work: float = 0.0
    unit: str = "TFLOP/s"                # or "GB/s"

    @property
    def ok(self) -> bool:
        return self.status == "ok" and bool(self.times_s)

    def _rate(self, t: float) -> float:
        scale = 1e12 if self.unit == "TFLOP/s" else 1e9
        return self.work / t / scale

    @property
    def method(self) -> str:
        """``sustained`` or ``burst``: how the point was timed (its config's)."""
        return self.config.method

    @property
    def iterations(self) -> int:
        """Timed iterations (the per-shape warm-up ones are in ``warmup_times_s``)."""
        return len(self.times_s)

    def best(self) -> float | None:
        """Rate of the fastest iteration (TFLOP/s or GB/s)."""
        return self._rate(min(self.times_s)) if self.ok else None

    def median(self) -> float | None:
        """Rate of the median iteration."""
        return self._rate(statistics.median(self.times_s)) if self.ok else None

    def mean(self) -> float | None:
        """Rate of the mean iteration time: the work of every timed iteration over their
        total time (mamf-finder's "mean"; never a mean of per-iteration rates)."""
        return self._rate(statistics.fmean(self.times_s)) if self.ok else None

    def ceiling_rate(self) -> float | None:
        """The figure this point's method makes a ceiling of: the mean (sustained) or the
        median (burst)."""
        return self.mean() if self.method == "sustained" else self.median()

    def headline(self) -> float | None:
        return self.ceiling_rate()


def ceiling_key(config: PeakConfig) -> str:
    """What a point is a ceiling of: its matmul precision, its memory verb, or its transfer
    (``h2d pinned``, ``d2h pageable``, ``p2p``)."""
    if config.verb == "matmul":
        return str(config.precision)
    if config.verb in ("h2d", "d2h"):
        return f"{config.verb} {'pinned' if config.pinned else 'pageable'}"
    return config.verb


def ceilings(records: list[PeakRecord]) -> dict[str, dict[str, Any]]:
    """Per matmul precision and memory verb, as mamf-finder reports a sweep: the ceiling and
    the point that set it, the largest per-point median and mean beside it, and the best rate
    (the fastest single iteration of any point) and the point that set that.

    The ceiling is what the points' method makes one of: the largest per-point mean
    (sustained, mamf-finder's figure) or the largest per-point median (burst). Returns
    ``{"bf16": {"method": ..., "ceiling": ..., "ceiling_label": ..., "median": ...,
    "label": ..., "mean": ..., "mean_label": ..., "best": ..., "best_label": ...,
    "points": ..., "iterations": ..., "unit": ..., "warmup_s": ...}, "copy": {...}}``:
    ``label`` is the point of the largest median, ``points`` counts the shapes (or buffers)
    swept, ``iterations`` those of the ceiling's point, ``warmup_s`` the device warm-up that
    opened a sustained sweep (0 for burst). Transfers are keyed ``h2d pinned``,
    ``d2h pageable``, ``p2p``. A key whose points were timed by both methods (a store holding
    a burst and a sustained sweep) is split in two, ``bf16 (sustained)`` and
    ``bf16 (burst)``: their figures are not maxima of one sweep.
    """
    groups: dict[tuple[str, str], list[PeakRecord]] = {}
    for r in records:
        if r.ok:
            groups.setdefault((ceiling_key(r.config), r.method), []).append(r)
    methods: dict[str, int] = {}
    for key, _ in groups:
        methods[key] = methods.get(key, 0) + 1
    return {(key if methods[key] == 1 else f"{key} ({method})"): _ceiling(recs, method)
            for (key, method), recs in groups.items()}


def _ceiling(recs: list[PeakRecord], method: str) -> dict[str, Any]:
    """The ceiling entry of ok points of one key and one method (ties: the earliest point)."""
    top_median = max(recs, key=PeakRecord.median)
    top_mean = max(recs, key=PeakRecord.mean)
    top_best = max(recs, key=PeakRecord.best)
    top = top_mean if method == "sustained" else top_median
    return {"method": method, "ceiling": top.ceiling_rate(), "ceiling_label": top.config.label,
            "median": top_median.median(), "label": top_median.config.label,
            "mean": top_mean.mean(), "mean_label": top_mean.config.label,
            "best": top_best.best(), "best_label": top_best.config.label,
            "points": len(recs), "iterations": top.iterations, "unit": top.unit,
            "warmup_s": top.config.warmup_s}
