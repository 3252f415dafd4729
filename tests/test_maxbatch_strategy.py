"""``dlbench maxbatch --strategy S --gpus N``: the largest batch per replica that trains under
a strategy on N GPUs, each probe a torchrun job of all N ranks (an out-of-memory on any rank
does not fit), the batch found measured as a scaling job, and the strategy's largest batch in
the report. On the CPU the memory limit is test_oom's (a model that raises torch's
OutOfMemoryError above 32 samples a forward), which every rank builds; the search's logic is
checked against a fake job whose memory each strategy fills its own way."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pytest

from fakes.cli import FAST
from fakes.cli import run as run_cli

from dlbench.config import ConfigError
from dlbench.jobs import plans
from dlbench.jobs.maxbatch_search import run_searches
from dlbench.records import record_from_dict
from dlbench.records.base import ErrorType
from dlbench.records.maxbatch import MaxBatchConfig, MaxBatchRecord
from dlbench.records.scaling import ScalingConfig, ScalingRecord
from dlbench.records.throughput import ThroughputConfig
from dlbench.report.strategy_tables import largest_batch_table
from dlbench.report.tables import maxbatch_table, tables_for
from dlbench.store import Store
from dlbench.suites import DeviceFacts
from dlbench.workloads import maxbatch as mb

MIB = 1 << 20


def dlbench(*args):
    return run_cli(*args, timeout=300)


def _base(**kw) -> ThroughputConfig:
    return ThroughputConfig(**{"model": "tiny_llama", "batch_size": 1, "device": "cpu",
                               "optimizer": "adamw", **kw})


def _search(strategy: str | None, gpus: int = 2, **kw) -> MaxBatchConfig:
    base = _base()
    par = None if strategy is None else ScalingConfig(base=base, gpus=gpus, strategy=strategy)
    return MaxBatchConfig(base=base, parallel=par, **kw)


# -- the config --------------------------------------------------------------------------------
def test_a_strategy_search_is_a_setup_of_its_own_and_one_process_keeps_its_key(tmp_path):
    single, fsdp, ddp = _search(None), _search("fsdp"), _search("ddp")
    assert len({single.key(), fsdp.key(), ddp.key(), _search("fsdp", gpus=4).key()}) == 4
    assert single.key() == hashlib.sha256(                 # what -b auto has always looked up
        f"maxbatch:{single.base.key()}".encode()).hexdigest()[:16]
    assert fsdp.label == "maxbatch tiny_llama fp32 train adamw x2 fsdp"
    assert (fsdp.strategy, fsdp.gpus, single.strategy, single.gpus) == ("fsdp", 2, "none", 1)
    at = fsdp.at(24)               # what runs at a batch: the job, 24 sequences per replica
    assert isinstance(at, ScalingConfig) and at.base.batch_size == 24 and at.gpus == 2
    assert single.at(24) == dataclasses.replace(single.base, batch_size=24)
    # stored and read back whole, the strategy's base stored once
    d = fsdp.to_dict()
    assert "base" not in d["parallel"] and MaxBatchConfig.from_dict(d) == fsdp
    assert "parallel" not in single.to_dict()                # older readers see what they knew
    rec = MaxBatchRecord(config=fsdp, env={}, best_batch=8)
    with Store(tmp_path / "k.db") as store:
        store.add(rec)
        [back] = store.results(kind="maxbatch")
    assert back.config == fsdp and back.config.parallel.strategy == "fsdp"
    for strategy in ("dp", "ps"):
        with pytest.raises(ConfigError, match="ddp, fsdp, tp, fsdp\\+tp"):
            _search(strategy)


# -- the search against a fake job: each strategy fills a rank's memory its own way ---------------
class ShardedMemory:
    """A job of ``gpus`` ranks with ``capacity_mib`` each: the model's state takes ``state_mib``
    on every rank under ddp and a 1/N share under fsdp, and each sample 1 MiB. Only the last
    rank runs out of memory (it holds a little more): any rank's OOM must fail the job."""

    def __init__(self, capacity_mib: int = 100, state_mib: int = 60) -> None:
        self.capacity, self.state = capacity_mib, state_mib
        self.jobs: list[ScalingConfig] = []

    def used(self, cfg: ScalingConfig, rank: int) -> int:
        share = self.state / cfg.gpus if cfg.strategy == "fsdp" else self.state
        return int(share) + cfg.base.batch_size + (1 if rank == cfg.gpus - 1 else 0)

    def run(self, cfg: ScalingConfig, env: dict) -> ScalingRecord:
        assert isinstance(cfg, ScalingConfig), "a probe under a strategy is a job"
        self.jobs.append(cfg)
        over = [r for r in range(cfg.gpus) if self.used(cfg, r) > self.capacity]
        if over:
            return ScalingRecord(config=cfg, env=env, status="error", error_type=ErrorType.OOM,
                                 failed_rank=over[0],
                                 error=f"rank {over[0]}: OutOfMemoryError: simulated")
        b = cfg.base.batch_size
        times = (0.01,) * max(2, cfg.base.stop.min_steps)
        return ScalingRecord(
            config=cfg, env=env, rank_step_times_s=(times,) * cfg.gpus,
            rank_samples_per_step=(b,) * cfg.gpus, unit="tokens", units_per_sample=32,
            memory={"allocated_peak_bytes": self.used(cfg, 0) * MIB,
                    "reserved_peak_bytes": self.used(cfg, 0) * MIB,
                    "device_total_bytes": self.capacity * MIB})


