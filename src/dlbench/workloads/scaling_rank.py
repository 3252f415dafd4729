"""One rank of a ``dlbench scale`` job: the job file's fields to :func:`measure_rank`'s arguments.

:class:`~dlbench.launch.torchrun.TorchrunLauncher` names :func:`run_rank` as the worker of every
scaling job; :mod:`dlbench.launch.rank_entry` calls it on each rank with the process group ready.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from dlbench.launch import progress
from dlbench.records.scaling import ScalingConfig
from dlbench.workloads.fsdp import full_parameters
from dlbench.workloads.scaling import measure_rank


def run_rank(job: dict[str, Any], local_rank: int, control: dist.ProcessGroup | None
             ) -> dict[str, Any]:
    """This rank's raw results; the job's test hooks (an injected failure, a slow host, rank 0's
    final parameters saved to ``params_out``) apply to the ranks they name."""
    cfg = ScalingConfig.from_dict(job["config"])
    rank = dist.get_rank()
    fail = job.get("fail_at_step") if job.get("fail_rank") == rank else None
    lag = (job.get("lag_s") or 0.0) if job.get("lag_rank") == rank else 0.0
    saved: dict[str, dict[str, torch.Tensor]] = {}
    # Every rank gathers (FSDP's shards are put together by a collective); rank 0 saves.
    keep = (lambda m: saved.setdefault("params", full_parameters(m))) \
        if job.get("params_out") else None
    result = measure_rank(cfg, local_rank, control, fail_at_step=fail, on_done=keep,
                          warmup_lag_s=lag, progress=progress.for_rank(job, rank))
    if job.get("params_out") and rank == 0:
        torch.save(saved["params"], job["params_out"])
    return result
