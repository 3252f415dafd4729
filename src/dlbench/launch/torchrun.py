"""Multi-process jobs through torch.distributed's own launcher (torchrun).

The parent (:class:`TorchrunLauncher`) writes a job file, starts
``python -m dlbench.launch.agent ... -m dlbench.launch.rank_entry JOB`` (torch.distributed.run, in a
wrapper that ends it if dlbench is killed) as a subprocess and waits under a time limit. Every
rank (:mod:`dlbench.launch.rank_entry`) initialises the process group with a timeout, runs the job's
worker (the function the launcher's caller handed it, sent by name: :mod:`dlbench.launch.lookup`;
so this package imports no workload), and writes its raw results, or its error and traceback, to
a file in the folder the parent named; after a success the ranks exchange their results so that
every host has the whole job's raw samples. The parent alone turns them into records: one per
config.

Single host: ``--standalone --nproc-per-node N``. Several hosts: one dlbench per host, each
starting a torchrun agent with ``--nnodes N --node-rank R --rdzv-backend c10d
--rdzv-endpoint HOST:PORT`` (Slurm: one task per node, see :func:`slurm_settings`).

Failures: a rank that raises writes its traceback and exits; torchrun then stops the other ranks
(``--max-restarts 0``), and the parent stores the first failure's traceback as the error row.
The process group's timeout ends a collective that waits on a dead peer; the launcher's timeout
ends anything else. Ctrl-C, SIGTERM and SIGHUP stop torchrun, which stops every rank (what lingers
is killed, see :func:`dlbench.launch.signals.stop`); SIGKILL to dlbench ends the agent, and the
agent's end its ranks (:func:`dlbench.launch.signals.exit_with_parent`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from dlbench.launch import forking, progress, signals, tempdirs
from dlbench.launch.interconnect import interconnect_env
from dlbench.launch.lookup import worker_name
from dlbench.measure.nccl_tuning import UNKNOWN
from dlbench.records.base import ErrorType
from dlbench.records.collective import CommConfig, CommRecord
from dlbench.records.scaling import ScalingConfig, ScalingRank, ScalingRecord

# How often torchrun's agent looks at its workers: a failed rank is noticed within this.
MONITOR_INTERVAL_S = 0.2
# After asking torchrun to stop, how long before it and its ranks are killed.
STOP_GRACE_S = 5.0
# How often a waiting launcher passes rank 0's progress on (``on_status``).
STATUS_EVERY_S = 1.0


@dataclass(frozen=True)
class Rendezvous:
    """Where the hosts of a multi-node job meet (torchrun's ``--rdzv-*``, ``--nnodes``)."""

    nnodes: int = 1
    node_rank: int = 0
    endpoint: str | None = None          # HOST:PORT of the c10d store (on one of the hosts)
    run_id: str = "dlbench"

    def args(self, nproc_per_node: int) -> list[str]:
        if self.nnodes == 1 and self.endpoint is None:
            return ["--standalone", "--nproc-per-node", str(nproc_per_node)]
        if not self.endpoint:
            raise ValueError("--rdzv-endpoint HOST:PORT is needed with --nnodes > 1")
        return ["--nnodes", str(self.nnodes), "--node-rank", str(self.node_rank),
                "--nproc-per-node", str(nproc_per_node), "--rdzv-backend", "c10d",
                "--rdzv-endpoint", self.endpoint, "--rdzv-id", self.run_id]


def slurm_settings(environ: Mapping[str, str]) -> dict[str, Any]:
    """What a Slurm step says about the job: nodes, this node's index, the rendezvous.

    Read from ``SLURM_NNODES``, ``SLURM_NODEID``, ``SLURM_JOB_ID`` (the rendezvous id) and
    ``MASTER_ADDR``/``MASTER_PORT`` (set them in the batch script to the first host, e.g.
    ``MASTER_ADDR=$(scontrol show hostnames $SLURM_JOB_NODELIST | head -n1)``). Empty outside Slurm.
    """
    if "SLURM_JOB_ID" not in environ:
        return {}
    out: dict[str, Any] = {"run_id": f"slurm-{environ['SLURM_JOB_ID']}"}
    if environ.get("SLURM_NNODES"):
        out["nnodes"] = int(environ["SLURM_NNODES"])
    if environ.get("SLURM_NODEID"):
        out["node_rank"] = int(environ["SLURM_NODEID"])
    if environ.get("MASTER_ADDR"):
        out["endpoint"] = f"{environ['MASTER_ADDR']}:{environ.get('MASTER_PORT', '29500')}"
    return out


def offload_threads(offload: bool, nproc_per_node: int, environ: Mapping[str, str],
                    cpus: int) -> str | None:
    """``OMP_NUM_THREADS`` for the ranks of an ``--offload`` job: the host's cores shared out.

    torchrun gives each rank one thread, which suits a GPU-bound rank; under FSDP2's CPU offload
    the optimizer step runs on the CPU, and with one thread AdamW over a billion parameters takes
    seconds a step. ``None`` (torchrun's default stands) without offload or where the user set
    ``OMP_NUM_THREADS``.
    """
    if not offload or "OMP_NUM_THREADS" in environ:
        return None
    return str(max(1, cpus // max(1, nproc_per_node)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class JobOutcome:
    """What came back from one torchrun job."""

    returncode: int | None
    results: list[dict[str, Any]] | None          # every rank's results, rank order (success)
    rank_files: dict[int, dict[str, Any]] = field(default_factory=dict)  # this host's ranks
    log_tail: str = ""
    timed_out: bool = False
    launch_env: dict[str, str] = field(default_factory=dict)

    def first_failure(self) -> tuple[int | None, str, str]:
        """(rank, error type, message) of the earliest failure: the cause, not its echoes."""
        failed = [d for d in self.rank_files.values() if not d.get("ok")]
        if failed:
            d = min(failed, key=lambda d: (d.get("time", 0.0), not d.get("injected", False)))
            return d["rank"], d.get("error_type") or ErrorType.EXCEPTION, d.get("error") or ""
        if self.timed_out:
            return None, ErrorType.TIMEOUT, "the job ran past its time limit and was stopped\n" \
                                            + self.log_tail
        return None, ErrorType.CRASHED, (f"torchrun exited with code {self.returncode} and no rank "
                                         f"reported an error; its output ends:\n{self.log_tail}")


class TorchrunLauncher:
    """Start a job of ``nproc`` ranks per host through ``python -m torch.distributed.run``.

    ``timeout_s`` bounds the whole job (start-up included); ``pg_timeout_s`` bounds any one
    collective (the process group's timeout), so a rank waiting on a dead peer gives up.
    ``scaling_worker`` and ``comm_worker`` are the rank functions of the jobs this launcher
    builds itself (:meth:`run`, :meth:`run_comm`), handed over by the caller
    (:func:`dlbench.jobs.launchers.torchrun` wires :mod:`dlbench.workloads.workers`); a launcher
    that only runs :meth:`launch` jobs, which name their own worker, needs neither.
    """

    name = "torchrun"
    survives_fatal = True   # every job is a fresh set of processes

    def __init__(self, timeout_s: float = 900.0, pg_timeout_s: float = 120.0,
                 rendezvous: Rendezvous | None = None, extra_env: Mapping[str, str] | None = None,
                 on_status: Callable[[str], None] | None = None, *,
                 scaling_worker: Callable[..., dict] | None = None,
                 comm_worker: Callable[..., dict] | None = None) -> None:
        self.timeout_s = timeout_s
        # told, about once a second while a job runs, what its rank 0 is doing (a progress
        # display's line: dlbench.launch.progress)
        self.on_status = on_status
        self.pg_timeout_s = pg_timeout_s
        self.rdzv = rendezvous or Rendezvous()
        self.extra_env = dict(extra_env or {})
        self.scaling_worker = scaling_worker
        self.comm_worker = comm_worker
        # checked now, before any job: each must be importable by its name in the ranks
        self._names = {what: worker_name(fn) for what, fn in
                       (("scaling", scaling_worker), ("comm", comm_worker)) if fn is not None}

    # -- the generic job ------------------------------------------------------------------------
    def launch(self, job: dict[str, Any], nproc_per_node: int, interconnect: str = "default",
               rank_env: Mapping[str, str] | None = None) -> JobOutcome:
        """Run ``job`` on ``nproc_per_node`` ranks per host. The job names its worker
        (``job["worker"]``: :func:`dlbench.launch.lookup.worker_name` of the rank function) and
        its process group's ``backend``; every rank calls ``worker(job, local_rank, control)``
        (see :mod:`dlbench.launch.rank_entry`)."""
        launch_env = {**self.extra_env, **(rank_env or {}), **interconnect_env(interconnect)}
        with tempfile.TemporaryDirectory(prefix="dlbench-dist-", dir=tempdirs.root()) as tmp:
            out_dir = Path(tmp)
            job = {**job, "out_dir": str(out_dir), "pg_timeout_s": self.pg_timeout_s}
            job_path = out_dir / "job.json"
            job_path.write_text(json.dumps(job))
            # torchrun's agent through dlbench.launch.agent: it ends if dlbench is killed.
            # (-m MODULE; in the test suite, forked by its fork server: launch.forking)
            cmd = [sys.executable, *forking.python_args("-m", "dlbench.launch.agent"),
                   *self.rdzv.args(nproc_per_node),
                   "--max-restarts", "0", "--monitor-interval", str(MONITOR_INTERVAL_S),
                   *forking.python_args("-m", "dlbench.launch.rank_entry"), str(job_path)]
            env = signals.child_env({**os.environ, **launch_env})
            env.setdefault("OMP_NUM_THREADS", "1")  # torchrun's own default, said explicitly
            log_path = out_dir / "torchrun.log"
            timed_out = False
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True)
                try:
                    self._wait(proc, out_dir)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _stop(proc)
                except BaseException:  # Ctrl-C, SIGTERM, SIGHUP: no rank outlives dlbench
                    _stop(proc)  # torchrun passes the stop on to every rank
                    raise
            rank_files = {}
            for p in out_dir.glob("rank*.json"):
                d = json.loads(p.read_text())
                rank_files[d["rank"]] = d
            all_path = out_dir / "all.json"
            results = json.loads(all_path.read_text()) if all_path.exists() else None
            tail = log_path.read_text(errors="replace")[-3000:]
        return JobOutcome(proc.returncode, results, rank_files, tail, timed_out, launch_env)

    def _wait(self, proc: subprocess.Popen, out_dir: Path) -> None:
        """Wait for the job (``TimeoutExpired`` past ``timeout_s``), passing rank 0's progress
        to ``on_status`` about once a second."""
        if self.on_status is None:
            proc.wait(timeout=self.timeout_s)
            return
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                proc.wait(timeout=max(0.0, min(STATUS_EVERY_S, deadline - time.monotonic())))
                return
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    raise
            self.on_status(progress.describe(progress.read_progress(out_dir), time.time()))

    def _worker(self, what: str) -> str:
        """The name of the rank function of this launcher's ``what`` jobs."""
        try:
            return self._names[what]
        except KeyError:
            raise ValueError(f"this launcher was built without a {what} worker: pass "
                             f"{what}_worker= (dlbench.jobs.launchers.torchrun wires both)"
                             ) from None

    # -- scaling ----------------------------------------------------------------------------------
    def run(self, cfg: ScalingConfig, env: dict, fail_rank: int | None = None,
            fail_at_step: int | None = None, params_out: str | None = None,
            lag_rank: int | None = None, lag_s: float = 0.0) -> ScalingRecord:
        """Measure one scaling config; a failure of any kind comes back as an error record.

        ``fail_rank``/``fail_at_step`` inject a failure on one rank, ``lag_rank``/``lag_s`` a
        slow host (it sleeps after each warm-up step), ``params_out`` saves rank 0's final
        parameters (all for tests).
        """
        backend = resolve_backend(cfg.backend, cfg.base.device)
        nproc = cfg.processes // cfg.nnodes
        threads = offload_threads(cfg.offload, nproc, os.environ, os.cpu_count() or 1)
        job = {"worker": self._worker("scaling"), "backend": backend, "config": cfg.to_dict(),
               "fail_rank": fail_rank, "fail_at_step": fail_at_step, "params_out": params_out,
               "lag_rank": lag_rank, "lag_s": lag_s}
        out = self.launch(job, nproc, cfg.interconnect,
                          {"OMP_NUM_THREADS": threads} if threads is not None else None)
        if out.results is not None and out.returncode == 0:
            ranks = [ScalingRank.from_dict(d) for d in out.results]
            return ScalingRecord.from_ranks(cfg, env, ranks, out.launch_env, backend)
        rank, kind, msg = out.first_failure()
        errors = {str(r): d.get("error") or "" for r, d in out.rank_files.items() if not d.get("ok")}
        where = f"rank {rank}: " if rank is not None else ""
        return ScalingRecord(config=cfg, env=env, status="error", error_type=kind,
                             error=where + msg, failed_rank=rank, rank_errors=errors,
                             launch_env=out.launch_env, backend=backend)


    # -- collectives ------------------------------------------------------------------------------
    def run_comm(self, ops: list[str], sizes: list[int], ranks_per_node: int, env: dict,
                 backend: str = "auto", dtype: str = "float32", iters: int = 20, warmup: int = 5,
                 interconnect: str = "default", corrupt_rank: int | None = None,
                 timing: str = "eager", iters_per_sample: int = 1, probe: bool = False,
                 api: str = "torch", buffers: str = "torch", rotate: bool = True
                 ) -> list[CommRecord]:
        """Every op x size x placement in one job; one record each (a whole-job failure gives one
        error record per op). ``corrupt_rank`` spoils one input element there (for tests).

        ``probe`` (NCCL only): first a short job of one sample per size with NCCL's tuning log
        on (:func:`nccl_probe_env`), whose rank 0 reads which algorithm and protocol NCCL chose
        for each size; the timed job then runs without the log, which NCCL writes on every call
        and would slow the very launches being timed."""
        backend = resolve_backend(backend, "auto")
        ranks = ranks_per_node * self.rdzv.nnodes
        job = {"worker": self._worker("comm"), "backend": backend, "ops": ops, "sizes": sizes,
               "dtype": dtype, "iters": iters, "warmup": warmup, "corrupt_rank": corrupt_rank,
               "timing": timing, "iters_per_sample": iters_per_sample, "api": api,
               "buffers": buffers, "rotate": rotate}
        if backend != "nccl":
            chosen: dict[tuple, dict] = {}
            why = f"{backend}: no NCCL"
        elif probe:
            chosen, why = self._probe_comm(job, ranks_per_node, interconnect)
        else:
            chosen, why = {}, "not read (the algorithm probe was off)"
        out = self.launch(job, ranks_per_node, interconnect)

        def cfg(op: str, size: int, inplace: bool) -> CommConfig:
            return CommConfig(op=op, size_bytes=size, ranks=ranks, backend=backend, dtype=dtype,
                              inplace=inplace, interconnect=interconnect, iters=iters,
                              warmup=warmup, timing=timing, iters_per_sample=iters_per_sample,
                              api=api, buffers=buffers, rotate=rotate)
        if out.results is None or out.returncode != 0:
            rank, kind, msg = out.first_failure()
            where = f"rank {rank}: " if rank is not None else ""
            return [CommRecord(config=cfg(op, sizes[0], False), env=env, status="error",
                               error_type=kind, error=where + msg, launch_env=out.launch_env)
                    for op in ops]
        results = sorted(out.results, key=lambda d: d["rank"])
        per_rank = [d["rows"] for d in results]
        common = dict(launch_env=out.launch_env,
                      rank_hosts=tuple(str(d.get("host", "")) for d in results),
                      nccl_version=results[0].get("nccl_version"),
                      nccl_env=dict(results[0].get("nccl_env") or {}))
        records = []
        for i, row in enumerate(per_rank[0]):
            rows = [rs[i] for rs in per_rank]
            c = cfg(row["op"], row["size_bytes"], row["inplace"])
            if row.get("skipped"):
                continue
            nccl = chosen.get((row["op"], row["size_bytes"], row["inplace"])) or {}
            what = dict(algorithm=nccl.get("algorithm") or UNKNOWN,
                        protocol=nccl.get("protocol") or UNKNOWN,
                        algorithm_note=nccl.get("note") if nccl else why)
            records.append(CommRecord.from_ranks(c, env, rows, **common, **what))
        return records

    def _probe_comm(self, job: dict[str, Any], ranks_per_node: int, interconnect: str
                    ) -> tuple[dict[tuple, dict], str]:
        """(op, size, inplace) -> what NCCL chose (rank 0's reading of its tuning log), and why
        a size has nothing (the probe failed, or NCCL wrote no line for it)."""
        with tempfile.TemporaryDirectory(prefix="dlbench-nccl-", dir=tempdirs.root()) as logs:
            probe = TorchrunLauncher(self.timeout_s, self.pg_timeout_s, self.rdzv,
                                     {**self.extra_env, **nccl_probe_env(logs)},
                                     scaling_worker=self.scaling_worker,
                                     comm_worker=self.comm_worker)
            out = probe.launch({**job, "iters": 1, "warmup": 0, "corrupt_rank": None,
                                "nccl_log_dir": logs}, ranks_per_node, interconnect)
        if out.results is None or out.returncode != 0:
            rank, _, msg = out.first_failure()
            where = f"rank {rank}: " if rank is not None else ""
            last = (msg.strip().splitlines() or [""])[-1][:200]  # a traceback ends in its error
            return {}, f"the algorithm probe failed ({where}{last})"
        rank0 = min(out.results, key=lambda d: d["rank"])
        return ({(r["op"], r["size_bytes"], r["inplace"]): r["nccl"] for r in rank0["rows"]
                 if r.get("nccl")}, "the algorithm probe had no row for this size")


def nccl_probe_env(folder: str) -> dict[str, str]:
    """NCCL's tuning log into ``folder``, one file per process (``%h`` host, ``%p`` pid): what
    the algorithm probe runs with. NCCL reads these once, at its first call."""
    return {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING",
            "NCCL_DEBUG_FILE": str(Path(folder) / "nccl.%h.%p.log")}


def resolve_backend(backend: str, device: str) -> str:
    """The process group's backend: ``auto`` is NCCL where CUDA GPUs run the job, else gloo."""
    if backend != "auto":
        return backend
    return "nccl" if device != "cpu" and torch.cuda.is_available() else "gloo"


def _stop(proc: subprocess.Popen) -> None:
    """Ask torchrun to stop (it stops its ranks), then kill it and any rank that lingers."""
    signals.stop([proc], grace_s=STOP_GRACE_S)
