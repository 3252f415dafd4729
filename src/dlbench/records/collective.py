"""The ``comm`` kind: one collective at one size, every rank's raw iteration times, its #wrong,
and what NCCL ran it with.

algbw and busbw are nccl-tests' figures (:mod:`dlbench.measure.bandwidth`); the algorithm and
protocol are NCCL's own tuning output (:mod:`dlbench.measure.nccl_tuning`).

Stores keep the kind's name, ``comm`` (the command's), whatever this module is called: a record
names its kind, never a module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from dlbench.config import INTERCONNECT_PROFILES, ConfigError, choice
from dlbench.measure.bandwidth import COMM_OPS, algbw, busbw_factor
from dlbench.measure.nccl_tuning import UNKNOWN, busbw_comparable
from dlbench.measure.stats import mean, percentile
from dlbench.records.base import ErrorType, Record, asdict, config_key, known_fields

#: How the timed iterations are issued (``--timing``):
#: ``eager``: one Python call per iteration, a CUDA event after each (nccl-tests' ``-I``);
#: ``batched``: ``iters_per_sample`` calls queued back to back, an event after the batch (on
#: the CPU, the host clock around it); ``graph``: ``iters_per_sample`` iterations captured in
#: one CUDA graph, replayed, an event after each replay (nccl-tests' ``-G``; NCCL only).
TIMINGS = ("eager", "batched", "graph")
#: Whose collectives are timed (``--api``): ``torch``: torch.distributed's, what a PyTorch
#: program gets; ``nccl``: NCCL's own C API called directly, as nccl-tests calls it (NCCL only).
APIS = ("torch", "nccl")
#: Where the buffers come from (``--buffers``): ``torch``: PyTorch's caching allocator, what a
#: PyTorch program's tensors are; ``nccl``: ``ncclMemAlloc`` (through ``torch.cuda.MemPool``
#: and ProcessGroupNCCL's allocator), as nccl-tests allocates its buffers (NCCL only).
BUFFERS = ("torch", "nccl")
#: The stream the timed calls were issued (or the graph replayed) on: ``side``, one of the job's
#: own (non-blocking, as nccl-tests' stream); ``default``, PyTorch's default stream, where every
#: record made before the field existed ran them; ``host`` on gloo (no CUDA stream). On two
#: H100s and two H200s a graph replayed on the default stream ran every all_reduce up to 5 us
#: slower (docs/scaling.md).
STREAMS = ("side", "default", "host")


@dataclass(frozen=True)
class CommConfig:
    """One collective at one size.

    Attributes:
        op: one of :data:`COMM_OPS` (``--op``).
        size_bytes: nccl-tests' size column (see :func:`algbw`) (``--min`` .. ``--max``).
        dtype: element type (``--dtype``), float32 by default as nccl-tests.
        inplace: the output buffer is (or holds) the input, as nccl-tests' in-place columns.
        ranks: processes in all (``--gpus`` x ``--nnodes``).
        backend: ``nccl`` or ``gloo``.
        interconnect: a profile of :data:`dlbench.config.INTERCONNECT_PROFILES`.
        iters: timed samples (``--iters``, nccl-tests' ``-n``); warmup: untimed ones (``-w``).
        timing: one of :data:`TIMINGS` (``--timing``); every record stored before the flag
            existed was ``eager``.
        iters_per_sample: iterations in one timed sample (``--iters-per-sample``): 1 in eager
            mode, the iterations of one batch or one graph replay otherwise.
        api: one of :data:`APIS`; every record stored before the field existed was ``torch``.
        buffers: one of :data:`BUFFERS`; every record stored before the field existed was
            ``torch``.
        rotate: each call of a sample on the next copy of its buffers, as nccl-tests moves its
            buffers each iteration, so that no call reads what the last one left in the L2 cache
            (``--no-rotate`` turns it off). Every record stored before the field existed called
            one set of buffers (``False``: :meth:`from_dict` reads them so).
    """

    op: str
    size_bytes: int
    ranks: int
    backend: str
    dtype: str = "float32"
    inplace: bool = False
    interconnect: str = "default"
    iters: int = 20
    warmup: int = 5
    timing: str = "eager"
    iters_per_sample: int = 1
    api: str = "torch"
    buffers: str = "torch"
    rotate: bool = True

    def __post_init__(self) -> None:
        choice("op", self.op, COMM_OPS)
        choice("interconnect", self.interconnect, INTERCONNECT_PROFILES)
        choice("timing", self.timing, TIMINGS)
        choice("api", self.api, APIS)
        choice("buffers", self.buffers, BUFFERS)
        for name in ("size_bytes", "ranks", "iters", "iters_per_sample"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}", name)
        if self.warmup < 0:
            raise ConfigError(f"warmup must be >= 0, got {self.warmup}", "warmup")
        if self.timing == "eager" and self.iters_per_sample != 1:
            raise ConfigError("timing eager times every iteration alone: iters_per_sample "
                              "applies to batched and graph", "timing",
                              also=("iters_per_sample",))
        if self.timing == "graph" and self.backend != "nccl":
            raise ConfigError("timing graph captures NCCL collectives in a CUDA graph: it "
                              'needs backend="nccl" on GPUs (batched works on gloo)', "timing")
        if self.api == "nccl" and self.backend != "nccl":
            raise ConfigError('api="nccl" calls NCCL itself: it needs backend="nccl" on GPUs '
                              '(on gloo, api="torch")', "api", also=("backend",))
        if self.buffers == "nccl" and self.backend != "nccl":
            raise ConfigError('buffers="nccl" allocates with ncclMemAlloc: it needs '
                              'backend="nccl" on GPUs (on gloo, buffers="torch")', "buffers",
                              also=("backend",))

    model = None  # the store's model column: a collective has none

    def key(self) -> str:
        d = asdict(self)
        # A field at its default drops out: the keys of records made before it existed.
        if d["timing"] == "eager":
            del d["timing"]
        if d["iters_per_sample"] == 1:
            del d["iters_per_sample"]
        if d["api"] == "torch":
            del d["api"]
        if d["buffers"] == "torch":
            del d["buffers"]
        if not d["rotate"]:
            del d["rotate"]  # the old method keeps the old keys; rotated records get new ones
        return config_key(d)

    @property
    def label(self) -> str:
        timing = "" if self.timing == "eager" else f" {self.timing} x{self.iters_per_sample}"
        timing += "" if self.api == "torch" else f" {self.api} API"
        timing += "" if self.buffers == "torch" else f" {self.buffers} buffers"
        return (f"{self.op} {self.size_bytes}B {self.dtype} {'in-place' if self.inplace else 'out-of-place'}"
                f" x{self.ranks} {self.backend}"
                + ("" if self.interconnect == "default" else f" {self.interconnect}") + timing)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CommConfig":
        known = known_fields(cls)
        # a record without the field was measured on one set of buffers
        return cls(**{"rotate": False, **{k: v for k, v in d.items() if k in known}})


@dataclass(frozen=True, kw_only=True)
class CommRecord(Record):
    """A collective's timing at one size, every rank's raw times, its #wrong, what NCCL ran.

    ``rank_times_s[r]`` holds rank r's timed samples, each as time per iteration: a sample's
    time over its ``iters_per_sample`` iterations (eager: each iteration's own time).
    ``time_s`` follows nccl-tests' default (``-a 1``): each rank's mean iteration time, averaged
    over ranks; ``max_time_s`` is the slowest rank's. ``p50_s``/``p99_s`` are percentiles of the
    samples, each the slowest rank's (as nccl-tests' ``-I`` takes the slowest GPU per
    iteration). ``wrong`` counts elements that differ from the expected result, summed over
    ranks; a row with ``wrong > 0`` has status ``error``.

    ``algorithm``/``protocol`` are what NCCL's tuner chose for this size (``RING``, ``TREE``,
    ``NVLS``...; ``LL``, ``LL128``, ``SIMPLE``), read from its ``TUNING`` log; ``unknown``, with
    ``algorithm_note`` saying why, where it was not read (gloo, no log line, records from before
    it was recorded). ``nccl_version`` and ``nccl_env`` (the ``NCCL_*`` variables) are rank 0's.
    ``rank_hosts``: each rank's host name (empty in records from before it was recorded).

    How the calls were made, which changes the figure without changing the config: ``stream``
    (one of :data:`STREAMS`; ``default`` in every record made before it was recorded) and
    ``call_in_place``, whether the collective was called with its output buffer as its input
    (None where not recorded; :attr:`called_in_place` says what those records did).
    torch.distributed has no out-of-place all_reduce or broadcast, so through it an out-of-place
    row of those two is the collective called in place on a second buffer; NCCL's own API
    (``api="nccl"``) calls them out of place, as nccl-tests does.
    """

    config_type: ClassVar[type] = CommConfig
    kind: ClassVar[str] = "comm"

    rank_times_s: tuple[tuple[float, ...], ...] = ()
    count: int = 0                     # elements per rank's input buffer
    wrong: int | None = None
    launch_env: dict[str, str] = field(default_factory=dict)
    rank_hosts: tuple[str, ...] = ()
    algorithm: str = UNKNOWN
    protocol: str = UNKNOWN
    algorithm_note: str | None = None
    nccl_version: str | None = None
    nccl_env: dict[str, str] = field(default_factory=dict)
    stream: str = "default"
    call_in_place: bool | None = None
    buffer_copies: int | None = None   # copies the calls cycled through (None: before, 1)

    @classmethod
    def from_ranks(cls, config: CommConfig, env: dict, rows: "list[dict[str, Any]]",
                   **job: Any) -> "CommRecord":
        """One op at one size from every rank's row for it (rank order): its raw times, its
        #wrong summed over the ranks (as nccl-tests' count), an error row where a rank raised
        or a result was wrong. ``job`` holds what the job knows of all its rows (``launch_env``,
        ``rank_hosts``, ``nccl_version``, ``nccl_env``, and what NCCL chose for this size:
        ``algorithm``, ``protocol``, ``algorithm_note``). How the calls were made (``stream``,
        ``call_in_place``) is rank 0's row's."""
        count = rows[0]["count"]
        how = {k: rows[0][k] for k in ("stream", "call_in_place", "buffer_copies")
               if k in rows[0]}
        job = {**how, **job}
        errors = [f"rank {r}: {x['error']}" for r, x in enumerate(rows) if x.get("error")]
        if errors:
            return cls(config=config, env=env, status="error", error_type=ErrorType.EXCEPTION,
                       error="\n".join(errors), count=count, **job)
        wrong = sum(x["wrong"] for x in rows)
        return cls(
            config=config, env=env, status="ok" if wrong == 0 else "error",
            error_type=None if wrong == 0 else "wrong_result",
            error=None if wrong == 0 else f"{wrong} element(s) differ from the expected result",
            rank_times_s=tuple(tuple(x["times_s"]) for x in rows), count=count, wrong=wrong,
            **job)

    @property
    def time_s(self) -> float | None:
        if not self.rank_times_s or any(not t for t in self.rank_times_s):
            return None
        return mean([mean(t) for t in self.rank_times_s])

    @property
    def max_time_s(self) -> float | None:
        if not self.rank_times_s or any(not t for t in self.rank_times_s):
            return None
        return max(mean(t) for t in self.rank_times_s)

    def sample_times_s(self) -> tuple[float, ...]:
        """Per timed sample, the slowest rank's time per iteration."""
        if not self.rank_times_s or any(not t for t in self.rank_times_s):
            return ()
        return tuple(max(ts) for ts in zip(*self.rank_times_s))

    @property
    def p50_s(self) -> float | None:
        s = self.sample_times_s()
        return percentile(s, 50) if s else None

    @property
    def p99_s(self) -> float | None:
        s = self.sample_times_s()
        return percentile(s, 99) if s else None

    @property
    def called_in_place(self) -> bool:
        """Whether the collective was called in place: :attr:`call_in_place` where recorded;
        before it was, both APIs called all_reduce and broadcast in place on the output buffer
        (the out-of-place row's input copied into it), the other collectives as placed."""
        if self.call_in_place is not None:
            return self.call_in_place
        return self.config.inplace or self.config.op in ("all_reduce", "broadcast")

    @property
    def nodes(self) -> int | None:
        """Hosts the ranks ran on; None for records from before the hosts were recorded."""
        return len(set(self.rank_hosts)) if self.rank_hosts else None

    @property
    def busbw_comparable(self) -> bool | None:
        """False where NVLS or CollNet ran (busbw can then exceed the link rate and does not
        compare with a ring's), True for ring, tree and PAT, None where unknown."""
        return busbw_comparable(self.algorithm)

    def algbw(self) -> float | None:
        """Bytes per second (nccl-tests prints GB/s = 1e9 bytes/s)."""
        t = self.time_s
        return None if t is None else algbw(self.config.size_bytes, t)

    def busbw(self) -> float | None:
        a = self.algbw()
        return None if a is None else a * busbw_factor(self.config.op, self.config.ranks)

    def headline(self) -> float | None:
        """Bus bandwidth in GB/s (only for a correct result)."""
        b = self.busbw()
        return None if b is None or not self.ok else b / 1e9
