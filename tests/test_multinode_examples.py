"""The multi-node examples as written: examples/torchrun/two_nodes.sh run twice on one host (two
"nodes" of gloo ranks on the CPU, meeting at a local rendezvous), then ``results merge`` of the
two hosts' stores keeps the job once. The Slurm script is checked for what makes it work: the
per-node store name expanded by each task, not once by the batch shell."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.cli import run as run_cli
from dlbench.launch import forking
from dlbench.store import Store

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "torchrun" / "two_nodes.sh"
SBATCH = ROOT / "examples" / "slurm" / "scale.sbatch"


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_node_example_runs_on_one_host_and_merges_to_one_job(tmp_path):
    # each host's dlbench a process of its own (forked by the test session's fork server where
    # it runs one: tests/conftest.py)
    dlbench = shlex.join([sys.executable, *forking.python_args("-m", "dlbench")])
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1",
               MASTER=f"127.0.0.1:{_free_port()}", JOB="two-nodes-test", MODEL="tiny_cnn",
               GPUS_PER_NODE="1", BATCH="4", DB_PREFIX=str(tmp_path / "node"), DLBENCH=dlbench,
               EXTRA="--device cpu --warmup 1 --warmup-time 0 --min-steps 5 --min-time 0.05 "
                     "--max-time 0.5 --target-ci 0.05 -q")
    procs = [subprocess.Popen(["bash", str(EXAMPLE)], env=dict(env, NODE_RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    stores = [tmp_path / "node-0.db", tmp_path / "node-1.db"]
    recs = []
    for db in stores:
        with Store(db) as s:
            recs += s.results(kind="scaling")
    assert len(recs) == 2 and recs[0].id != recs[1].id  # each host stored the job
    assert recs[0].rank_step_times_s == recs[1].rank_step_times_s
    assert recs[0].config.nnodes == 2 and recs[0].config.gpus == 2

    merged = tmp_path / "job.db"
    p = run_cli("results", "merge", "--db", str(merged), *map(str, stores), env=env)
    assert p.returncode == 0, p.stderr
    lines = p.stderr.splitlines()
    assert len(lines) == 2 and "left out" not in lines[0], p.stderr
    assert "1 result(s) left out: the same multi-node job" in lines[1], p.stderr
    with Store(merged) as s:
        assert len(s.results(kind="scaling")) == 1
        assert len(s.runs()) == 2  # each host's run (its command and environment) is kept


def test_merge_keeps_different_jobs_of_one_config(tmp_path):
    """Two measurements of one config are two results, whatever the merge: only float-identical
    raw samples of every rank are one job."""
    import dataclasses

    from dlbench.records.base import new_id
    old = ROOT / "tests" / "data" / "store-before-records.db"
    with Store(old) as s:
        rec = next(r for r in s.results(kind="scaling") if r.ok)
    # as if it had run on two ranks (a one-rank record is never taken for another)
    rec = dataclasses.replace(rec, rank_step_times_s=rec.rank_step_times_s * 2,
                              rank_samples_per_step=rec.rank_samples_per_step * 2)
    other = dataclasses.replace(rec, id=new_id(), rank_step_times_s=tuple(
        tuple(t * 1.01 for t in ts) for ts in rec.rank_step_times_s))
    same_job = dataclasses.replace(rec, id=new_id())
    with Store(tmp_path / "b.db") as b:
        b.add(other)
        b.add(same_job)
    with Store(tmp_path / "a.db") as a:
        a.add(rec)
        assert a.merge_from(tmp_path / "b.db") == (0, 1) and a.skipped_duplicates == 1
        assert {r.id for r in a.results()} == {rec.id, other.id}


def test_slurm_example_names_each_nodes_store_per_task():
    text = SBATCH.read_text()
    assert subprocess.run(["bash", "-n", str(SBATCH)]).returncode == 0
    srun = re.search(r"srun [^\n]*bash -c \\\n\s*'([^']*)'", text)
    assert srun, "the per-node command runs in its own shell, in single quotes"
    assert "$SLURM_NODEID" in srun.group(1) and "--slurm" in srun.group(1)
    for var in ("MODEL", "GPUS_PER_NODE", "OUT", "DLBENCH", "MASTER_ADDR", "MASTER_PORT"):
        assert re.search(rf"^export {var}=", text, re.M), var  # seen by the task's shell
    assert "results merge" in text
