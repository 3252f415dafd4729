"""Launchers wired with the workers they run: the one way to build a launcher.

A launcher (:mod:`dlbench.launch`) knows processes only; the functions it runs are handed to it
(:mod:`dlbench.workloads.workers`). Each builder here imports those references where it builds
the launcher, not at the top of this module: they import every workload (torch, the models'
registry), which a light command that only imports this module must not pay for. The linter
sees the import all the same.
"""

from __future__ import annotations

from typing import Callable, Mapping

from dlbench.launch.inline import InlineLauncher
from dlbench.launch.subprocess_launcher import SubprocessLauncher
from dlbench.launch.torchrun import Rendezvous, TorchrunLauncher


def inline(count_flops: bool = True) -> InlineLauncher:
    """Each benchmark in this process (a throughput or a generation config)."""
    from dlbench.workloads import workers
    return InlineLauncher(workers.BY_KIND, count_flops=count_flops)


def isolated(timeout_s: float | None = 1800.0, count_flops: bool = True) -> SubprocessLauncher:
    """Each benchmark in a fresh process (``--isolate``, ``--repeat``)."""
    from dlbench.workloads import workers
    return SubprocessLauncher(workers.BY_KIND, timeout_s=timeout_s, count_flops=count_flops)


def torchrun(timeout_s: float = 900.0, pg_timeout_s: float = 120.0,
             rendezvous: Rendezvous | None = None, extra_env: Mapping[str, str] | None = None,
             on_status: Callable[[str], None] | None = None) -> TorchrunLauncher:
    """Each scaling config, or each set of collectives, a fresh torchrun job."""
    from dlbench.workloads import workers
    return TorchrunLauncher(timeout_s=timeout_s, pg_timeout_s=pg_timeout_s,
                            rendezvous=rendezvous, extra_env=extra_env, on_status=on_status,
                            scaling_worker=workers.SCALING_RANK, comm_worker=workers.COMM_RANK)
