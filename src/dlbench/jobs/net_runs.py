"""What ``dlbench net`` runs: data-parallel training across emulated hosts over shaped links.

The plan is one list of windows per link (one per strategy); the run makes the hosts, shapes
each link (one the kernel cannot make becomes rows with its error, and the run goes on), trains
across them and stores every record as it comes. Nothing here prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from dlbench.config import ConfigError
from dlbench.jobs.stored_run import StoredRun
from dlbench.netemu.launch import NetLauncher
from dlbench.netemu.shaping import parse_link
from dlbench.netemu.topology import NetEmuError, NetEmuUnavailable, Topology
from dlbench.records.base import ErrorType
from dlbench.records.net import NetConfig, NetRecord
from dlbench.records.throughput import ThroughputConfig
from dlbench.reference.networks import find_network
from dlbench.store import Store

DEFAULT_LINKS = ("unshaped", "100mbit", "10mbit")
DEFAULT_STRATEGIES = ("ddp", "ps")


def net_plan(model: str, *, hosts: int = 2, links: Sequence[str] = (),
             strategies: Sequence[str] = (), batch: int | None = None, precision: str = "fp32",
             optimizer: str = "sgd", input_size: int | None = None, seed: int = 0,
             steps: int = 30, warmup: int = 3, compute_steps: int = 5,
             bucket_mb: float = 25.0) -> list[tuple]:
    """[(link, [NetConfig per strategy])] for each link (default: unshaped, 100mbit, 10mbit)
    and strategy (default: ddp, ps); the batch per host defaults to a CPU-sized one."""
    from dlbench.models import get_model  # imports torch: only once a run is asked for

    if compute_steps < 1:
        raise ConfigError(f"compute_steps must be >= 1, got {compute_steps}", "compute_steps")
    spec = get_model(model)
    parsed = [parse_link(t, find_network) for t in (links or DEFAULT_LINKS)]
    batch = batch or max(1, min(16, spec.default_batch // 4))
    base = ThroughputConfig(model=spec.name, batch_size=batch, precision=precision,
                            optimizer=optimizer, input_size=input_size, device="cpu",
                            seed=seed, telemetry_interval_s=None)
    return [(link, [NetConfig(base=base, hosts=hosts, strategy=s, link=link.name,
                              rate_bps=link.rate_bps, delay_s=link.delay_s, steps=steps,
                              warmup_steps=warmup, bucket_mb=bucket_mb)
                    for s in (strategies or DEFAULT_STRATEGIES)]) for link in parsed]


@dataclass
class NetOutcome:
    """The stored run, and what could not be removed afterwards (``dlbench net --cleanup``)."""
    run: StoredRun
    cleanup_errors: list[str] = field(default_factory=list)


#: The device column of a net run: every host is a namespace of this machine's CPU.
NET_DEVICE = "emulated network (CPU)"


def run_net(plan: list[tuple], hosts: int, db: str, command: str, env: dict, *,
            timeout_s: float = 600.0, pg_timeout_s: float = 120.0, compute_steps: int = 5,
            tag: str | None = None, on_record: Callable[[NetRecord], None] | None = None,
            ) -> NetOutcome:
    """Make ``hosts`` emulated hosts, shape each link of ``plan`` and train across it; Ctrl-C
    ends the run as interrupted, keeps what was measured and removes the hosts.

    Raises :class:`dlbench.netemu.topology.NetEmuUnavailable` where this machine cannot make
    them at all (no privileges, no ``ip``).
    """
    launcher = NetLauncher(timeout_s=timeout_s, pg_timeout_s=pg_timeout_s,
                           compute_steps=compute_steps)
    topo = Topology(hosts)
    with Store(db) as store:
        run = StoredRun(store, command, env, device=NET_DEVICE, tag=tag, on_record=on_record)
        try:
            with run, topo:
                windows, links = [], {}
                for link, configs in plan:
                    try:
                        topo.shape(link)   # can this kernel make it? (netem for a delay)
                    except NetEmuUnavailable:
                        raise
                    except NetEmuError as exc:  # this link cannot be made: rows, and go on
                        for cfg in configs:
                            run.add(NetRecord(config=cfg, env=env, status="error",
                                              error_type=ErrorType.UNSUPPORTED, error=str(exc),
                                              topology=topo.describe()))
                        continue
                    links[link.name] = link
                    windows += configs
                if windows:
                    launcher.run(windows, links, topo, env, on_record=run.add)
        except KeyboardInterrupt:
            pass  # the run is closed as interrupted and the hosts removed; records are kept
    return NetOutcome(run, list(topo.cleanup_errors))
