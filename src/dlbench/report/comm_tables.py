"""The tables of ``dlbench comm`` records: nccl-tests' columns per op and size, with the
latency percentiles and NCCL's algorithm beside them, and the published figures of the host's
platform (:mod:`dlbench.reference.busbw`) beside the measured all_reduce busbw. Pure functions
that return :class:`~dlbench.report.table.Table` rows of text."""

from __future__ import annotations

from typing import Any, Sequence

from dlbench.reference.busbw import references_for
from dlbench.report.table import Table

TIMING_NOTES = {
    "eager": "timing eager: one Python call per iteration, an event after each (as nccl-tests "
             "-I); at small sizes the time includes Python's launch cost",
    "batched": "timing batched: {k} calls queued back to back per sample, one event after them "
               "(as nccl-tests' default loop); a sample's time is divided by its {k} iterations",
    "graph": "timing graph: {k} iterations captured in one CUDA graph, each sample a replay (as "
             "nccl-tests -G): no launch cost; a sample's time is divided by its {k} iterations",
}
API_NOTE = ("nccl API: NCCL's own C API called directly (one communicator per rank, as "
            "nccl-tests calls it), not torch.distributed's collectives: what NCCL and the fabric "
            "do, without the framework's own work per call")
BUFFERS_NOTE = ("nccl buffers: allocated with ncclMemAlloc (a torch.cuda.MemPool on "
                "ProcessGroupNCCL's allocator), as nccl-tests allocates; otherwise PyTorch's "
                "caching allocator")
ROTATE_NOTE = ("buffers rotated: each call of a sample on the next copy of its buffers, as "
               "nccl-tests moves its buffers, so no call reads what the last one left in L2")
NOT_COMPARABLE_NOTE = ("* NVLS or CollNet ran: the switch or the network reduces, so busbw can "
                       "exceed the link rate and is not comparable with a ring's")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def _us(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e6:.1f}"


def _choice(r: Any) -> str:
    algo = getattr(r, "algorithm", "unknown")
    if algo == "unknown":
        return "unknown"
    return f"{algo}/{getattr(r, 'protocol', 'unknown')}"


def timing_label(r: Any) -> str:
    """``eager``, or the mode and its iterations per sample (``graph x10``); ``, nccl API``
    after it where NCCL's own API was timed rather than torch.distributed's, ``, nccl
    buffers`` where the buffers came from ncclMemAlloc, ``, rotated`` where each call of a
    sample worked on the next copy of its buffers (records before that field used one set)."""
    c = r.config
    timing = getattr(c, "timing", "eager")
    label = timing if timing == "eager" else f"{timing} x{getattr(c, 'iters_per_sample', 1)}"
    api, buffers = getattr(c, "api", "torch"), getattr(c, "buffers", "torch")
    label += "" if api == "torch" else f", {api} API"
    label += "" if buffers == "torch" else f", {buffers} buffers"
    return label + (", rotated" if getattr(c, "rotate", False) else "")


def comm_table(records: Sequence, title: str = "Collectives") -> Table:
    """nccl-tests' columns: per op and size, out-of-place then in-place time (the mean latency,
    us), its p50/p99, algbw and busbw (GB/s) and #wrong; and, for NCCL, the algorithm and
    protocol NCCL chose (a ``*`` on a busbw that is not comparable with a ring's)."""
    recs = [r for r in records if getattr(r, "kind", "") == "comm"]
    rows: list[str] = []
    cells: dict[tuple[str, str], Any] = {}
    for r in recs:
        key = f"{r.config.op}|{r.config.size_bytes}"
        if key not in rows:
            rows.append(key)
        cells[(key, "in" if r.config.inplace else "out")] = r  # a later record of a cell wins
    nccl = any(r.config.backend == "nccl" for r in recs)
    cols = ("op", "size", "count", "type",
            "out time us", "out p50/p99 us", "out algbw", "out busbw", "out #wrong",
            "in time us", "in p50/p99 us", "in algbw", "in busbw", "in #wrong") + \
        (("NCCL algo/proto",) if nccl else ())
    out, starred = [], False
    for key in rows:
        op, size = key.split("|")
        any_rec = cells.get((key, "out")) or cells.get((key, "in"))
        line = [op, _size(int(size)), str(any_rec.count), any_rec.config.dtype]
        for place in ("out", "in"):
            r = cells.get((key, place))
            if r is None or r.time_s is None:
                line += ["-", "-", "-", "-", (r.error_type or "-") if r else "n/a"]
                continue
            star = "*" if getattr(r, "busbw_comparable", None) is False else ""
            starred = starred or bool(star)
            line += [_us(r.time_s), f"{_us(r.p50_s)}/{_us(r.p99_s)}",
                     f"{r.algbw() / 1e9:.2f}", f"{r.busbw() / 1e9:.2f}{star}", str(r.wrong)]
        if nccl:
            a, b = cells.get((key, "out")), cells.get((key, "in"))
            text = _choice(a or b)
            if a is not None and b is not None and _choice(b) != text:
                text += f" (in-place {_choice(b)})"
            line.append(text)
        out.append(tuple(line))
    notes = ["algbw = size / time; busbw = algbw x factor (nccl-tests doc/PERFORMANCE.md: "
             "all_reduce 2(n-1)/n, all_gather and reduce_scatter (n-1)/n, broadcast 1, "
             "all_to_all (n-1)/n); time = the mean latency per iteration, each rank's mean "
             "averaged over ranks (nccl-tests -a 1); GB/s = 1e9 B/s",
             "p50/p99: percentiles of the timed samples, each the slowest rank's"]
    for r in {timing_label(r): r for r in recs}.values():
        c = r.config
        notes.append(TIMING_NOTES[getattr(c, "timing", "eager")].format(
            k=getattr(c, "iters_per_sample", 1)))
    if any(getattr(r.config, "api", "torch") == "nccl" for r in recs):
        notes.append(API_NOTE)
    if any(getattr(r.config, "buffers", "torch") == "nccl" for r in recs):
        notes.append(BUFFERS_NOTE)
    if any(getattr(r.config, "rotate", False) for r in recs):
        notes.append(ROTATE_NOTE)
    if nccl:
        notes.append("NCCL algo/proto: what NCCL's tuner chose for the size (its TUNING log, "
                     "read by a probe job before the timed one); unknown where it was not read")
    if starred:
        notes.append(NOT_COMPARABLE_NOTE)
    return Table(title, cols, tuple(out), tuple(notes))


