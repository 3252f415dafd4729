"""nccl-tests' printed output, read back: the ``*_perf`` tables committed beside a campaign's store
(``results/*/nccl-*.txt``), so a page can set ``dlbench comm`` beside them figure by figure.

nccl-tests prints a header (``# nccl-tests version 2.19.6 nccl-headers=22809
nccl-library=22809``, then ``# nThread 1 nGpus 2 ... iters: 20 ... graph: 20 ...``) and one row
per size: size, count, type, redop, root, then out-of-place time (us), algbw, busbw (GB/s) and
#wrong, then the same four in place. With ``-I 1`` (per-iteration CUDA-event timing, its header
says ``# Per-Iteration Report``) each placement has four more columns after its #wrong: i_min,
i_max, i_p99 (us) and i_cv% over the timed iterations, each iteration's time the slowest GPU's.
A file may hold several runs; each starts at its version line. Lines that are not part of a run
(a shell's ``== command`` line, ``make``'s output) are skipped. Pure functions of the text: no
I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

_VERSION = re.compile(r"^# nccl-tests version (\S+)"
                      r"(?: nccl-headers=(\d+))?(?: nccl-library=(\d+))?")
# "nGpus 2", "warmup iters: 1 iters: 20 agg iters: 1", "graph: 20": the longer names first, so
# "warmup iters" and "agg iters" are never read as "iters"
_SETTING = re.compile(r"\b(nGpus|warmup iters:|agg iters:|iters:|graph:) (\d+)")
_TEST = re.compile(r"^# Collective test starting: (\S+)")
# nccl-tests' binaries by the collective dlbench calls by another name
_OP_NAMES = {"alltoall": "all_to_all"}
#: torch's element types (``dlbench comm --dtype``) as nccl-tests prints them in its type column
PRINTED_TYPES = {"float32": "float", "float16": "half", "bfloat16": "bfloat16",
                 "float64": "double", "int32": "int32"}


@dataclass(frozen=True)
class Row:
    """One size of one run: out-of-place then in-place, time in us, algbw and busbw in GB/s
    (1e9 B/s, as printed), #wrong (None where nccl-tests printed ``N/A``: ``-c 0``); with ``-I``,
    the per-iteration figures (min, max, p99 in us, cv in %), None in a run without it."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    out_time_us: float
    out_algbw: float
    out_busbw: float
    out_wrong: int | None
    in_time_us: float
    in_algbw: float
    in_busbw: float
    in_wrong: int | None
    out_i_min_us: float | None = None
    out_i_max_us: float | None = None
    out_i_p99_us: float | None = None
    out_i_cv_pct: float | None = None
    in_i_min_us: float | None = None
    in_i_max_us: float | None = None
    in_i_p99_us: float | None = None
    in_i_cv_pct: float | None = None

    def busbw(self, inplace: bool) -> float:
        return self.in_busbw if inplace else self.out_busbw

    def time_us(self, inplace: bool) -> float:
        return self.in_time_us if inplace else self.out_time_us

    def p99_us(self, inplace: bool) -> float | None:
        """``-I``'s per-iteration p99 (None without ``-I``)."""
        return self.in_i_p99_us if inplace else self.out_i_p99_us


@dataclass(frozen=True)
class Run:
    """One ``*_perf`` run: its version line, its settings (``graph`` is ``-G``: iterations per
    CUDA-graph replay, 0 without it; ``gpus`` is ``-g``, the GPUs one process drives) and its
    rows in printed order; ``test`` is the binary's name as it printed it (``all_reduce_perf``),
    None in output that does not say."""

    version: str
    nccl_headers: str | None
    nccl_library: str | None
    gpus: int | None
    iters: int | None
    graph: int | None
    rows: tuple[Row, ...]
    test: str | None = None

    @property
    def op(self) -> str | None:
        """The collective as ``dlbench comm --op`` names it (``alltoall_perf`` -> all_to_all)."""
        if self.test is None:
            return None
        name = self.test.removesuffix("_perf")
        return _OP_NAMES.get(name, name)

    def like(self, op: str, dtype: str, timing: str) -> bool:
        """Whether this run measured what a ``dlbench comm`` record of ``op``, ``dtype`` and
        ``timing`` did: the same collective and element type, ``-G`` beside graph timing and a
        run without it beside eager or batched."""
        return (self.op == op and bool(self.graph) == (timing == "graph") and bool(self.rows)
                and self.rows[-1].dtype == PRINTED_TYPES.get(dtype, dtype))

    def row(self, size_bytes: int) -> Row:
        for r in self.rows:
            if r.size_bytes == size_bytes:
                return r
        raise LookupError(f"nccl-tests {self.version} printed no row for {size_bytes} B")

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(r.size_bytes for r in self.rows)

    @property
    def per_iteration(self) -> bool:
        """Whether the run printed ``-I``'s per-iteration columns (every row of it does)."""
        return bool(self.rows) and all(r.out_i_p99_us is not None for r in self.rows)


def _wrong(text: str) -> int | None:
    return None if text == "N/A" else int(text)


def parse_row(line: str) -> Row | None:
    """A size row (13 fields, or 21 with ``-I``'s per-iteration columns), or None for any other
    line."""
    f = line.split()
    if len(f) not in (13, 21) or not f[0].isdigit() or not f[1].isdigit():
        return None
    per = len(f) == 21  # each placement: time algbw busbw #wrong, then i_min i_max i_p99 i_cv%
    o, i = 5, 13 if per else 9
    try:
        row = Row(int(f[0]), int(f[1]), f[2], f[3],
                  float(f[o]), float(f[o + 1]), float(f[o + 2]), _wrong(f[o + 3]),
                  float(f[i]), float(f[i + 1]), float(f[i + 2]), _wrong(f[i + 3]))
        if per:
            row = replace(row, **{f"{place}_i_{name}": float(f[at + 4 + k])
                                  for place, at in (("out", o), ("in", i))
                                  for k, name in enumerate(("min_us", "max_us", "p99_us",
                                                            "cv_pct"))})
        return row
    except ValueError:
        return None


def parse(text: str) -> list[Run]:
    """Every run in ``text``, in order; rows before any version line are an error (a table whose
    settings are unknown cannot be compared)."""
    runs: list[Run] = []
    head: dict | None = None
    rows: list[Row] = []

    def close() -> None:
        if head is not None:
            runs.append(Run(rows=tuple(rows), **head))

    for line in text.splitlines():
        m = _VERSION.match(line.strip())
        if m:
            close()
            head = {"version": m[1], "nccl_headers": m[2], "nccl_library": m[3], "gpus": None,
                    "iters": None, "graph": None}
            rows = []
            continue
        if line.startswith("#"):
            if head is not None:
                test = _TEST.match(line)
                if test:
                    head["test"] = test[1]
                for name, value in _SETTING.findall(line):
                    key = {"nGpus": "gpus", "iters:": "iters", "graph:": "graph"}.get(name)
                    if key:
                        head[key] = int(value)
            continue
        row = parse_row(line)
        if row is None:
            continue
        if head is None:
            raise ValueError(f"an nccl-tests row before any '# nccl-tests version' line: {line!r}")
        rows.append(row)
    close()
    return runs


def only_run(text: str) -> Run:
    """The one run of a file that holds exactly one."""
    runs = parse(text)
    if len(runs) != 1:
        raise ValueError(f"expected one nccl-tests run, found {len(runs)}")
    return runs[0]
