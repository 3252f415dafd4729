"""Every kind of result record, one module each, on one envelope (:mod:`dlbench.records.base`).

The store reads a record of any kind through :func:`record_from_dict`; a new kind subclasses
:class:`~dlbench.records.base.Record` and is added to :data:`RECORD_TYPES`.
"""

from __future__ import annotations

from typing import Any

from dlbench.records.base import SCHEMA_VERSION, ErrorType, Record
from dlbench.records.collective import CommConfig, CommRecord
from dlbench.records.generate import GenerateConfig, GenerateRecord
from dlbench.records.maxbatch import MaxBatchConfig, MaxBatchRecord, Probe
from dlbench.records.net import NetConfig, NetRecord
from dlbench.records.peak import PeakConfig, PeakRecord
from dlbench.records.scaling import ScalingConfig, ScalingRecord
from dlbench.records.serve import ServeConfig, ServeRecord
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.records.train import TrainConfig, TrainRecord

#: kind -> record class.
RECORD_TYPES: dict[str, type[Record]] = {
    cls.kind: cls for cls in (ThroughputRecord, ScalingRecord, CommRecord, MaxBatchRecord,
                              PeakRecord, NetRecord, TrainRecord, GenerateRecord,
                              ServeRecord)
}


def record_type_for(cfg: Any) -> type[Record]:
    """The record class whose config ``cfg`` is (a failure of ``cfg`` is a record of it)."""
    for cls in RECORD_TYPES.values():
        if isinstance(cfg, cls.config_type):
            return cls
    raise TypeError(f"no record kind has a config of type {type(cfg).__name__}")


def record_from_dict(d: dict[str, Any]) -> Record:
    """Rebuild a record of whatever kind ``d`` says it is (``throughput`` when it says none:
    the first stores had one kind)."""
    kind = d.get("kind", "throughput")
    if kind not in RECORD_TYPES:
        raise ValueError(f"unknown record kind {kind!r}; is this dlbench older than the file?")
    return RECORD_TYPES[kind].from_dict(d)


__all__ = ["SCHEMA_VERSION", "ErrorType", "Record", "RECORD_TYPES", "record_from_dict",
           "CommConfig", "CommRecord", "GenerateConfig", "GenerateRecord", "record_type_for", "MaxBatchConfig", "MaxBatchRecord", "Probe", "NetConfig",
           "NetRecord", "PeakConfig", "PeakRecord", "ScalingConfig", "ScalingRecord",
           "ServeConfig", "ServeRecord",
           "ThroughputConfig", "ThroughputRecord", "TrainConfig", "TrainRecord"]
