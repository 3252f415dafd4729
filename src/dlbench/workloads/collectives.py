"""Collective bandwidth, as nccl-tests measures it: time per size, algbw, busbw, #wrong.

For each operation, size and placement (out-of-place, in-place), every rank fills its buffers with
values whose correct result is known exactly (:class:`Pattern`: small integers whose every
partial sum is exact in the element type), runs the collective once and counts the elements that
differ from the expected result (nccl-tests' ``#wrong``); then it runs ``warmup`` samples, timed
apart, and ``iters`` timed samples in the one measured window (:mod:`dlbench.measure.window`:
CUDA events on a GPU, ``perf_counter`` on the CPU; a fixed count, as nccl-tests' ``-n``, so every
rank runs the same collectives with nothing to agree on and no stopping rule). algbw and busbw
are computed from the times in :mod:`dlbench.records.collective` (doc/PERFORMANCE.md's
definitions).

What one timed sample is depends on the job's ``timing``
(:data:`dlbench.records.collective.TIMINGS`):

- ``eager``: one call of the collective, a boundary event after it (nccl-tests' ``-I``). At small
  sizes the figure is then Python's launch cost as much as the fabric's.
- ``batched``: ``iters_per_sample`` calls queued back to back, one boundary event after the batch
  (nccl-tests' default loop, which times ``-n`` launches and waits once). Works on gloo too.
- ``graph``: ``iters_per_sample`` calls captured in one CUDA graph (after a warm-up on a side
  stream, as PyTorch's CUDA-graph rules ask), each sample one replay (nccl-tests' ``-G``): no
  launch cost at all. NCCL only.

A sample's time is stored divided by its iterations (a time per iteration).

Who is called depends on the job's ``api``: ``torch`` (the default) times torch.distributed's
collectives, what a PyTorch program gets; ``nccl`` times NCCL's own C API called directly
(:mod:`dlbench.workloads.nccl_api`), as nccl-tests does, on the same library and buffers, and
calls all_reduce and broadcast out of place where the row is (torch.distributed has no
out-of-place form of those two: its out-of-place row calls them in place on a second buffer).
Where the buffers come from depends on the job's ``buffers``: PyTorch's caching allocator
(``torch``, the default), or ``ncclMemAlloc`` (``nccl``: a ``torch.cuda.MemPool`` on
ProcessGroupNCCL's allocator), as nccl-tests allocates.

Each call of a sample goes to the next of several copies of its buffers (``rotate``, the
default), as nccl-tests moves its buffers by one size per iteration "to avoid cache effects":
``min(largest size of the job // size, iterations of a sample)`` copies (eager: of the timed
samples), so a call does not find the previous call's data in the GPU's L2 cache. Without it
(``rotate`` off, every record made before the field existed) a two-H200 host read all_reduce up
to 12.6% above nccl-tests' ``-G`` from 1 to 16 MiB, where a size's buffers fit in L2.

On CUDA every call of a job is issued on a stream of the job's own, not on PyTorch's default
stream: nccl-tests issues on a non-blocking stream, and a CUDA graph replayed on the default
stream ran every 1 MiB all_reduce in it about 4.5 us slower on two H200s (17.5 us against 13.2
us on a side stream, the same graph; docs/scaling.md).

Sizes follow nccl-tests' "size" column: all_reduce and broadcast the buffer; all_gather the output
(gathered) buffer; reduce_scatter the input buffer; all_to_all one rank's send buffer.
Runs inside a torchrun rank with the process group initialised; prints and writes nothing. With
``job["nccl_log_dir"]`` (the probe job, see :mod:`dlbench.launch.torchrun`), NCCL was started with
its tuning log there: each row then also carries what NCCL chose for it, read from rank 0's log.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist

from dlbench.measure.nccl_tuning import chosen_for, parse_lines, version_text
from dlbench.measure.window import MeasuredWindow
from dlbench.workloads.nccl_api import Communicator

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int32": torch.int32}

#: Every integer from 0 up to this is exact in the type (2^(significand bits), implicit bit
#: included): float32 24 bits, float16 11, bfloat16 8, float64 53.
EXACT_INTEGERS = {"float32": 1 << 24, "float16": 1 << 11, "bfloat16": 1 << 8,
                  "float64": 1 << 53, "int32": (1 << 31) - 1}

#: Calls of the collective on a side stream before a CUDA graph captures it (PyTorch's
#: "warm up on a side stream" rule; NCCL connects its peers on the first calls).
GRAPH_WARMUP_CALLS = 3


def parse_size(text: str) -> int:
    """``8B``, ``64K``/``64KiB``, ``1M``, ``4GiB`` or plain bytes -> bytes (binary units, as nccl-tests)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(t)


