"""One rank of a torchrun job: ``python -m dlbench.launch.rank_entry JOB``.

:class:`~dlbench.launch.torchrun.TorchrunLauncher` starts this module on every rank. It reads the
job file, initialises the process group with the job's timeout, and calls the job's worker (the
function the launcher was handed, sent here by name: ``job["worker"]``, as
``package.module:function``; see :mod:`dlbench.launch.lookup`) as
``worker(job, local_rank, control) -> dict`` of raw results. ``control`` is a gloo group of all
ranks for host-side messages (None in a one-process job). The rank writes its results, or its
error and traceback, to a file in the folder the parent named; after a success the ranks exchange
their results so that every host has the whole job's raw samples.

The helpers that write a rank's files and end an orphaned rank are shared with the other
processes that run a rank (:mod:`dlbench.netemu.host_rank`).
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist

from dlbench.launch.failures import classify, describe, is_model_exit, model_exited
from dlbench.launch.lookup import find_worker
from dlbench.launch.signals import exit_with_parent
from dlbench.records.base import ErrorType


def write_json(path: Path, doc: Any) -> None:
    """Write ``doc`` as JSON so that a reader never sees half a file (write, then rename)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)


def fail(out_dir: Path, rank: int, exc: BaseException) -> NoReturn:
    """Write the rank's failure (``rank<R>.json``) for the parent, and end the process at once.
    A model's ``sys.exit`` (or a BaseException of its own) is said as such; a Ctrl-C or a
    signal is the rank's crash."""
    if is_model_exit(exc):
        exc = model_exited(exc)
    write_json(out_dir / f"rank{rank}.json",
               {"rank": rank, "ok": False, "time": time.time(),
                "injected": "failure injected" in str(exc), "host": socket.gethostname(),
                "error_type": classify(exc) if isinstance(exc, Exception) else ErrorType.CRASHED,
                "error": describe(exc) if isinstance(exc, Exception) else repr(exc)})
    sys.stdout.flush()
    sys.stderr.flush()
    # Not destroy_process_group(): with a peer gone it may wait for the timeout. Exit now.
    os._exit(1)


def main(job_path: str) -> NoReturn:
    job = json.loads(Path(job_path).read_text())
    out_dir = Path(job["out_dir"])
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    exit_with_parent()
    try:
        worker = find_worker(job["worker"])
        timeout = datetime.timedelta(seconds=float(job["pg_timeout_s"]))
        backend = job["backend"]
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend, timeout=timeout)
        world = dist.get_world_size()
        # The control group carries host-side messages (stop decisions, results): gloo, so they
        # never queue behind GPU work on an NCCL stream.
        control = None if world == 1 else (dist.group.WORLD if backend == "gloo"
                                           else dist.new_group(backend="gloo", timeout=timeout))
        result = worker(job, local_rank, control)
        result.update(rank=rank, ok=True, time=time.time())
        write_json(out_dir / f"rank{rank}.json", result)
        everything: list[Any] = [None] * world
        if control is None:
            everything = [result]
        else:
            dist.all_gather_object(everything, result, group=control)
        if local_rank == 0:  # one copy per host: each host's dlbench stores the whole job
            write_json(out_dir / "all.json", everything)
        dist.destroy_process_group()
    except BaseException as exc:  # the rank's failure is data for the parent
        fail(out_dir, rank, exc)
    # Every result is on disk: skip the interpreter's teardown, where native thread pools are
    # torn down and an abort would turn a finished job into a failed one.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1])