@pytest.mark.parametrize(("strategy", "expected"), [("ddp", 39), ("fsdp", 69)])
def test_the_largest_batch_per_replica_under_each_strategy(strategy, expected):
    # 100 MiB a rank: ddp keeps the 60 MiB state whole (39 samples fit beside it on the last
    # rank), fsdp a 30 MiB share on each of 2 ranks (69 fit).
    job = ShardedMemory()
    rec = mb.search(_search(strategy, tolerance=0), {}, default_start=16, launcher=job)
    assert rec.ok and (rec.best_batch, rec.first_oom_batch) == (expected, expected + 1)
    for cfg in job.jobs:            # every probe a short job of both ranks, at one batch each
        assert cfg.strategy == strategy and cfg.gpus == 2
        assert cfg.base.stop == mb.PROBE_STOP and cfg.base.warmup_steps == 0
        assert cfg.comm_profile_steps == 0       # and nothing profiled after its steps
    assert {p.batch for p in rec.probes} == {c.base.batch_size for c in job.jobs}
    assert all(p.outcome == ErrorType.OOM for p in rec.probes if not p.fits)
    # the first batch that does not fit ran out of memory on the last rank alone
    [edge] = [p for p in rec.probes if p.batch == expected + 1]
    assert edge.error.startswith("rank 1: OutOfMemoryError")


def test_run_searches_measures_the_batch_found_as_a_job_and_the_report_shows_it(tmp_path):
    job = ShardedMemory()
    searches = [_search("ddp", tolerance=0), _search("fsdp", tolerance=0)]
    with Store(tmp_path / "m.db") as store:
        found, measured = run_searches(searches, store, {}, "dlbench maxbatch", measure_with=job,
                                       probe_launcher=job)
        stored = store.results()
    assert [r.best_batch for r in found] == [39, 69]
    assert [(m.kind, m.config.strategy, m.config.base.batch_size) for m in measured] == [
        ("scaling", "ddp", 39), ("scaling", "fsdp", 69)]
    assert measured[1].config.base.stop == searches[1].base.stop   # the normal stopping rule
    assert {r.kind for r in stored} == {"maxbatch", "scaling"}
    table = largest_batch_table(found, measured)
    rows = [dict(zip(table.columns, row)) for row in table.rows]
    assert [(r["strategy"], r["GPUs"], r["largest batch/replica"], r["first OOM"])
            for r in rows] == [("ddp", "2", "39", "40"), ("fsdp", "2", "69", "70")]
    assert rows[1]["throughput there"].endswith("tok/s") and rows[1]["peak GiB (rank 0)"] != "-"
    # the maxbatch table matches each search to its job and says the strategy
    mt = maxbatch_table(found, measured)
    cells = [dict(zip(mt.columns, row)) for row in mt.rows]
    assert [c["options"].split()[-2:] for c in cells] == [["ddp", "x2"], ["fsdp", "x2"]]
    assert all(c["throughput"] != "-" for c in cells)
    # the report (every layout whose data exists) shows the largest batch per strategy
    titles = [t.title for t in tables_for(stored, "CPU")]
    assert "Largest batch per strategy" in titles


# -- the real path: test_oom's limit in every rank of a 2-rank gloo job --------------------------------
@pytest.fixture(scope="module")
def fsdp_search(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("mbs") / "mb.db")
    # start 32, at most 33: a probe that fits (32) and one that does not (33), each a job of 2
    # gloo ranks (about 10 s each on 2 busy cores), then the measurement at 32.
    p = dlbench("maxbatch", "-m", "test_oom", "--strategy", "fsdp", "--gpus", "2", "--device",
                "cpu", "--start", "32", "--max", "33", "--tolerance", "0", "--db", db, "--json",
                *FAST)
    return db, p


