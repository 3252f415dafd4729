"""``dlbench scale --repeat N``: each config as N fresh torchrun jobs, one repeat group that the
tables show by its mean and ``dlbench compare`` tests across processes (Welch's t); a failed
job is a row of its group, Ctrl-C keeps the finished jobs and --resume completes the group.
The real path is a 2-rank gloo job on the CPU; the sweep's bookkeeping and the tables are
checked on records with known step times."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from conftest import FAST_STOP
from fakes.cli import FAST
from fakes.cli import run as run_cli

from dlbench.config import ConfigError
from dlbench.jobs import launchers, plans
from dlbench.jobs import runs as jobruns
from dlbench.launch.torchrun import Rendezvous
from dlbench.records import record_from_dict
from dlbench.records.base import ErrorType
from dlbench.records.scaling import ScalingConfig, ScalingRecord
from dlbench.records.throughput import ThroughputConfig
from dlbench.report import compare as cmp
from dlbench.report.strategy_tables import strategy_table
from dlbench.report.table import fmt_num
from dlbench.report.tables import scaling_table
from dlbench.store import Store
from dlbench.suites import DeviceFacts
from dlbench.env import env_key

CPU = {"accelerator": "cpu", "cpu_model": "Test CPU", "cpu_logical_cores": 2,
       "packages": {"torch": "2.9.0"}, "hostname": "bench-host"}


def dlbench(*args):
    return run_cli(*args, timeout=300)


# -- the real path: 2 gloo ranks, 2 fresh jobs --------------------------------------------------
@pytest.mark.slow
def test_scale_repeat_makes_one_group_of_fresh_jobs_that_compare_tests_across_processes(tmp_path):
    db = str(tmp_path / "s.db")
    p = dlbench("scale", "-m", "tiny_cnn", "-b", "4", "--gpus", "2", "--device", "cpu",
                "--repeat", "2", "--tag", "a", "--db", db, "--json", *FAST)
    assert p.returncode == 0, p.stderr[-3000:]
    recs = [record_from_dict(d) for d in json.loads(p.stdout)]
    assert [(r.kind, r.ok, r.repeat_index, r.repeat_count) for r in recs] == [
        ("scaling", True, 0, 2), ("scaling", True, 1, 2)]
    assert recs[0].repeat_group == recs[1].repeat_group is not None
    assert recs[0].id != recs[1].id and recs[0].run_id == recs[1].run_id
    for r in recs:  # each a whole 2-rank job of its own
        assert r.config.gpus == 2 and len(r.rank_step_times_s) == 2
        assert all(len(t) >= 5 for t in r.rank_step_times_s)
    assert "each as 2 fresh jobs" in p.stderr
    assert "(process 1 of 2)" in p.stderr and "(process 2 of 2)" in p.stderr
    # The stored group, and an identical copy of it as B: compare pairs the groups and tests
    # them across the two jobs of each side (Welch's t), not on one window's steps.
    with Store(db) as store:
        stored = store.results(kind="scaling")
    assert {r.id for r in stored} == {r.id for r in recs}
    _fill(db, "bbbb0000", [dataclasses.replace(r, id=f"copy{i}").in_group("copy", i, 2)
                           for i, r in enumerate(stored)], "b", stored[0].env)
    c = dlbench("compare", "tag:a", "tag:b", "--db", db, "--json")
    assert c.returncode == 0, c.stdout + c.stderr
    [pair] = json.loads(c.stdout)["pairs"]
    assert pair["kind"] == "scaling" and pair["basis"] == cmp.ACROSS_PROCESSES
    assert pair["processes"] == [2, 2] and pair["ratio"] == pytest.approx(1.0)
    # The table shows the group as one row: the jobs' mean and their count.
    shown = dlbench("results", "show", "--db", db, "latest")
    assert shown.returncode == 0, shown.stderr
    mean = statistics.mean(r.summary().throughput for r in recs)
    assert fmt_num(mean) in shown.stdout and "(2)" in shown.stdout


# -- compare gates scaling groups ----------------------------------------------------------------
def _lm(step_s: float, gpus: int = 2, strategy: str = "fsdp", n: int = 50, rel: float = 0.01,
        **kw) -> ScalingRecord:
    """tiny_llama, 2 sequences of 32 tokens per rank, every rank's window alternately ``rel``
    above and below ``step_s``: its figure is exactly 2 * gpus / step_s sequences/s."""
    base = ThroughputConfig(model="tiny_llama", batch_size=2, device="cpu", optimizer="adamw",
                            stop=FAST_STOP)
    times = tuple(step_s * (1 + rel * (-1) ** i) for i in range(n))
    return ScalingRecord(config=ScalingConfig(base=base, gpus=gpus, strategy=strategy), env=CPU,
                         rank_step_times_s=(times,) * gpus, rank_samples_per_step=(2,) * gpus,
                         unit="tokens", units_per_sample=32, **kw)


def _group(steps: tuple[float, ...], gid: str, **kw) -> list[ScalingRecord]:
    return [_lm(s, **kw).in_group(gid, i, len(steps)) for i, s in enumerate(steps)]


def _fill(db, run_id: str, recs, tag: str, env: dict = CPU) -> None:
    with Store(db) as s:
        s.start_run(run_id, "dlbench scale -m tiny_llama", env, env_key(env), "CPU", tag=tag)
        for r in recs:
            s.add(dataclasses.replace(r, run_id=run_id), env_key(env))
        s.finish_run(run_id, "done")


def test_compare_gates_two_scaling_groups_across_processes(tmp_path):
    db = tmp_path / "c.db"
    _fill(db, "aaaa1111", _group((0.100, 0.101, 0.099), "ga"), "before")
    _fill(db, "bbbb2222", _group((0.125, 0.126, 0.124), "gb"), "after")   # 20% slower
    _fill(db, "cccc3333", _group((0.1005, 0.0995, 0.100), "gc"), "same")
    p = dlbench("compare", "tag:before", "tag:after", "--db", str(db))
    assert p.returncode == 5, p.stdout + p.stderr
    assert "across processes (3 | 3)" in p.stdout and "REGRESSION" in p.stdout
    p = dlbench("compare", "tag:before", "tag:same", "--db", str(db))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "across processes (3 | 3)" in p.stdout
    # scale takes --repeat now: an inconclusive pair's advice names it for scaling too
    assert "scaling" in cmp.REPEATABLE


# -- the tables: one row per group, its mean and spread -------------------------------------------
def test_the_strategy_and_scaling_tables_show_a_group_by_its_mean_and_spread():
    one = _lm(0.2, gpus=1)                                  # 10 seq/s at 1 GPU
    grp = _group((0.1, 0.2), "g")                          # 40 and 20 seq/s: mean 30
    t = strategy_table([one, *grp])
    assert t.columns[-1] == "±95% jobs"
    assert len(t.rows) == 2                                # the group is one row
    row = dict(zip(t.columns, t.rows[1]))
    assert row["tok/s"] == fmt_num(30 * 32) and row["tok/s/GPU"] == fmt_num(15 * 32)
    assert row["x 1 GPU; flags"].startswith("3.00")        # 30 / 10, the group's mean
    assert row["±95% jobs"].endswith("(2)")
    assert dict(zip(t.columns, t.rows[0]))["±95% jobs"] == "1 process"
    assert any("--repeat group" in n for n in t.notes)
    # a table of records measured once has no such column (published tables as before)
    assert "±95% jobs" not in strategy_table([one, _lm(0.1)]).columns
    cells = dict(zip(scaling_table([one, *grp]).columns, scaling_table([one, *grp]).rows[0]))
    assert cells["2 GPUs"].startswith(f"{fmt_num(30)} (3.00) ±")
    assert cells["2 GPUs"].endswith("(2)") and cells["1 GPU"] == fmt_num(10)


def test_a_group_whose_jobs_partly_failed_says_so():
    failed = dataclasses.replace(_lm(0.1), status="error", error_type=ErrorType.CRASHED,
                                 rank_step_times_s=(), error="rank 1 died")
    grp = [_lm(0.1).in_group("g", 0, 2), failed.in_group("g", 1, 2)]
    row = dict(zip(strategy_table(grp).columns, strategy_table(grp).rows[0]))
    assert "1 of 2 jobs failed: crashed" in row["x 1 GPU; flags"]
    assert row["±95% jobs"] == "1 process (1 of 2 failed)"
    dead = [failed.in_group("h", i, 2) for i in range(2)]
    assert "all 2 jobs failed: crashed" in strategy_table(dead).rows[0]


# -- the sweep around the jobs: failures are rows, Ctrl-C keeps what finished -----------------------
class FakeJobs:
    """Stands in for TorchrunLauncher: each run a "job" whose outcome the test scripts
    (``ok``, an error type, or ``interrupt``: Ctrl-C while the job runs)."""

    survives_fatal = True
    script: list[str] = []
    ran: list[ScalingConfig] = []

    def __init__(self, **kw) -> None:
        pass

    def run(self, cfg: ScalingConfig, env: dict) -> ScalingRecord:
        FakeJobs.ran.append(cfg)
        what = FakeJobs.script.pop(0)
        if what == "interrupt":
            raise KeyboardInterrupt
        if what != "ok":
            return ScalingRecord(config=cfg, env=env, status="error", error_type=what,
                                 error="rank 0: injected")
        return dataclasses.replace(_lm(0.1), config=cfg, env=env)


@pytest.fixture
def fake_jobs(monkeypatch):
    monkeypatch.setattr(launchers, "torchrun", FakeJobs)
    FakeJobs.script, FakeJobs.ran = [], []
    return FakeJobs


def _scale(db, repeat=3, resume=False):
    cfg = ScalingConfig(base=_lm(0.1).config.base, gpus=2, strategy="fsdp")
    return jobruns.run_scaling([cfg], str(db), "dlbench scale", CPU, Rendezvous(),
                               repeat=repeat, resume=resume)


def test_a_failed_job_is_a_row_of_its_group_and_the_others_still_run(tmp_path, fake_jobs):
    fake_jobs.script = ["ok", ErrorType.CRASHED, "ok"]
    out = _scale(tmp_path / "s.db")
    assert out.status == "done" and len(fake_jobs.ran) == 3
    assert [(r.repeat_index, r.status) for r in out.records] == [(0, "ok"), (1, "error"),
                                                                 (2, "ok")]
    assert len({r.repeat_group for r in out.records}) == 1


def test_ctrl_c_between_jobs_keeps_the_finished_ones_and_resume_completes_the_group(
        tmp_path, fake_jobs):
    db = tmp_path / "s.db"
    fake_jobs.script = ["ok", "interrupt"]
    out = _scale(db)
    assert out.status == "interrupted" and "--resume" in out.message
    with Store(db) as store:
        [kept] = store.results(kind="scaling")
    assert (kept.ok, kept.repeat_index, kept.repeat_count) == (True, 0, 3)
    fake_jobs.script = ["ok", "ok"]
    out = _scale(db, resume=True)
    assert out.status == "done"
    assert [r.repeat_index for r in out.records] == [1, 2]   # only the missing jobs ran
    assert {r.repeat_group for r in out.records} == {kept.repeat_group}


# -- at the door -----------------------------------------------------------------------------------
def test_bad_repeat_tp_model_and_gpu_count_are_one_line_errors(tmp_path, monkeypatch):
    db = str(tmp_path / "n.db")
    p = dlbench("scale", "-m", "tiny_cnn", "--gpus", "2", "--device", "cpu", "--repeat", "0",
                "--db", db)
    assert p.returncode == 2 and "--repeat must be >= 1, got 0" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = dlbench("scale", "-m", "tiny_cnn", "--gpus", "2", "--strategy", "tp", "--device", "cpu",
                "--db", db)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "TinyCNN has no repeated stack" in p.stderr and "tiny_llama" in p.stderr
    # A host with 2 GPUs (its CUDA calls answered here: no process starts before the check).
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(plans, "device_facts",
                        lambda: DeviceFacts(cuda=True, bf16=True, memory_bytes=80 << 30))
    p = dlbench("scale", "-m", "tiny_cnn", "--gpus", "1,4", "--db", db)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "--gpus 4: this host has 2 visible GPU(s)" in p.stderr
    assert not (tmp_path / "n.db").exists()     # nothing ran, nothing stored


def test_gpu_counts_are_checked_against_the_host():
    plans.check_gpu_counts([1, 2], gpu=True, visible=2)
    plans.check_gpu_counts([16], gpu=False, visible=2)       # gloo processes: any count
    with pytest.raises(ConfigError, match="^gpus 3: this host has 2 visible GPU.*; give "
                                          "gpus=2 or fewer$"):
        plans.check_gpu_counts([1, 3], gpu=True, visible=2)


def test_scale_help_teaches_repeat_with_an_example():
    p = dlbench("scale", "--help")
    assert p.returncode == 0
    for text in ("--repeat N", "fresh torchrun jobs", "--repeat 3 --tag before",
                 "dlbench compare tag:before tag:after"):
        assert text in p.stdout, text