def best_all_reduce(records: Sequence) -> Any | None:
    """The all_reduce record with the highest busbw (a correct one), or None."""
    ok = [r for r in records if getattr(r, "kind", "") == "comm" and r.config.op == "all_reduce"
          and r.ok and r.busbw() is not None]
    return max(ok, key=lambda r: r.busbw(), default=None)


def reference_table(records: Sequence) -> Table | None:
    """The published all_reduce busbw of the platform each job ran on, beside the highest the
    job measured (the ``default`` interconnect profile only: a profile that turns links off is
    not the platform the figures describe). None where no published figure matches."""
    groups: dict[tuple, list] = {}
    for r in records:
        if getattr(r, "kind", "") == "comm" and r.config.interconnect == "default":
            groups.setdefault((r.config.ranks, r.nodes), []).append(r)
    rows = []
    for (ranks, nodes), recs in groups.items():
        mine = best_all_reduce(recs)
        if mine is None:
            continue
        yours = mine.busbw() / 1e9
        for ref in references_for(mine.env, ranks, nodes):
            gpus = "per NIC" if ref.per == "nic" else \
                ("any" if ref.gpus is None else "/".join(map(str, ref.gpus)))
            ratio = f"{yours / ref.busbw_gbs:.2f}" if ref.comparable and ref.per is None else "-"
            rows.append((ref.platform, gpus, str(ref.nodes or "-"), ref.algorithm,
                         f"{ref.busbw_gbs:g}", ref.basis, ref.sources[0],
                         f"{yours:.1f} ({_size(mine.config.size_bytes)}, {timing_label(mine)}, "
                         f"{ranks} ranks)", ratio))
    if not rows:
        return None
    return Table("all_reduce busbw beside published figures (GB/s)",
                 ("published platform", "GPUs", "nodes", "algorithm", "busbw", "basis",
                  "source", "yours (highest)", "yours / published"), tuple(rows),
                 ("dlbench runs NCCL with NVLS off (NCCL_NVLS_ENABLE=0): compare with the ring "
                  "rows; an nvls row, or a default one where NVLS was on, is no target for it",
                  "basis: maintainer = a figure an NCCL maintainer gave as what the platform "
                  "reaches; measured = a user's published nccl-tests output",
                  "per NIC: multiply by the NICs of each node (dlbench does not know them)",
                  "every row and its source: src/dlbench/reference/comm_busbw.json"))


def comm_tables(records: Sequence) -> list[Table]:
    """One table per rank count, backend, profile and timing (the rows are keyed by op and
    size), then the published figures where the platform has some."""
    groups: dict[tuple, list] = {}
    for r in records:
        c = r.config
        groups.setdefault((c.ranks, c.backend, c.interconnect, timing_label(r)), []).append(r)
    out = []
    for (n, backend, profile, timing), part in groups.items():
        title = f"Collectives, {n} ranks, {backend}, {profile}"
        rest = timing.removeprefix("eager").removeprefix(", ")  # eager goes unsaid
        out.append(comm_table(part, f"{title}, {rest}" if rest else title))
    ref = reference_table(records)
    return out + ([ref] if ref is not None else [])
