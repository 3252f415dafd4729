"""The process of one emulated host:
``ip netns exec NS python -m dlbench.netemu.host_rank JOB RANK``.

It joins the gloo process group at host 0's namespace address (``MASTER_ADDR``), with gloo bound
to its namespace's interface (``GLOO_SOCKET_IFNAME``), measures its part of every window
(:func:`dlbench.workloads.net.measure_host`) and writes its raw results, or its error and
traceback, to ``rank<R>.json`` in the job's folder for the parent to collect. It ends itself if
the parent dies (a killed ``dlbench net`` must not leave ranks training in namespaces).

Between windows the parent reshapes the link. The handshake is two files in the job's folder:
each rank, idle after a barrier, writes ``wait<K>.<R>``; the parent, once it sees every rank's,
shapes the link and writes ``go<K>``; the ranks poll for it (every :data:`POLL_S`, for at most
the process-group timeout).
"""

from __future__ import annotations

import datetime
import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from dlbench.launch.rank_entry import fail, write_json
from dlbench.launch.signals import exit_with_parent
from dlbench.records.net import NetConfig
from dlbench.workloads.net import measure_host

POLL_S = 0.01


def wait_for_parent(out_dir: Path, k: int, rank: int, timeout_s: float) -> None:
    """Say this rank is idle before window ``k``, and wait for the parent's go."""
    (out_dir / f"wait{k}.{rank}").touch()
    go = out_dir / f"go{k}"
    deadline = time.monotonic() + timeout_s
    while not go.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the parent did not shape the link for window {k} within "
                               f"{timeout_s:.0f} s")
        time.sleep(POLL_S)


def main(job_path: str, rank: int) -> int:
    job = json.loads(Path(job_path).read_text())
    out_dir = Path(job["out_dir"])
    exit_with_parent()
    try:
        # One intra-op thread per host: the hosts share this machine's cores, and OpenMP's
        # spinning threads would make them fight for them.
        torch.set_num_threads(int(job.get("threads", 1)))
        windows = [NetConfig.from_dict(d) for d in job["windows"]]
        timeout = float(job["pg_timeout_s"])
        dist.init_process_group("gloo", rank=rank, world_size=windows[0].hosts,
                                timeout=datetime.timedelta(seconds=timeout))
        result = measure_host(
            windows, job["devs"][rank], compute_steps=int(job["compute_steps"]),
            between=lambda k: wait_for_parent(out_dir, k, rank, timeout),
            on_window=lambda k, d: write_json(out_dir / f"rank{rank}.w{k}.json", d))
        result.update(rank=rank, ok=True, time=time.time())
        write_json(out_dir / f"rank{rank}.json", result)
        dist.destroy_process_group()
        return 0
    except BaseException as exc:  # the rank's failure is data for the parent
        fail(out_dir, rank, exc)  # writes rank<R>.json and ends the process at once


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
