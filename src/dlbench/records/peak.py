"""Device-ceiling records: one ``PeakRecord`` per measured point of ``dlbench peak``.

A point is one verb at one size: a matrix multiply of one shape and precision, a memory copy,
read or write of one buffer size, a host<->device or GPU<->GPU transfer. The record keeps every
iteration's time (seconds) and the work of one iteration (FLOPs, or bytes moved), so the rates
are computed from raw samples: ``best`` from the fastest iteration, ``median`` from the median one.
The ceiling of a precision is the largest *median* rate over its shapes (robust to one lucky
iteration); the best rate is shown beside it.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass
from typing import Any, ClassVar

from dlbench.records.base import Record, asdict

VERBS = ("matmul", "copy", "read", "write", "h2d", "d2h", "p2p")


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
    """

    verb: str
    precision: str | None = None
    shape: tuple[int, ...] = ()
    nbytes: int = 0
    pinned: bool | None = None
    device: str = "cpu"
    peer: str | None = None

    def __post_init__(self) -> None:
        if self.verb not in VERBS:
            raise ValueError(f"verb must be one of {', '.join(VERBS)}, not {self.verb!r}")
        if self.verb == "matmul" and (len(self.shape) != 3 or not self.precision):
            raise ValueError("a matmul point needs a shape (m, n, k) and a precision")

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
        d = asdict(self)
        d["shape"] = list(self.shape)
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

    def best(self) -> float | None:
        """Rate of the fastest iteration (TFLOP/s or GB/s)."""
        return self._rate(min(self.times_s)) if self.ok else None

    def median(self) -> float | None:
        """Rate of the median iteration."""
        return self._rate(statistics.median(self.times_s)) if self.ok else None

    def headline(self) -> float | None:
        return self.median()

def ceilings(records: list[PeakRecord]) -> dict[str, dict[str, Any]]:
    """Per matmul precision and memory verb, as mamf-finder reports a sweep: the ceiling (the
    largest median rate over the points) and the point that set it, and the best rate (the
    fastest single iteration of any point) and the point that set that.

    Returns ``{"bf16": {"median": ..., "label": ..., "best": ..., "best_label": ...,
    "points": ..., "iterations": ..., "unit": ...}, "copy": {...}}``; ``points`` counts the
    shapes (or buffers) swept, ``iterations`` those of the median's point. Transfers are keyed
    ``h2d pinned``, ``d2h pageable``, ``p2p``.
    """
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        if not r.ok:
            continue
        c = r.config
        key = (c.precision if c.verb == "matmul" else
               f"{c.verb} {'pinned' if c.pinned else 'pageable'}" if c.verb in ("h2d", "d2h") else c.verb)
        med, best = r.median(), r.best()
        prev = out.get(key)
        entry = dict(prev) if prev else {"best": 0.0, "best_label": None, "points": 0}
        if prev is None or med > prev["median"]:
            entry.update(median=med, label=c.label, unit=r.unit, iterations=len(r.times_s))
        if best > entry["best"]:
            entry.update(best=best, best_label=c.label)
        entry["points"] += 1
        out[key] = entry
    return out
