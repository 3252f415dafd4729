"""Collective bandwidth as nccl-tests defines it (doc/PERFORMANCE.md): algbw and busbw."""

from __future__ import annotations

COMM_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor (doc/PERFORMANCE.md, "Bus bandwidth"): busbw = algbw x this.

    AllReduce 2(n-1)/n; ReduceScatter and AllGather (n-1)/n; Broadcast 1 (and Reduce 1);
    AllToAll (n-1)/n, as nccl-tests' alltoall.cu computes it. The factor makes the figure
    comparable with the hardware's peak link bandwidth whatever the rank count.
    """
    if op not in COMM_OPS:
        raise ValueError(f"--op must be one of {', '.join(COMM_OPS)}; got {op!r}")
    if n < 1:
        raise ValueError(f"rank count must be >= 1, got {n}")
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def algbw(size_bytes: int, time_s: float) -> float:
    """nccl-tests' algorithm bandwidth: the operation's size over its time, bytes per second.

    The size is nccl-tests' "size" column: the buffer being reduced or broadcast; for all_gather
    the gathered (output) buffer; for reduce_scatter the input buffer; for all_to_all one rank's
    send buffer.
    """
    return size_bytes / time_s
