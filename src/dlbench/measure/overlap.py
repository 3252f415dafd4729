"""Exposed communication: the part of a step's collectives that no computation hides.

A sharded step overlaps its collectives with compute: DDP reduces a bucket of gradients while
the backward pass goes on, FSDP gathers the next block's parameters while this one computes.
What the step pays for is the communication that nothing overlaps. Holistic Trace Analysis'
``comm_comp_overlap`` draws the same line on a profiler trace; here, for one step between
``start`` and ``end``:

- communication time: the length of the union of the communication intervals (two NCCL
  kernels on two streams at once count once);
- exposed communication: that union less its intersection with the union of the compute
  intervals, so a collective that runs beside a compute kernel is hidden for as long as the
  kernel runs, and exposed for the rest;
- the step: ``end - start``, the wall time the exposed share is a fraction of.

Memory copies and sets are neither communication nor compute (HTA's rule): a copy engine's
transfer keeps no streaming multiprocessor busy, so it hides no collective.

Which events are which (:func:`device_kind`, :func:`host_kind`): on a GPU, every kernel whose
name holds ``nccl`` (``ncclDevKernel_AllGather_RING_LL``, ``ncclKernel_AllReduce_...``) is
communication, ``Memcpy``/``Memset`` are memory, any other kernel is compute. On the CPU under
gloo there are no device kernels: gloo runs each collective on a worker thread of its own under
a ``gloo:all_reduce`` (``gloo:all_gather``, ``gloo:broadcast``...) range, its caller enqueues it
in a ``c10d::allreduce_`` (``c10d::_allgather_base_``...) operator, and DTensor's functional
collectives are ``_c10d_functional::all_reduce`` and ``_c10d_functional::wait_tensor``: all
communication; PyTorch's ``aten::`` operators are compute; wrappers (autograd's
``evaluate_function``, record_function ranges such as ``FSDP::pre_forward``) span waits as well
as work, so they are neither.

Everything here is pure arithmetic on ``(start, end)`` pairs; the profiler glue that collects
them is :mod:`dlbench.measure.comm_profile`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

Interval = tuple[float, float]

COMM, COMPUTE, MEMORY = "communication", "compute", "memory"

#: Names of host-side (CPU profile) communication: gloo's worker ranges, c10d's operators, the
#: functional collectives' operators (their ``wait_tensor`` is where the caller blocks), and
#: the ``nccl:`` ranges c10d opens around an NCCL collective's launch.
HOST_COMM_PREFIXES = ("gloo:", "c10d::", "_c10d_functional::", "c10d_functional::", "nccl:")


def device_kind(name: str) -> str:
    """A device kernel's part in the step: :data:`COMM`, :data:`MEMORY` or :data:`COMPUTE`."""
    low = name.lower()
    if "nccl" in low:
        return COMM
    if low.startswith(("memcpy", "memset")):
        return MEMORY
    return COMPUTE


