"""Collective bandwidth, as nccl-tests measures it: time per size, algbw, busbw, #wrong.

For each operation, size and placement (out-of-place, in-place), every rank fills its buffers with
values whose correct result is known exactly (small integers, exact in any float type), runs the
collective once and counts the elements that differ from the expected result (nccl-tests'
``#wrong``); then it runs ``warmup`` iterations, timed apart, and ``iters`` timed iterations in
the one measured window (:mod:`dlbench.measure.window`: CUDA events on a GPU, ``perf_counter``
on the CPU; a fixed count, as nccl-tests' ``-n``, so every rank runs the same collectives with
nothing to agree on and no stopping rule). algbw and busbw are computed from the times
in :mod:`dlbench.records.scaling` (doc/PERFORMANCE.md's definitions).

Sizes follow nccl-tests' "size" column: all_reduce and broadcast the buffer; all_gather the output
(gathered) buffer; reduce_scatter the input buffer; all_to_all one rank's send buffer.
Runs inside a torchrun rank with the process group initialised; prints and writes nothing.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from dlbench.measure.window import MeasuredWindow

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
          "float64": torch.float64, "int32": torch.int32}


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
        raise ValueError("need 1 <= --min <= --max and --factor >= 2")
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


def _pattern(n: int, rank: int, device: torch.device, dtype: torch.dtype,
             offset: int = 0) -> torch.Tensor:
    """Rank-dependent small integers ((i + offset) mod 7 + rank + 1): sums of a few are exact."""
    i = torch.arange(offset, offset + n, device=device, dtype=torch.int64)
    return ((i % 7) + rank + 1).to(dtype)


def expected(op: str, count: int, rank: int, world: int, device: torch.device,
             dtype: torch.dtype) -> torch.Tensor:
    """The exact result this rank must hold after the op, for inputs made by :func:`_pattern`."""
    if op == "all_reduce":
        return sum(_pattern(count, r, device, torch.int64) for r in range(world)).to(dtype)
    if op == "broadcast":
        return _pattern(count, 0, device, dtype)
    if op == "all_gather":
        return torch.cat([_pattern(count, r, device, dtype) for r in range(world)])
    chunk = count // world
    if op == "reduce_scatter":
        return sum(_pattern(chunk, r, device, torch.int64, rank * chunk)
                   for r in range(world)).to(dtype)
    # all_to_all: chunk j of rank r goes to rank j, which stores it at position r.
    return torch.cat([_pattern(chunk, r, device, dtype, rank * chunk) for r in range(world)])


class _Op:
    """Buffers and the call of one collective at one size and placement."""

    def __init__(self, op: str, count: int, inplace: bool, rank: int, world: int,
                 device: torch.device, dtype: torch.dtype) -> None:
        self.op, self.count, self.inplace = op, count, inplace
        self.rank, self.world, self.device, self.dtype = rank, world, device, dtype
        out_n = count * world if op == "all_gather" else (
            count // world if op == "reduce_scatter" else count)
        if inplace:
            # nccl-tests' in-place: the input lives inside the output buffer (all_gather: this
            # rank's part of it; reduce_scatter: the output is this rank's part of the input).
            big = out_n if op != "reduce_scatter" else count
            self.buf = torch.empty(big, device=device, dtype=dtype)
            if op == "all_gather":
                self.inp, self.out = self.buf.narrow(0, rank * count, count), self.buf
            elif op == "reduce_scatter":
                self.inp, self.out = self.buf, self.buf.narrow(0, rank * out_n, out_n)
            else:
                self.inp = self.out = self.buf
        else:
            self.inp = torch.empty(count, device=device, dtype=dtype)
            self.out = torch.empty(out_n, device=device, dtype=dtype)

    def fill(self) -> None:
        self.inp.copy_(_pattern(self.count, self.rank, self.device, self.dtype))

    def __call__(self, check: bool = False) -> None:
        op = self.op
        if op in ("all_reduce", "broadcast"):
            # torch's all_reduce and broadcast work in place: out-of-place copies the input into
            # the output buffer for the checked call only, so the timed calls are the collective.
            if check and self.out is not self.inp:
                self.out.copy_(self.inp)
            if op == "all_reduce":
                dist.all_reduce(self.out)
            else:
                dist.broadcast(self.out, src=0)
        elif op == "all_gather":
            dist.all_gather_into_tensor(self.out, self.inp)
        elif op == "reduce_scatter":
            dist.reduce_scatter_tensor(self.out, self.inp)
        else:
            dist.all_to_all_single(self.out, self.inp)

    def wrong(self) -> int:
        want = expected(self.op, self.count, self.rank, self.world, self.device, self.dtype)
        return int((self.out != want).sum().item())


def run_rank(job: dict[str, Any], local_rank: int, control: dist.ProcessGroup | None
             ) -> dict[str, Any]:
    """Every (op, size, placement) of the job on this rank: raw times, #wrong, or the error."""
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cuda", local_rank) if job["backend"] == "nccl" else torch.device("cpu")
    dtype = DTYPES[job["dtype"]]
    elem = torch.empty((), dtype=dtype).element_size()
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
                    row.update(_measure(op, count, inplace, rank, world, device, dtype, job))
                except Exception as exc:  # a row that fails is a row, the sweep goes on
                    row["error"] = f"{type(exc).__name__}: {exc}"[:1500]
                rows.append(row)
    return {"rows": rows, "world": world}


def _measure(op: str, count: int, inplace: bool, rank: int, world: int, device: torch.device,
             dtype: torch.dtype, job: dict[str, Any]) -> dict[str, Any]:
    c = _Op(op, count, inplace, rank, world, device, dtype)
    c.fill()
    if job.get("corrupt_rank") == rank:
        c.inp.view(-1)[0] += 1  # fault injection for tests: one wrong input element
    window = MeasuredWindow(device)
    window.first_step(lambda: c(check=True))  # the checked call: its time is not kept
    wrong = c.wrong()  # note: a sync point, before the timed iterations
    window.warm_up(c, job["warmup"])
    window.run(c, job["iters"])
    return {"times_s": list(window.step_times_s), "wrong": wrong}
