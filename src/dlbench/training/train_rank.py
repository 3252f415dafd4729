"""One rank of a multi-GPU ``dlbench train`` job: :mod:`dlbench.launch.rank_entry` calls
:func:`run_rank`, which :class:`~dlbench.training.runner.TorchrunRunner` names as the job's worker.

The process group is initialised; the rank reads the dataset, then trains each run (seed) of the
job in turn under DDP. After each run every rank writes its result to ``results_dir`` (atomic
rename), so the parent keeps the runs finished before a failure or an interruption.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch.distributed as dist

from dlbench.data import load_dataset
from dlbench.launch.rank_entry import write_json
from dlbench.records.train import TrainConfig
from dlbench.training.loop import device_for, train_run


def run_rank(job: dict[str, Any], local_rank: int, control) -> dict[str, Any]:
    """Train every run (seed) of the job in turn; each result goes to ``results_dir`` the
    moment its run ends (rank order is the file name's)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    configs = [TrainConfig.from_dict(d) for d in job["configs"]]
    first = configs[0]
    device = device_for(first, local_rank)
    data = load_dataset(first.dataset, first.data_dir, first.image_size)
    out_dir = Path(job["results_dir"])
    for i, cfg in enumerate(configs):
        res = train_run(cfg, data, device, rank, world, mllog=job["mllog"],
                        measure_side=job["measure_side"] and i == 0)
        res["data_source"] = data.source
        write_json(out_dir / f"run{i}.rank{rank}.json", res)
    return {"runs": len(configs), "device": str(device)}