def host_kind(name: str) -> str | None:
    """A CPU profile event's part in the step: :data:`COMM`, :data:`COMPUTE` (an ``aten::``
    operator) or None (a wrapper or an annotation, which spans waits as well as work)."""
    if name.startswith(HOST_COMM_PREFIXES):
        return COMM
    if name.startswith("aten::"):
        return COMPUTE
    return None


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint, empty ones dropped; nested and overlapping ones
    become one."""
    out: list[Interval] = []
    for s, e in sorted((s, e) for s, e in intervals if e > s):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1] = (out[-1][0], e)
        else:
            out.append((s, e))
    return out


def length(intervals: Iterable[Interval]) -> float:
    """The time the intervals cover (each instant once)."""
    return math.fsum(e - s for s, e in union(intervals))


def intersection(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The instants in both ``a`` and ``b``, as disjoint intervals."""
    a, b = union(a), union(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            out.append((s, e))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def difference(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The instants of ``a`` not in ``b``, as disjoint intervals."""
    out: list[Interval] = []
    b = union(b)
    for s, e in union(a):
        for bs, be in b:
            if be <= s or bs >= e:
                continue
            if bs > s:
                out.append((s, bs))
            s = max(s, be)
            if s >= e:
                break
        if e > s:
            out.append((s, e))
    return out


def clip(intervals: Iterable[Interval], start: float, end: float) -> list[Interval]:
    """The parts of the intervals between ``start`` and ``end``."""
    return [(max(s, start), min(e, end)) for s, e in intervals if min(e, end) > max(s, start)]


@dataclass(frozen=True)
class StepComm:
    """One step's communication: its wall time, the time some collective ran, and the part of
    that time no compute overlapped (seconds, or whatever unit the intervals were in)."""

    step_s: float
    comm_s: float
    exposed_s: float

    @property
    def hidden_s(self) -> float:
        """Communication time that compute overlapped."""
        return self.comm_s - self.exposed_s


def step_comm(comm: Iterable[Interval], compute: Iterable[Interval], start: float,
              end: float) -> StepComm:
    """The communication of the step between ``start`` and ``end``: the union of ``comm``
    there, and the part of it that ``compute`` does not overlap."""
    c = union(clip(comm, start, end))
    total = length(c)
    hidden = length(intersection(c, clip(compute, start, end)))
    return StepComm(step_s=end - start, comm_s=total, exposed_s=max(0.0, total - hidden))


@dataclass(frozen=True)
class TraceEvent:
    """One event of a profiler trace, as the analysis needs it (any one time unit)."""

    name: str
    start: float
    end: float
    thread: int = 0
    on_device: bool = False     # a kernel, copy or set on a GPU's timeline; else a host event
    annotation: bool = False    # a record_function range: it spans other events' time


def trace_steps(events: Iterable[TraceEvent], mark: str, device_trace: bool
                ) -> tuple[list[StepComm], dict[str, float]]:
    """Each step of a trace, and the time of each communication event's name in them.

    The steps are the host ranges named ``mark``, in order. With ``device_trace`` the intervals
    are the device's kernels (:func:`device_kind`; annotations mirrored onto the device's
    timeline are skipped); without it, the host's events (:func:`host_kind`), where an
    operator inside a collective's own range on its thread (c10d's flattening copies, the
    copies gloo makes on its worker) is the collective's, not compute.
    """
    events = list(events)
    marks = sorted((e.start, e.end) for e in events if e.name == mark and not e.on_device)
    comm: list[Interval] = []
    compute: list[Interval] = []
    names: dict[str, list[Interval]] = {}
    if device_trace:
        for e in events:
            if not e.on_device or e.annotation:
                continue
            kind = device_kind(e.name)
            if kind == COMM:
                comm.append((e.start, e.end))
                names.setdefault(e.name, []).append((e.start, e.end))
            elif kind == COMPUTE:
                compute.append((e.start, e.end))
    else:
        threads: dict[int, tuple[list[Interval], list[Interval]]] = {}
        for e in events:
            kind = None if e.on_device or e.name == mark else host_kind(e.name)
            if kind is None:
                continue
            c, w = threads.setdefault(e.thread, ([], []))
            (c if kind == COMM else w).append((e.start, e.end))
            if kind == COMM:
                names.setdefault(e.name, []).append((e.start, e.end))
        for c, w in threads.values():
            comm += c
            compute += difference(w, c)
    steps = [step_comm(comm, compute, s, e) for s, e in marks]
    in_steps = {n: math.fsum(length(clip(iv, s, e)) for s, e in marks) for n, iv in names.items()}
    return steps, {n: t for n, t in in_steps.items() if t > 0}


@dataclass(frozen=True)
class ExposedSummary:
    """A job's exposed communication over the ranks that measured it.

    ``per_step_s`` is the exposed seconds per step, the total over every measured rank's
    profiled steps over their count; ``share`` the total exposed over the total wall time of
    those same steps (never a mean of per-step ratios); ``comm_per_step_s`` and ``comm_share``
    the same for all communication, hidden or not; ``worst_share`` the largest rank's share.
    """

    per_step_s: float
    share: float
    comm_per_step_s: float
    comm_share: float
    worst_share: float
    ranks: int            # ranks whose profile the figures hold
    of_ranks: int         # ranks in the job
    steps: int            # profiled steps per rank
    source: str | None    # what the profiler timed ("cuda kernels", "cpu operators")


def summarise(rank_profiles: Sequence[dict[str, Any] | None]) -> ExposedSummary | None:
    """The job's figures from each rank's raw profile (``exposed_s``, ``comm_s`` and ``step_s``
    per profiled step, see :mod:`dlbench.measure.comm_profile`); None where no rank measured."""
    done = [p for p in rank_profiles if p and p.get("exposed_s")]
    if not done:
        return None
    exposed = [x for p in done for x in p["exposed_s"]]
    comm = [x for p in done for x in p["comm_s"]]
    wall = math.fsum(x for p in done for x in p["step_s"])
    shares = [math.fsum(p["exposed_s"]) / math.fsum(p["step_s"]) for p in done
              if math.fsum(p["step_s"]) > 0]
    return ExposedSummary(
        per_step_s=math.fsum(exposed) / len(exposed),
        share=math.fsum(exposed) / wall if wall > 0 else 0.0,
        comm_per_step_s=math.fsum(comm) / len(comm),
        comm_share=math.fsum(comm) / wall if wall > 0 else 0.0,
        worst_share=max(shares, default=0.0), ranks=len(done), of_ranks=len(rank_profiles),
        steps=len(done[0]["exposed_s"]), source=done[0].get("source"))


def unmeasured_reason(rank_profiles: Sequence[dict[str, Any] | None]) -> str | None:
    """Why a job has no figure, or some rank none: the first rank's reason (``rank R: ...``);
    None when every rank measured."""
    if not rank_profiles:
        return ("not profiled (no rank's profile in the record: made before dlbench measured "
                "it, or not a torchrun job)")
    for r, p in enumerate(rank_profiles):
        if not (p and p.get("exposed_s")):
            return f"rank {r}: " + ((p or {}).get("reason") or "no profile")
    return None
