"""The envelope every result record shares, and its one ``from_dict``.

A record is a frozen dataclass that keeps every raw sample, the full config and the environment;
summaries are computed from the raw samples on demand (``record.summary()``), so a record never
holds a figure its samples do not support. Failures are records too (``status="error"``), so a
sweep that meets an out-of-memory keeps going and the report shows where the boundary was.

What the store needs of every kind: ``kind`` (a class variable), ``id``, ``run_id``,
``created_at``, ``status``, ``error_type``, ``config`` (with ``key()``, ``label`` and, where it
applies, ``model``), ``headline()`` (the one figure stored in the index column, or None),
``to_dict()``, ``from_dict()`` and ``with_run()``. A new kind subclasses :class:`Record`, sets
``kind`` and ``config_type``, and is listed in :data:`dlbench.records.RECORD_TYPES`.
"""

from __future__ import annotations

import copy
import datetime as _dt
import hashlib
import json
import uuid
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Iterable

from dlbench.measure.stats import Summary

#: Version of the stored layout. Stores written by every earlier dlbench read unchanged.
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


def config_key(d: dict[str, Any]) -> str:
    """A config's identity: the first 16 hex digits of the SHA-256 of its sorted JSON."""
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


#: Values that ``dataclasses.asdict`` would ``copy.deepcopy`` into themselves.
_ATOMS = frozenset({str, int, float, bool, type(None)})
_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...]:
    """The names of the dataclass ``cls``'s fields, in order (``dataclasses.fields``, looked
    up once per class: reading a large store asks for them once a record)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def known_fields(cls: type) -> frozenset[str]:
    """:func:`field_names` as a set, for ``from_dict`` to drop what a newer writer added."""
    known = _KNOWN.get(cls)
    if known is None:
        known = _KNOWN[cls] = frozenset(field_names(cls))
    return known


_KNOWN: dict[type, frozenset[str]] = {}


def asdict(obj: Any) -> Any:
    """``dataclasses.asdict(obj)``, equal value for equal value, at a fraction of its cost.

    ``dataclasses.asdict`` deep-copies every value one call at a time: a record's thousands of
    raw step times made it most of the time an export of a large store spent. Here the field
    names are looked up once per class, and a flat sequence or dict of strings, numbers,
    booleans and None is copied in one C-level call (a tuple, immutable, is kept as it is).
    Anything else goes the way ``dataclasses.asdict`` takes it."""
    t = type(obj)
    if t in _ATOMS:
        return obj
    if t is tuple or t is list:
        if _ATOMS.issuperset(map(type, obj)):  # raw samples: thousands, flat
            return obj if t is tuple else list(obj)
        return t([v if type(v) in _ATOMS else asdict(v) for v in obj])
    if t is dict:
        if _ATOMS.issuperset(map(type, obj.values())) and _ATOMS.issuperset(map(type, obj)):
            return dict(obj)
        return {k if type(k) in _ATOMS else asdict(k): v if type(v) in _ATOMS else asdict(v)
                for k, v in obj.items()}
    if hasattr(t, "__dataclass_fields__"):
        names = field_names(t)
        values = [getattr(obj, n) for n in names]
        return {n: v if type(v) in _ATOMS else asdict(v) for n, v in zip(names, values)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a named tuple stays one
        return t(*[asdict(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return t(asdict(v) for v in obj)
    if isinstance(obj, dict):
        return t((asdict(k), asdict(v)) for k, v in obj.items())
    return copy.deepcopy(obj)


def _tuples(value: Any) -> Any:
    """JSON lists back into the (nested) tuples a frozen record holds."""
    if isinstance(value, list):
        if not any(issubclass(t, list) for t in set(map(type, value))):  # raw times: flat
            return tuple(value)
        return tuple(_tuples(v) for v in value)
    return value


@dataclass(frozen=True, kw_only=True)
class Record:
    """The envelope: what was measured (``config``), where (``env``), how it ended, and when.

    Keyword-only, so each kind adds its own fields without caring about the order of these.
    """

    kind: ClassVar[str]
    config_type: ClassVar[type]

    config: Any
    env: dict[str, Any]
    status: str = "ok"                          # "ok" or "error"
    error_type: str | None = None               # an ErrorType value, for status "error"
    error: str | None = None                    # the message (and traceback tail)
    run_id: str | None = None
    id: str = field(default_factory=new_id)
    created_at: str = field(default_factory=utc_now)
    schema_version: int = SCHEMA_VERSION
    # --repeat N: the config ran in N fresh processes, one record each, sharing ``repeat_group``
    # (an id), numbered by ``repeat_index`` (0..N-1) of ``repeat_count``. None for a record
    # measured in one process (and in every store written before --repeat existed).
    repeat_group: str | None = None
    repeat_index: int | None = None
    repeat_count: int | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def headline(self) -> float | None:
        """The one figure the store indexes; None where a kind has none."""
        return None

    def summary(self) -> Summary | None:
        """A step-time summary; None for kinds that are not a timed window (listings show '-')."""
        return None

    def to_dict(self) -> dict[str, Any]:
        # asdict(self) with the config as its own to_dict() writes it, converted once
        d = {}
        for n in field_names(type(self)):
            v = getattr(self, n)
            d[n] = (self.config.to_dict() if n == "config" else v if type(v) in _ATOMS
                    else asdict(v))
        d["kind"] = self.kind
        return d

    def with_run(self, run_id: str):
        return replace(self, run_id=run_id)

    def in_group(self, group: str, index: int, count: int):
        """This record as process ``index`` of the ``count`` of repeat group ``group``."""
        return replace(self, repeat_group=group, repeat_index=index, repeat_count=count)

    @classmethod
    def _decode(cls, name: str, value: Any) -> Any:
        """One stored field back into its Python value; kinds with richer fields extend it."""
        return _tuples(value)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        """The record ``to_dict`` wrote, from any dlbench version: fields it does not know are
        dropped (a newer writer), missing ones take their defaults (an older writer)."""
        known = known_fields(cls)
        out = {k: cls._decode(k, v) for k, v in d.items() if k in known and k != "config"}
        return cls(config=cls.config_type.from_dict(d["config"]), **out)


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

    def capped(self) -> str | None:
        """``time_cap`` or ``step_cap`` when a limit, not the interval, ended the window:
        flagged whatever the interval, since a window cut short may have missed what a longer
        one would have shown (a slow drift, a throttle)."""
        reason = getattr(self, "stop_reason", None)
        return reason if reason in ("time_cap", "step_cap") else None

    def short_of_minimum(self) -> tuple[int, int] | None:
        """(measured steps, the rule's minimum) when a limit ended the window before its
        minimum: records from before the minimum won over the time cap. (A window that
        converged had its minimum: the rule asks for it first.)"""
        s = self.summary()
        need = self.stop_rule().min_steps
        if s is None or self.capped() is None or s.steps >= need:
            return None
        return s.steps, need


def repeat_groups(records: Iterable[Any]) -> list[list[Any]]:
    """Records in groups: the processes of one repeat group together (in the place of its first
    record), every other record alone; order kept. A group's list holds failures too."""
    out: list[list[Any]] = []
    where: dict[str, list[Any]] = {}
    for r in records:
        group = getattr(r, "repeat_group", None)
        if group is None:
            out.append([r])
        elif group in where:
            where[group].append(r)
        else:
            where[group] = [r]
            out.append(where[group])
    return out