def sizes_between(lo: int, hi: int, factor: int = 2) -> list[int]:
    """lo, lo*factor, ... up to hi (nccl-tests' ``-b lo -e hi -f factor``)."""
    if lo < 1 or hi < lo or factor < 2:
        raise ValueError("need 1 <= min_size <= max_size and factor >= 2")
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= factor
    return out


def element_count(op: str, size_bytes: int, elem: int, world: int) -> int:
    """Elements in one rank's *input* buffer for a size, rounded down to what the op can split."""
    n = size_bytes // elem
    if op == "all_gather":
        return n // world                      # size is the gathered output
    if op in ("reduce_scatter", "all_to_all"):
        return (n // world) * world            # split evenly into world chunks
    return n


@dataclass(frozen=True)
class Pattern:
    """The inputs of every rank, chosen so that any sum of them is exact in the element type.

    Rank r holds ``(i mod m) + (r mod m) + 1`` at element i: non-negative integers, so every
    partial sum of a reduction, in whatever order a ring, a tree or a switch adds them, lies
    between 0 and the full sum ``world * (2m - 1)``, and ``m`` (at most 7) is the largest that
    keeps that full sum within :data:`EXACT_INTEGERS` of the type: exact in bfloat16 and float16
    as in float32 (nccl-tests' verifiable inputs follow the same rule, with mantissa-sized
    integers). The sum over ranks still varies with i, so a misplaced chunk is seen. Where even
    m = 2 would overflow (bfloat16 beyond 85 ranks) every element is held by one rank alone
    (``m`` = 0: rank ``i mod world`` holds 1, the others 0), so every sum is 1.
    """

    world: int
    m: int

    @classmethod
    def for_type(cls, dtype: str, world: int) -> "Pattern":
        m = min(7, (EXACT_INTEGERS[dtype] // world + 1) // 2)
        return cls(world, m if m >= 2 else 0)

    def max_sum(self) -> int:
        """The largest value any sum over ranks reaches."""
        return self.world * (2 * self.m - 1) if self.m else 1

    def values(self, i: torch.Tensor, rank: int) -> torch.Tensor:
        """Rank ``rank``'s values at element indices ``i`` (int64)."""
        if self.m == 0:
            return (i % self.world == rank).to(torch.int64)
        return i % self.m + (rank % self.m) + 1

    def total(self, i: torch.Tensor) -> torch.Tensor:
        """The sum over every rank at element indices ``i`` (int64), in closed form."""
        if self.m == 0:
            return torch.ones_like(i)
        return self.world * (i % self.m) + (sum(r % self.m for r in range(self.world))
                                            + self.world)


def _indices(n: int, device: torch.device, offset: int = 0) -> torch.Tensor:
    return torch.arange(offset, offset + n, device=device, dtype=torch.int64)


def rank_input(p: Pattern, n: int, rank: int, device: torch.device, dtype: torch.dtype,
               offset: int = 0) -> torch.Tensor:
    """Rank ``rank``'s ``n`` values from element ``offset`` on, in ``dtype``."""
    return p.values(_indices(n, device, offset), rank).to(dtype)


def expected(op: str, count: int, rank: int, world: int, device: torch.device,
             dtype: torch.dtype, pattern: Pattern | None = None) -> torch.Tensor:
    """The exact result this rank must hold after the op, for inputs made by ``pattern``
    (the float32 pattern of ``world`` ranks unless given)."""
    p = pattern or Pattern.for_type("float32", world)
    if op == "all_reduce":
        return p.total(_indices(count, device)).to(dtype)
    if op == "broadcast":
        return rank_input(p, count, 0, device, dtype)
    if op == "all_gather":
        return torch.cat([rank_input(p, count, r, device, dtype) for r in range(world)])
    chunk = count // world
    if op == "reduce_scatter":
        return p.total(_indices(chunk, device, rank * chunk)).to(dtype)
    # all_to_all: chunk j of rank r goes to rank j, which stores it at position r.
    return torch.cat([rank_input(p, chunk, r, device, dtype, rank * chunk) for r in range(world)])


@dataclass(frozen=True)
class Calls:
    """How a job calls its collectives: ``nccl``, NCCL's own API (api nccl), else None
    (torch.distributed); ``pool``, the memory pool the buffers come from (buffers nccl), else
    None (the caching allocator); ``stream``, the stream the calls go to (a
    :data:`dlbench.records.collective.STREAMS` name)."""

    nccl: Callable[[str, torch.Tensor, torch.Tensor], None] | None = None
    pool: Any = None
    stream: str | None = None


class _Op:
    """Buffers and the call of one collective at one size and placement."""

    def __init__(self, op: str, count: int, inplace: bool, rank: int, world: int,
                 device: torch.device, dtype: torch.dtype, pattern: Pattern,
                 calls: Calls = Calls(), copies: int = 1) -> None:
        self.op, self.count, self.inplace = op, count, inplace
        self.nccl = calls.nccl
        self.rank, self.world, self.device, self.dtype = rank, world, device, dtype
        self.pattern = pattern
        out_n = count * world if op == "all_gather" else (
            count // world if op == "reduce_scatter" else count)
        pool = (torch.cuda.use_mem_pool(calls.pool) if calls.pool is not None
                else contextlib.nullcontext())
        with pool:  # one set of buffers a copy: call i works on copy i mod copies
            sets = [self._allocate(count, out_n) for _ in range(copies)]
        self.inps, self.outs = [s[0] for s in sets], [s[1] for s in sets]
        self.inp, self.out = self.inps[0], self.outs[0]  # the checked call's
        # torch.distributed's all_reduce and broadcast work in place only
        self.call_in_place = inplace or (self.nccl is None and op in ("all_reduce", "broadcast"))

    def _allocate(self, count: int, out_n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One (input, output) pair."""
        op, rank, device, dtype = self.op, self.rank, self.device, self.dtype
        if self.inplace:
            # nccl-tests' in-place: the input lives inside the output buffer (all_gather: this
            # rank's part of it; reduce_scatter: the output is this rank's part of the input).
            big = out_n if op != "reduce_scatter" else count
            buf = torch.empty(big, device=device, dtype=dtype)
            if op == "all_gather":
                return buf.narrow(0, rank * count, count), buf
            if op == "reduce_scatter":
                return buf, buf.narrow(0, rank * out_n, out_n)
            return buf, buf
        return (torch.empty(count, device=device, dtype=dtype),
                torch.empty(out_n, device=device, dtype=dtype))

    def fill(self) -> None:
        """Every copy's input, the same values (the timed calls move data like the checked one)."""
        values = rank_input(self.pattern, self.count, self.rank, self.device, self.dtype)
        for inp, out in zip(self.inps, self.outs):
            inp.copy_(values)
            if self.call_in_place and not self.inplace:  # torch's call on a second buffer
                out.copy_(values)

    def __call__(self, check: bool = False, i: int = 0) -> None:
        """The collective on copy ``i`` mod the copies (the checked call: copy 0)."""
        op, inp, out = self.op, self.inps[i % len(self.inps)], self.outs[i % len(self.outs)]
        if self.nccl is not None:
            self.nccl(op, inp, out)  # out of place where the buffers differ
        elif op in ("all_reduce", "broadcast"):
            # torch's all_reduce and broadcast work in place: out-of-place copies the input into
            # the output buffer for the checked call only, so the timed calls are the collective.
            if check and out is not inp:
                out.copy_(inp)
            if op == "all_reduce":
                dist.all_reduce(out)
            else:
                dist.broadcast(out, src=0)
        elif op == "all_gather":
            dist.all_gather_into_tensor(out, inp)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(out, inp)
        else:
            dist.all_to_all_single(out, inp)

    def wrong(self) -> int:
        want = expected(self.op, self.count, self.rank, self.world, self.device, self.dtype,
                        self.pattern)
        return int((self.out != want).sum().item())


class TuningLog:
    """The lines NCCL appends to this process's debug file, read as they come.

    NCCL names the file from ``NCCL_DEBUG_FILE`` with ``%p`` the process id, so this rank's file
    is the one in ``folder`` that ends in ``.<pid>.log``; it appears at NCCL's first call.
    """

    def __init__(self, folder: str | Path, pid: int | None = None) -> None:
        self.folder = Path(folder)
        self.pid = os.getpid() if pid is None else pid
        self._path: Path | None = None
        self._pos = 0

    def new_lines(self) -> list[str]:
        """The whole lines written since the last call (none before the file exists)."""
        if self._path is None:
            found = sorted(self.folder.glob(f"*.{self.pid}.log"))
            if not found:
                return []
            self._path = found[0]
        with open(self._path, "rb") as f:
            f.seek(self._pos)
            data = f.read()
        end = data.rfind(b"\n") + 1  # a line NCCL is still writing waits for the next call
        self._pos += end
        return data[:end].decode(errors="replace").splitlines()


def run_rank(job: dict[str, Any], local_rank: int, control: dist.ProcessGroup | None
             ) -> dict[str, Any]:
    """Every (op, size, placement) of the job on this rank: raw times, #wrong, or the error;
    with the rank's host, and for NCCL its version and ``NCCL_*`` variables."""
    rank, world = dist.get_rank(), dist.get_world_size()
    nccl = job["backend"] == "nccl"
    device = torch.device("cuda", local_rank) if nccl else torch.device("cpu")
    dtype = DTYPES[job["dtype"]]
    pattern = Pattern.for_type(job["dtype"], world)
    elem = torch.empty((), dtype=dtype).element_size()
    log = TuningLog(job["nccl_log_dir"]) if job.get("nccl_log_dir") else None
    own = None
    if job.get("api", "torch") == "nccl":
        own = Communicator.over_process_group(rank, world, device)
    calls = Calls(nccl=own, pool=_nccl_pool(device) if job.get("buffers") == "nccl" else None,
                  stream="side" if nccl else "host")
    try:
        # the job's own stream (see the module's doc); the CPU has none
        with torch.cuda.stream(torch.cuda.Stream(device)) if nccl else contextlib.nullcontext():
            rows = _rows(job, rank, world, device, dtype, pattern, elem, log, calls)
    finally:
        if own is not None:
            torch.cuda.synchronize(device)  # note: a sync point, every call done before NCCL's
            own.close()                     # communicator goes
    out: dict[str, Any] = {"rows": rows, "world": world, "host": socket.gethostname()}
    if nccl:
        out["nccl_version"] = version_text(torch.cuda.nccl.version())
        out["nccl_env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    return out


def buffer_copies(job: dict[str, Any], size_bytes: int) -> int:
    """Copies of a size's buffers the calls of a sample cycle through: as nccl-tests, as many as
    the job's largest size holds (its ``maxbytes // size``), at most one a call of a sample
    (eager: one a timed sample); 1 with ``rotate`` off."""
    if not job.get("rotate") or size_bytes <= 0:
        return 1
    calls = int(job["iters"]) if job.get("timing", "eager") == "eager" \
        else int(job.get("iters_per_sample", 1))
    return max(1, min(max(job["sizes"]) // size_bytes, calls))


def _nccl_pool(device: torch.device) -> Any:
    """A memory pool on ProcessGroupNCCL's allocator (``ncclMemAlloc``): nccl-tests' buffers."""
    backend = dist.group.WORLD._get_backend(device)
    allocator = getattr(backend, "mem_allocator", None)
    if allocator is None or not hasattr(torch.cuda, "MemPool"):
        raise RuntimeError(f'buffers="nccl" needs ProcessGroupNCCL.mem_allocator and '
                           f'torch.cuda.MemPool, which torch {torch.__version__} lacks; use '
                           f'buffers="torch"')
    return torch.cuda.MemPool(allocator)


def _rows(job: dict[str, Any], rank: int, world: int, device: torch.device,
          dtype: torch.dtype, pattern: Pattern, elem: int, log: "TuningLog | None",
          calls: Calls) -> list[dict[str, Any]]:
    rows = []
    for op in job["ops"]:
        for size in job["sizes"]:
            count = element_count(op, size, elem, world)
            for inplace in (False, True):
                row: dict[str, Any] = {"op": op, "size_bytes": size, "inplace": inplace,
                                       "count": count}
                if count == 0:
                    row["skipped"] = f"{size} B holds less than one element per rank"
                    rows.append(row)
                    continue
                if inplace and op == "all_to_all":
                    # torch's all_to_all_single must not alias its output and input: the result
                    # would be wrong (the check catches it), so there is no in-place row.
                    row["skipped"] = "all_to_all has no in-place form in torch.distributed"
                    rows.append(row)
                    continue
                try:
                    row.update(_measure(op, count, inplace, rank, world, device, dtype, pattern,
                                        job, log, calls, buffer_copies(job, size)))
                except Exception as exc:  # a row that fails is a row, the sweep goes on
                    row["error"] = f"{type(exc).__name__}: {exc}"[:1500]
                rows.append(row)
    return rows


def _measure(op: str, count: int, inplace: bool, rank: int, world: int, device: torch.device,
             dtype: torch.dtype, pattern: Pattern, job: dict[str, Any],
             log: TuningLog | None = None, calls: Calls = Calls(),
             copies: int = 1) -> dict[str, Any]:
    """One row: the checked call, then the warm-up and the timed samples. With ``log`` (the
    probe job), also what NCCL chose for the timed calls: the lines of the checked call, of the
    warm-up and of a graph's side-stream warm-up are set aside, so only the calls timed (or
    captured: a replay writes none) count. ``copies``: of the buffers, call i of a sample on
    copy i mod copies (:func:`buffer_copies`)."""
    timing, k = job.get("timing", "eager"), int(job.get("iters_per_sample", 1))
    c = _Op(op, count, inplace, rank, world, device, dtype, pattern, calls, copies)
    c.fill()
    if job.get("corrupt_rank") == rank:
        c.inp.view(-1)[0] += 1  # fault injection for tests: one wrong input element
    set_aside: Callable[[], Any] = log.new_lines if log is not None else (lambda: None)
    window = MeasuredWindow(device)
    window.first_step(lambda: c(check=True))  # the checked call: its time is not kept
    wrong = c.wrong()  # note: a sync point, before the timed iterations
    set_aside()
    step, release = _sample(c, timing, k, device, before_capture=set_aside)
    try:
        window.warm_up(step, job["warmup"])
        if timing != "graph":
            set_aside()
        window.run(step, job["iters"])
    finally:
        release()
    out: dict[str, Any] = {"times_s": [t / k for t in window.step_times_s], "wrong": wrong,
                           "call_in_place": c.call_in_place, "buffer_copies": len(c.inps)}
    if calls.stream is not None:
        out["stream"] = calls.stream
    if log is not None:
        chosen = chosen_for(op, parse_lines(log.new_lines()))
        out["nccl"] = {"algorithm": chosen.algorithm, "protocol": chosen.protocol,
                       "note": chosen.note}
    return out


def _sample(c: _Op, timing: str, k: int, device: torch.device,
            before_capture: Callable[[], Any] = lambda: None
            ) -> tuple[Callable[[], None], Callable[[], None]]:
    """One timed sample of ``timing`` (a callable), and what frees its resources. Call j of a
    sample works on buffer copy j (eager: sample j on copy j)."""
    if timing == "eager":
        calls = itertools.count()
        return (lambda: c(i=next(calls))), lambda: None
    if timing == "batched":
        def batch() -> None:
            for j in range(k):  # queued back to back: no event, no sync between them
                c(i=j)
        return batch, lambda: None
    if timing == "graph":
        graph = _capture(c, k, device, before_capture)

        def release() -> None:
            torch.cuda.synchronize(device)  # note: a sync point, every replay done before freeing
            graph.reset()
        return graph.replay, release
    raise ValueError(f"unknown timing {timing!r}")


def _capture(c: _Op, k: int, device: torch.device,
             before_capture: Callable[[], Any] = lambda: None) -> "torch.cuda.CUDAGraph":
    """``k`` calls of the collective captured in one CUDA graph (NCCL on CUDA only).

    PyTorch's rule for capture: warm up on a side stream first, so that lazy initialisation
    (NCCL's peer connections, workspace) happens outside the graph. The capture's error mode is
    thread-local, as nccl-tests' ``-G`` captures: NCCL's proxy thread may call CUDA meanwhile.
    The buffers are allocated before the capture and outlive the graph, so replays read and
    write the same memory the checked call did.
    """
    if device.type != "cuda":
        raise ValueError('timing graph needs CUDA (NCCL); use timing="batched" on the CPU')
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(GRAPH_WARMUP_CALLS):
            c()
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)  # note: a sync point, before the capture begins
    before_capture()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for j in range(k):
            c(i=j)
    return graph
