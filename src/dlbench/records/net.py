"""Record kind of ``dlbench net``: training over emulated hosts joined by shaped links.

A :class:`NetRecord` keeps, for one link and one strategy, every rank's raw step times, the bytes
each emulated host's interface sent and received during the measured window (read from the kernel's
counters inside its namespace), rank 0's loss at every step with the wall time at which the step
ended (loss per iteration and per wall-clock time, as the parameter-server study compared), the
compute-only step time each rank measured just before (the figure the what-if model takes as its
input), and a probe of the link itself (round-trip time, TCP goodput). Registered in
:data:`dlbench.records.RECORD_TYPES`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from dlbench.config import ConfigError, choice
from dlbench.measure.stats import Summary, aggregate, mean
from dlbench.records.base import Record
from dlbench.records.throughput import OnThroughputConfig, ThroughputConfig

NET_STRATEGIES = ("ddp", "ps")
#: Hosts one run may emulate: each is a process with its own model on this machine's cores.
MAX_HOSTS = 16


@dataclass(frozen=True)
class NetConfig(OnThroughputConfig):
    """One training measurement over emulated hosts.

    Attributes:
        base: model, batch per host (``-b``), precision, optimizer, seed, as ``dlbench throughput``
            (device cpu: every rank is a CPU process in its own network namespace).
        hosts: emulated hosts, one rank each (``--hosts``).
        strategy: ``ddp`` (ring all-reduce by gloo) or ``ps`` (parameter server) (``--strategy``).
        link: the link as named on the command line (``--link``), e.g. ``10mbit`` or ``unshaped``.
        rate_bps: bits per second each host may send, and receive (tbf on both ends of its veth,
            counted in Ethernet frames as the kernel sees them); None: not shaped.
        delay_s: one-way delay added to every host's outgoing frames (netem); 0: none.
        steps: measured steps (``--steps``), a fixed count so every link and strategy trains the
            same iterations and loss curves line up.
        warmup_steps: untimed steps after the first (``--warmup``).
        bucket_mb: DDP bucket size in MiB.
    """

    base: ThroughputConfig
    hosts: int
    strategy: str
    link: str
    rate_bps: float | None = None
    delay_s: float = 0.0
    steps: int = 30
    warmup_steps: int = 3
    bucket_mb: float = 25.0

    def __post_init__(self) -> None:
        if not 2 <= self.hosts <= MAX_HOSTS:
            raise ConfigError(f"hosts must be 2..{MAX_HOSTS}, got {self.hosts}", "hosts")
        choice("strategy", self.strategy, NET_STRATEGIES)
        if self.rate_bps is not None and not self.rate_bps > 0:
            raise ConfigError(f"rate_bps must be > 0, got {self.rate_bps}", "rate_bps")
        if self.delay_s < 0:
            raise ConfigError(f"delay_s must be >= 0, got {self.delay_s}", "delay_s")
        if not 2 <= self.steps <= 100_000:
            raise ConfigError(f"steps must be 2..100000, got {self.steps}", "steps")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}",
                              "warmup_steps")
        if self.base.device != "cpu" or self.base.mode != "train":
            raise ConfigError("dlbench net trains on the CPU (one gloo rank per emulated host)")
        if self.base.precision not in ("fp32", "bf16"):
            raise ConfigError(f"precision must be fp32 or bf16: dlbench net runs on the CPU; "
                              f"got {self.base.precision!r}", "precision")

    @property
    def label(self) -> str:
        return f"{self.base.label} x{self.hosts} hosts {self.strategy} over {self.link}"


@dataclass(frozen=True, kw_only=True)
class NetRecord(Record):
    """One ``dlbench net`` measurement (or its failure).

    ``rank_tx_bytes[r]`` / ``rank_rx_bytes[r]`` are the bytes host r's interface sent / received
    during the measured window (Ethernet frames: payload plus TCP/IP/Ethernet headers).
    ``losses`` and ``step_end_s`` are rank 0's loss after each measured step and the time since
    the window began at which that step ended. ``rank_compute_times_s[r]`` are rank r's steps of
    the same model without any communication, measured while every rank did the same (so under
    the same sharing of this machine's cores). ``shard_bytes`` is, for ps, the parameter bytes
    each rank owns. ``probe`` holds the link's round-trip time and TCP goodput between hosts 0
    and 1 (``rtt_s``, ``goodput_bps``, ``probe_bytes``).
    """

    config_type: ClassVar[type] = NetConfig
    kind: ClassVar[str] = "net"

    failed_rank: int | None = None
    rank_errors: dict[str, str] = field(default_factory=dict)
    rank_step_times_s: tuple[tuple[float, ...], ...] = ()
    rank_compute_times_s: tuple[tuple[float, ...], ...] = ()
    rank_tx_bytes: tuple[int, ...] = ()
    rank_rx_bytes: tuple[int, ...] = ()
    rank_samples_per_step: tuple[int, ...] = ()
    losses: tuple[float, ...] = ()
    step_end_s: tuple[float, ...] = ()
    param_count: int | None = None
    grad_bytes: int | None = None
    shard_bytes: tuple[int, ...] = ()
    first_step_s: float | None = None
    probe: dict[str, Any] = field(default_factory=dict)
    topology: dict[str, Any] = field(default_factory=dict)   # namespaces, addresses, qdiscs
    unit: str = "samples"

    def summary(self) -> Summary | None:
        """All hosts' samples over the slowest rank's window (as ``dlbench scale``)."""
        if not self.ok or not self.rank_step_times_s:
            return None
        return aggregate(self.rank_step_times_s, self.rank_samples_per_step,
                         self.config.base.stop.confidence)

    def headline(self) -> float | None:
        """Samples per second, all hosts together."""
        s = self.summary()
        return None if s is None else s.throughput

    @property
    def window_s(self) -> float | None:
        """The slowest rank's window: the time the traffic counters' bytes were carried in."""
        if not self.rank_step_times_s:
            return None
        return max(math.fsum(t) for t in self.rank_step_times_s)

    @property
    def step_s(self) -> float | None:
        """Mean step time of the slowest rank."""
        s = self.summary()
        return None if s is None else s.mean_s

    @property
    def compute_s(self) -> float | None:
        """Mean compute-only step time, the slowest rank's (what the what-if model starts from)."""
        if not self.rank_compute_times_s or any(not t for t in self.rank_compute_times_s):
            return None
        return max(mean(t) for t in self.rank_compute_times_s)

    def tx_per_step(self) -> tuple[float, ...]:
        n = len(self.losses) or self.config.steps
        return tuple(b / n for b in self.rank_tx_bytes)

    def rx_per_step(self) -> tuple[float, ...]:
        n = len(self.losses) or self.config.steps
        return tuple(b / n for b in self.rank_rx_bytes)

    def busiest_host(self) -> int | None:
        """The host whose interface carried the most in one direction (the parameter-server study's
        hot server)."""
        if not self.rank_tx_bytes:
            return None
        load = [max(t, r) for t, r in zip(self.rank_tx_bytes, self.rank_rx_bytes)]
        return max(range(len(load)), key=lambda i: load[i])

    def busiest_bps(self) -> tuple[float, float] | None:
        """(sent, received) bits per second of the busiest host over the window."""
        h, w = self.busiest_host(), self.window_s
        if h is None or not w:
            return None
        return self.rank_tx_bytes[h] * 8 / w, self.rank_rx_bytes[h] * 8 / w