@pytest.mark.slow
def test_maxbatch_under_fsdp_on_two_ranks_finds_the_fake_limit(fsdp_search):
    db, p = fsdp_search
    assert p.returncode == 0, p.stderr[-3000:]
    docs = [record_from_dict(d) for d in json.loads(p.stdout)]
    [search] = [r for r in docs if r.kind == "maxbatch"]
    [job] = [r for r in docs if r.kind == "scaling"]
    assert search.ok and (search.best_batch, search.first_oom_batch) == (32, 33)
    assert search.config.strategy == "fsdp" and search.config.gpus == 2
    assert [(q.batch, q.outcome) for q in search.probes] == [(32, "ok"), (33, "oom")]
    assert "rank" in search.probes[1].error and "batch 33 > 32" in search.probes[1].error
    # measured at the batch found: a 2-rank fsdp job with the normal stopping rule
    assert job.ok and job.config.strategy == "fsdp" and job.config.base.batch_size == 32
    assert len(job.rank_step_times_s) == 2 and all(len(t) >= 5 for t in job.rank_step_times_s)
    assert job.run_id == search.run_id
    assert "maxbatch test_oom fp32 train x2 fsdp: largest batch 32" in p.stderr


@pytest.mark.slow
def test_a_strategy_search_is_reused_and_reported(fsdp_search):
    db, _ = fsdp_search
    p = dlbench("maxbatch", "-m", "test_oom", "--strategy", "fsdp", "--gpus", "2", "--device",
                "cpu", "--start", "32", "--max", "33", "--tolerance", "0", "--db", db,
                "--resume", *FAST)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "batch 32 (stored result" in p.stderr and "probing" not in p.stderr  # no job ran
    assert "Largest batch per strategy" in p.stdout
    with Store(db) as store:
        assert len(store.results(kind="maxbatch")) == 1
    shown = dlbench("results", "show", "--db", db, "latest")
    assert shown.returncode == 0 and "Largest batch per strategy" in shown.stdout


# -- at the door ---------------------------------------------------------------------------------
def _one_line_error(p, *texts):
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    for t in texts:
        assert t in p.stderr, (t, p.stderr)


def test_bad_input_is_one_line_before_any_job(tmp_path, monkeypatch):
    db = str(tmp_path / "n.db")
    common = ("maxbatch", "--device", "cpu", "--db", db)
    _one_line_error(dlbench(*common, "-m", "test_oom", "--strategy", "tp", "--gpus", "2"),
                    "SimulatedOOMCNN has no repeated stack", "tiny_llama")
    _one_line_error(dlbench(*common, "-m", "tiny_llama", "--strategy", "ps", "--gpus", "2"),
                    "--strategy ps", "ddp, fsdp, tp, fsdp+tp")
    _one_line_error(dlbench(*common, "-m", "tiny_llama", "--offload"),
                    "--offload applies to a search under a strategy")
    _one_line_error(dlbench(*common, "-m", "tiny_llama", "--strategy", "ddp", "--offload"),
                    "--offload", "fsdp")
    _one_line_error(dlbench(*common, "-m", "tiny_llama", "--strategy", "fsdp", "--mode", "eval"),
                    "drop --mode eval")
    # A host with 2 GPUs (its CUDA calls answered here: the check comes before any job).
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(plans, "device_facts",
                        lambda: DeviceFacts(cuda=True, bf16=True, memory_bytes=80 << 30))
    _one_line_error(dlbench("maxbatch", "-m", "tiny_llama", "--strategy", "fsdp", "--gpus", "8",
                            "--db", db),
                    "--gpus 8: this host has 2 visible GPU(s)")
    assert not (tmp_path / "n.db").exists()     # nothing ran, nothing stored


def test_maxbatch_help_teaches_the_strategy_flags_with_examples():
    p = dlbench("maxbatch", "--help")
    assert p.returncode == 0
    for text in ("--strategy", "--gpus", "--tp N", "--offload", "--fp8", "--checkpointing",
                 "--strategy ddp,fsdp --gpus 8", "an out-of-memory on any rank",
                 "--strategy fsdp --gpus 8 --offload --checkpointing"):
        assert text in p.stdout, text
