"""One rank of a multi-GPU ``dlbench train`` job, started by ``dlbench.launch.torchrun``.

The process group is initialised; the rank reads the dataset, then trains each run (seed) of the
job in turn under DDP. After each run every rank writes its result to ``results_dir`` (atomic
rename), so the parent keeps the runs finished before a failure or an interruption.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch.distributed as dist

from dlbench.records.train import TrainConfig


def _write(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)  # the parent never reads half a file


def run_rank(job: dict[str, Any], local_rank: int, control) -> dict[str, Any]:
    from dlbench.data import load_dataset
    from dlbench.training.loop import train_run
    from dlbench.training.runner import device_for

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
        _write(out_dir / f"run{i}.rank{rank}.json", res)
    return {"runs": len(configs), "device": str(device)}
