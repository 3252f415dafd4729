"""Collective bandwidth: nccl-tests' factors and sizes, the timing modes, the exact check at every
dtype on a 2-process gloo job, NCCL's algorithm read from its tuning log, and the published
figures beside a result."""

import csv
import gzip
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from fakes.cli import run as run_cli

from dlbench.config import ConfigError
from dlbench.jobs import launchers
from dlbench.launch.torchrun import JobOutcome, TorchrunLauncher
from dlbench.measure.bandwidth import algbw, busbw_factor
from dlbench.measure.nccl_tuning import (
    Chosen,
    NcclChoice,
    busbw_comparable,
    chosen_for,
    parse_line,
    parse_lines,
    version_text,
)
from dlbench.records import record_from_dict
from dlbench.records.base import config_key
from dlbench.records.collective import CommConfig, CommRecord
from dlbench.reference import gpu_specs
from dlbench.reference.busbw import busbw_references, gpu_link, references_for
from dlbench.report.comm_tables import comm_tables, reference_table
from dlbench.report.tables import comm_table
from dlbench.store import Store
from dlbench.workloads.collectives import (
    EXACT_INTEGERS,
    Pattern,
    TuningLog,
    element_count,
    expected,
    parse_size,
    sizes_between,
)

ROOT = Path(__file__).resolve().parents[1]
ALL_OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]


def test_busbw_factors_of_nccl_tests():
    # doc/PERFORMANCE.md: allreduce 2(n-1)/n; reducescatter, allgather (n-1)/n; broadcast 1
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("all_reduce", 2) == 1.0
    assert busbw_factor("all_gather", 4) == 0.75
    assert busbw_factor("reduce_scatter", 8) == 0.875
    assert busbw_factor("broadcast", 8) == 1.0
    assert busbw_factor("all_to_all", 2) == 0.5
    assert busbw_factor("all_reduce", 1) == 0.0


def test_algbw_busbw_of_a_record():
    cfg = CommConfig(op="all_reduce", size_bytes=1 << 30, ranks=8, backend="nccl")
    r = CommRecord(config=cfg, env={}, rank_times_s=((0.01, 0.01),) * 4 + ((0.02, 0.02),) * 4,
                   count=(1 << 28), wrong=0)
    assert r.time_s == pytest.approx(0.015)          # nccl-tests -a 1: mean over ranks
    assert r.max_time_s == pytest.approx(0.02)
    assert r.algbw() == pytest.approx(algbw(1 << 30, 0.015))
    assert r.busbw() == pytest.approx(r.algbw() * 1.75)
    assert r.headline() == pytest.approx(r.busbw() / 1e9)
    assert record_from_dict(r.to_dict()) == r


def test_percentiles_take_the_slowest_rank_of_each_sample():
    cfg = CommConfig(op="all_reduce", size_bytes=1 << 20, ranks=2, backend="nccl",
                     timing="graph", iters_per_sample=10)
    times = (tuple(1e-5 * (i + 1) for i in range(100)),          # rank 0: 10..1000 us
             tuple(1e-5 * (i + 1) + (1e-3 if i == 0 else 0.0) for i in range(100)))
    r = CommRecord(config=cfg, env={}, rank_times_s=times, count=1 << 18, wrong=0)
    samples = r.sample_times_s()
    assert samples[0] == pytest.approx(1.01e-3) and samples[1:] == times[0][1:]
    # linear interpolation over the 100 slowest-rank samples (dlbench's percentile)
    assert r.p50_s == pytest.approx(sorted(samples)[49] * 0.5 + sorted(samples)[50] * 0.5)
    assert r.p99_s == pytest.approx(sorted(samples)[98] + 0.01 * (sorted(samples)[99]
                                                                   - sorted(samples)[98]))
    assert CommRecord(config=cfg, env={}).p50_s is None


def test_sizes_and_counts():
    assert parse_size("8B") == 8 and parse_size("4GiB") == 4 << 30 and parse_size("64K") == 65536
    assert sizes_between(8, 64) == [8, 16, 32, 64]
    assert element_count("all_gather", 1024, 4, 2) == 128      # size is the gathered output
    assert element_count("reduce_scatter", 1028, 4, 2) == 256  # input split evenly
    assert element_count("all_reduce", 8, 4, 2) == 2


def test_expected_results_are_exact():
    e = expected("all_reduce", 9, 0, 2, torch.device("cpu"), torch.float32)
    # rank r holds (i % 7) + r + 1; the sum over 2 ranks is 2 (i % 7) + 3
    assert e.tolist() == [2 * (i % 7) + 3 for i in range(9)]
    rs = expected("reduce_scatter", 8, 1, 2, torch.device("cpu"), torch.float32)
    assert rs.tolist() == [2 * (i % 7) + 3 for i in range(4, 8)]


# -- exact inputs at every dtype ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("world", [2, 3, 8, 16, 32, 64, 85, 86, 256, 1024])
def test_every_partial_sum_is_exact_in_the_type(dtype, world):
    """Added rank by rank in the type itself (a ring's order), the sum equals the exact one."""
    p = Pattern.for_type(dtype, world)
    assert p.max_sum() <= EXACT_INTEGERS[dtype]
    t = getattr(torch, dtype)
    i = torch.arange(0, 50, dtype=torch.int64)
    acc = p.values(i, 0).to(t)
    for r in range(1, world):
        acc = acc + p.values(i, r).to(t)
    assert torch.equal(acc.to(torch.int64), p.total(i))
    assert torch.equal(p.total(i), sum(p.values(i, r) for r in range(world)))
    if p.m:  # the sum varies along the buffer: a misplaced chunk is seen
        assert len(set(p.total(i).tolist())) > 1


def test_the_old_inputs_were_not_exact_in_bfloat16_at_32_ranks():
    """Why the pattern depends on the type: (i % 7) + rank + 1, added rank by rank in bfloat16
    at 32 ranks, passes 256 (the last integer bfloat16 holds with all below it) and rounds."""
    i = torch.arange(7)
    acc = (i % 7 + 1).to(torch.bfloat16)
    for r in range(1, 32):
        acc = acc + (i % 7 + r + 1).to(torch.bfloat16)
    exact = sum(i % 7 + r + 1 for r in range(32))
    assert exact.tolist() == [528, 560, 592, 624, 656, 688, 720]
    assert (acc.to(torch.int64) != exact).sum() == 6       # only 656 happens to survive
    assert Pattern.for_type("bfloat16", 32).max_sum() <= 256
    assert Pattern.for_type("float32", 32).m == 7   # float32 keeps the old values


def _gloo(ops, dtype, **kw):
    return launchers.torchrun(timeout_s=120).run_comm(ops, [64, 4096], 2, {}, dtype=dtype, **kw)


@pytest.mark.slow
def test_comm_on_gloo_is_correct_and_a_corrupted_rank_fails_its_rows():
    recs = _gloo(ALL_OPS, "float32", iters=3, warmup=1)
    assert {r.config.op for r in recs} == set(ALL_OPS)
    assert len(recs) == 5 * 2 * 2 - 2                   # all_to_all has no in-place row
    assert all(r.ok and r.wrong == 0 and r.busbw() > 0 for r in recs), \
        [(r.config.label, r.error) for r in recs if not r.ok]
    assert all(len(r.rank_times_s) == 2 and len(r.rank_times_s[0]) == 3 for r in recs)
    assert all(r.config.timing == "eager" and r.config.iters_per_sample == 1 for r in recs)
    # what NCCL did: gloo has none, and says so; the hosts are recorded
    assert all(r.algorithm == r.protocol == "unknown" and r.algorithm_note == "gloo: no NCCL"
               and r.nccl_version is None and len(r.rank_hosts) == 2 and r.nodes == 1
               for r in recs)
    t = comm_table(recs)
    assert len(t.rows) == 10 and t.rows[0][:2] == ("all_reduce", "64 B")
    assert "NCCL algo/proto" not in t.columns            # no NCCL, no column

    bad = _gloo(["all_reduce", "all_gather"], "float32", iters=2, warmup=0, corrupt_rank=1)
    for r in bad:
        assert r.status == "error" and r.error_type == "wrong_result" and r.wrong > 0
        assert r.headline() is None
    # one wrong input element spoils one element of the sum on both ranks
    assert next(r for r in bad if r.config.op == "all_reduce").wrong == 2
    # all_gather: the element lands in rank 1's slot on both ranks
    assert next(r for r in bad if r.config.op == "all_gather").wrong == 2


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_collectives_check_exactly_batched_on_gloo(dtype):
    """bf16 and fp16: every op 0 wrong, timed batched (4 calls a sample, each sample's time
    stored per iteration)."""
    recs = _gloo(ALL_OPS, dtype, iters=3, warmup=1, timing="batched", iters_per_sample=4)
    assert len(recs) == 18
    assert all(r.ok and r.wrong == 0 for r in recs), [(r.config.label, r.error) for r in recs]
    assert all(r.config.dtype == dtype and r.config.timing == "batched"
               and r.config.iters_per_sample == 4 and len(r.rank_times_s[1]) == 3
               for r in recs)
    assert all(r.p50_s is not None and r.p99_s >= r.p50_s for r in recs)
    t = comm_tables(recs)[0]
    assert t.title == "Collectives, 2 ranks, gloo, default, batched x4, rotated"
    assert any("4 calls queued back to back" in n for n in t.notes)


def test_a_corrupted_bfloat16_element_is_counted():
    bad = _gloo(["all_reduce", "reduce_scatter"], "bfloat16", iters=1, warmup=0,
                corrupt_rank=0)
    by_op = {(r.config.op, r.config.size_bytes, r.config.inplace): r for r in bad}
    assert all(r.status == "error" and r.error_type == "wrong_result" for r in bad)
    assert by_op[("all_reduce", 64, False)].wrong == 2     # both ranks hold the spoiled sum
    assert by_op[("reduce_scatter", 64, False)].wrong == 1  # element 0 is rank 0's chunk only


# -- configs, old records -------------------------------------------------------------------------
def test_timing_is_checked_and_eager_keeps_the_old_keys():
    with pytest.raises(ConfigError, match="iters_per_sample"):
        CommConfig(op="all_reduce", size_bytes=8, ranks=2, backend="gloo", iters_per_sample=4)
    with pytest.raises(ConfigError, match="^timing graph"):
        CommConfig(op="all_reduce", size_bytes=8, ranks=2, backend="gloo", timing="graph",
                   iters_per_sample=4)
    with pytest.raises(ConfigError, match="^timing must be one of"):
        CommConfig(op="all_reduce", size_bytes=8, ranks=2, backend="nccl", timing="cudagraph")
    old = dict(op="all_reduce", size_bytes=8, ranks=2, backend="nccl", dtype="float32",
               inplace=False, interconnect="default", iters=20, warmup=5)
    assert CommConfig(**old, rotate=False).key() == config_key(old)
    graph = CommConfig(**old, rotate=False, timing="graph", iters_per_sample=10)
    assert graph.key() != config_key(old) and graph.label.endswith("graph x10")


#: A graph-timed all_reduce config as stored before the api, buffers and rotate fields.
OLD_GRAPH_CONFIG = dict(op="all_reduce", size_bytes=8, ranks=2, backend="nccl", dtype="float32",
                        inplace=False, interconnect="default", iters=20, warmup=5,
                        timing="graph", iters_per_sample=20)


def test_the_api_is_checked_and_torch_keeps_the_old_keys():
    with pytest.raises(ConfigError, match='^api="nccl" calls NCCL itself') as err:
        CommConfig(op="all_reduce", size_bytes=8, ranks=2, backend="gloo", api="nccl")
    assert err.value.fields == ("api", "backend")
    with pytest.raises(ConfigError, match="^api must be one of"):
        CommConfig(op="all_reduce", size_bytes=8, ranks=2, backend="nccl", api="mpi")
    old = dict(OLD_GRAPH_CONFIG)
    torch_api = CommConfig(**old, rotate=False)
    assert torch_api.api == "torch" and torch_api.key() == config_key(old)
    own = CommConfig(**old, rotate=False, api="nccl")
    assert own.key() != torch_api.key() and own.label.endswith("graph x20 nccl API")
    assert CommConfig.from_dict(own.to_dict()) == own


def test_the_table_names_the_api_it_timed():
    from dlbench.report.comm_tables import API_NOTE, BUFFERS_NOTE, timing_label
    cfg = CommConfig(op="all_reduce", size_bytes=1 << 20, ranks=2, backend="nccl",
                     timing="graph", iters_per_sample=20, api="nccl", rotate=False)
    rec = CommRecord(config=cfg, env={}, rank_times_s=((1e-5,) * 20, (1e-5,) * 20), wrong=0)
    assert timing_label(rec) == "graph x20, nccl API"
    assert timing_label(replace(rec, config=replace(cfg, rotate=True))) == \
        "graph x20, nccl API, rotated"
    assert timing_label(replace(rec, config=replace(cfg, api="torch"))) == "graph x20"
    (table,) = comm_tables([rec])
    assert API_NOTE in table.notes and BUFFERS_NOTE not in table.notes
    ncclmem = replace(rec, config=replace(cfg, buffers="nccl"))
    assert timing_label(ncclmem) == "graph x20, nccl API, nccl buffers"
    (table,) = comm_tables([ncclmem])
    assert BUFFERS_NOTE in table.notes


def test_the_buffers_are_checked_and_torchs_keep_the_old_keys():
    with pytest.raises(ConfigError, match='^buffers="nccl" allocates with ncclMemAlloc') as err:
        CommConfig(op="all_reduce", size_bytes=8, ranks=2, backend="gloo", buffers="nccl")
    assert err.value.fields == ("buffers", "backend")
    with pytest.raises(ConfigError, match="^buffers must be one of"):
        CommConfig(op="all_reduce", size_bytes=8, ranks=2, backend="nccl", buffers="cuda")
    old = dict(OLD_GRAPH_CONFIG)
    assert CommConfig(**old, rotate=False).key() == config_key(old)
    ncclmem = CommConfig(**old, rotate=False, buffers="nccl")
    assert ncclmem.key() != config_key(old) and ncclmem.label.endswith("graph x20 nccl buffers")
    assert CommConfig.from_dict(ncclmem.to_dict()) == ncclmem


def test_rotated_buffers_are_the_default_and_take_new_keys():
    """A config made today rotates its buffers and has a key of its own; a stored dict without
    the field (a record from before it) reads as one set of buffers, with its old key."""
    old = dict(op="all_reduce", size_bytes=1 << 20, ranks=2, backend="nccl", dtype="float32",
               inplace=False, interconnect="default", iters=20, warmup=5, timing="graph",
               iters_per_sample=20)
    stored = CommConfig.from_dict(old)
    assert stored.rotate is False and stored.key() == config_key(old)
    today = CommConfig(**old)
    assert today.rotate is True and today.key() != stored.key()
    assert CommConfig.from_dict(today.to_dict()) == today


@pytest.mark.parametrize("timing, k, sizes, size, copies", [
    ("graph", 20, [8, 1 << 20, 1 << 30], 1 << 20, 20),     # the job's largest holds more: k
    ("graph", 20, [1 << 26, 1 << 30], 1 << 26, 16),        # 1 GiB // 64 MiB
    ("graph", 20, [1 << 30], 1 << 30, 1),                  # the largest size: one set
    ("batched", 5, [8, 64], 8, 5),
    ("eager", 1, [8, 64], 8, 8),                           # eager: one a timed sample (iters 12)
])
def test_the_copies_follow_nccl_tests(timing, k, sizes, size, copies):
    from dlbench.workloads.collectives import buffer_copies
    job = {"rotate": True, "timing": timing, "iters_per_sample": k, "iters": 12, "sizes": sizes}
    assert buffer_copies(job, size) == copies
    assert buffer_copies({**job, "rotate": False}, size) == 1


def test_rotated_calls_are_exact_and_recorded_on_gloo():
    """Every copy holds the same inputs: the checked call is exact, and the records say how
    many copies the calls went through."""
    recs = launchers.torchrun(timeout_s=120).run_comm(
        ["all_reduce", "reduce_scatter"], [64, 256], 2, {}, backend="gloo", iters=3, warmup=1,
        timing="batched", iters_per_sample=4)
    assert recs and all(r.ok and r.wrong == 0 and r.config.rotate for r in recs)
    assert {(r.config.size_bytes, r.buffer_copies) for r in recs} == {(64, 4), (256, 1)}


def test_a_record_says_how_its_calls_were_made():
    """The stream and the in-place call come from rank 0's row; a record from before they were
    recorded reads as the default stream, and all_reduce and broadcast as called in place (both
    APIs called them so then), the other collectives as placed."""
    def row(**how):
        return {"count": 4, "times_s": [1e-5], "wrong": 0, **how}
    out = CommConfig(op="all_reduce", size_bytes=16, ranks=2, backend="nccl", api="nccl")
    rec = CommRecord.from_ranks(out, {}, [row(stream="side", call_in_place=False), row()])
    assert (rec.stream, rec.call_in_place, rec.called_in_place) == ("side", False, False)
    old = CommRecord.from_ranks(out, {}, [row(), row()])
    assert (old.stream, old.call_in_place, old.called_in_place) == ("default", None, True)
    gather = CommRecord.from_ranks(replace(out, op="all_gather"), {}, [row(), row()])
    assert gather.called_in_place is False
    assert CommRecord.from_ranks(replace(out, op="all_gather", inplace=True), {},
                                 [row(), row()]).called_in_place is True


def test_records_stored_before_the_timing_modes_read_as_eager_and_unknown(tmp_path):
    """A committed campaign store (2 H200s, written before these fields): its records read as
    eager and unknown, keep their stored identity, and a dict without the new fields (an older
    writer's) reads back the same record."""
    folder = ROOT / "results" / "pt2.11-cu130-2x-h200"
    db = tmp_path / "h200x2.db"
    db.write_bytes(gzip.decompress((folder / "dlbench.db.gz").read_bytes()))
    with Store(db) as store:
        recs = store.results(kind="comm")
    assert recs
    keys = {row["id"]: row["config_key"]
            for row in csv.DictReader(io.StringIO((folder / "all-comm.csv").read_text()))}
    for r in recs:
        assert r.config.timing == "eager" and r.config.iters_per_sample == 1
        assert r.algorithm == "unknown" and r.nodes is None and r.busbw_comparable is None
        assert r.config.key() == keys[r.id]                       # the same identity as stored
    r = recs[0]
    old = r.to_dict()
    for name in ("rank_hosts", "algorithm", "protocol", "algorithm_note", "nccl_version",
                 "nccl_env"):
        del old[name]
    del old["config"]["timing"], old["config"]["iters_per_sample"]
    assert record_from_dict(old) == r


# -- what NCCL did --------------------------------------------------------------------------------
# Lines as NCCL writes them: the first two from logs users posted, the rest from enqueue.cc's
# format strings of each release (2.20-2.22 name no collective; 2.23 numbers; 2.24+ names).
LINES = {
    "tpgds-aihub0007:185302:185302 [0] NCCL INFO AllReduce: 4 Bytes -> Algo RING proto SIMPLE "
    "channel{Lo..Hi}={0..0}": NcclChoice("AllReduce", 4, "RING", "SIMPLE"),
    "a8dfcf10c333:1247:1247 [0] NCCL INFO Broadcast: 85711360 Bytes -> Algo RING proto SIMPLE "
    "channel{Lo..Hi}={0..3}": NcclChoice("Broadcast", 85711360, "RING", "SIMPLE"),
    "[0] h100clust-worker-1:497888:497888 [0] NCCL INFO 262144 Bytes -> Algo 0 proto 1 time "
    "54.707825": NcclChoice(None, 262144, "TREE", "LL128"),
    "[0] NCCL INFO 805306368 Bytes -> Algo 1 proto 2 time 3970.683594":
        NcclChoice(None, 805306368, "RING", "SIMPLE"),
    "h:1:2 [0] NCCL INFO ReduceScatter: 1048576 Bytes -> Algo 6 proto 2 time 21.5":
        NcclChoice("ReduceScatter", 1048576, "PAT", "SIMPLE"),
    "[2026-01-05 10:00:00] h:1:2 [3] NCCL INFO AllReduce: 268435456 Bytes -> Algo NVLS proto "
    "SIMPLE channel{Lo..Hi}={0..15}": NcclChoice("AllReduce", 268435456, "NVLS", "SIMPLE"),
    "h:1:2 [0] NCCL INFO AllReduce [Symmetric]: 65536 Bytes -> Kernel AllReduce_AGxLL_R "
    "nchannels 16 nthreads 512": NcclChoice("AllReduce", 65536, "SYMMETRIC AllReduce_AGxLL_R",
                                            "unknown"),
    "h:1:2 [0] NCCL INFO AllGather [Copy Engine]: 1048576 Bytes -> cudaMemcpy":
        NcclChoice("AllGather", 1048576, "COPY_ENGINE", "unknown"),
}


@pytest.mark.parametrize("line", list(LINES))
def test_tuning_lines_of_every_release(line):
    assert parse_line(line) == LINES[line]


def test_other_lines_are_no_choice():
    for line in ["h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f757de00400 recvbuff "
                 "0x7f757de00400 count 1 datatype 7 op 0 root 0 comm 0x55 [nranks=16] stream 0x5",
                 "h:1:1 [0] NCCL INFO Channel 00/0 : 1[21000] -> 0[1000] via P2P/direct pointer",
                 "h:1:1 [0] NCCL INFO AllReduce |    LL |   LL128 |  Simple |",
                 "NCCL version 2.21.5",
                 ""]:
        assert parse_line(line) is None


def test_what_nccl_chose_for_one_size():
    lines = [
        "h:1:1 [0] NCCL INFO AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
        "h:1:1 [0] NCCL INFO Broadcast: 8 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..0}",
        "h:1:1 [0] NCCL INFO AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..1}",
    ]
    assert chosen_for("all_reduce", parse_lines(lines)) == Chosen("RING", "LL", None)
    mixed = chosen_for("all_reduce", parse_lines(lines[:1] + [lines[0].replace("RING", "TREE")]))
    assert mixed.algorithm == "RING+TREE" and "differently" in mixed.note
    none = chosen_for("all_to_all", parse_lines(lines))   # p2p: NCCL writes no such line
    assert none.algorithm == none.protocol == "unknown" and "AlltoAll" in none.note
    # a release that names no collective: its lines count for any op
    assert chosen_for("all_gather", parse_lines(list(LINES)[2:3])).algorithm == "TREE"


def test_busbw_is_comparable_only_for_point_to_point_algorithms():
    assert busbw_comparable("RING") and busbw_comparable("TREE") and busbw_comparable("PAT")
    assert busbw_comparable("NVLS") is False and busbw_comparable("COLLNET_DIRECT") is False
    assert busbw_comparable("RING+NVLS_TREE") is False
    assert busbw_comparable("unknown") is None and busbw_comparable(None) is None
    assert busbw_comparable("SYMMETRIC AllReduce_AGxLL_R") is None
    assert version_text((2, 21, 5)) == "2.21.5" and version_text((2, 27, 7, "a")) == "2.27.7a"
    assert version_text(21805) == "2.18.5" and version_text(None) is None


def test_the_tuning_log_is_read_line_by_line_as_it_grows(tmp_path):
    log = TuningLog(tmp_path, pid=4242)
    assert log.new_lines() == []                          # NCCL has not started yet
    (tmp_path / "nccl.other.4243.log").write_text("someone else's line\n")
    path = tmp_path / "nccl.host.4242.log"
    path.write_text("first\nsecond, half")
    assert log.new_lines() == ["first"]                   # a line being written waits
    with open(path, "a") as f:
        f.write(" written\nthird\n")
    assert log.new_lines() == ["second, half written", "third"]
    assert log.new_lines() == []


class _ScriptedLog:
    """A tuning log whose reads return the scripted lines in turn."""

    def __init__(self, *reads):
        self.reads = list(reads)

    def new_lines(self):
        return self.reads.pop(0)


def test_only_the_timed_calls_lines_count():
    """The probe's row reads NCCL's choice from the lines of the timed calls alone: those of the
    checked call and of the warm-up are set aside (a one-rank gloo group in this process)."""
    import torch.distributed as dist
    from dlbench.workloads import collectives as workload

    line = "h:1:1 [0] NCCL INFO AllReduce: 8 Bytes -> Algo {} proto LL channel{{Lo..Hi}}={{0..0}}"
    log = _ScriptedLog([line.format("TREE")], [line.format("PAT")], [line.format("RING")] * 3)
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        out = workload._measure("all_reduce", 2, False, 0, 1, torch.device("cpu"),
                                torch.float32, Pattern.for_type("float32", 1),
                                {"iters": 1, "warmup": 1, "timing": "batched",
                                 "iters_per_sample": 3}, log)
    finally:
        dist.destroy_process_group()
    assert out["wrong"] == 0 and len(out["times_s"]) == 1 and log.reads == []
    assert out["nccl"] == {"algorithm": "RING", "protocol": "LL", "note": None}


def _outcome(rows, **extra):
    return JobOutcome(0, [dict(rank=r, rows=rows, world=2, host="h0", **extra)
                          for r in range(2)])


def test_the_probe_job_names_nccls_choice_on_the_timed_records(monkeypatch):
    """The NCCL path without GPUs: the probe job (its tuning log on) reports a choice per size,
    the timed job its times; each record gets its size's choice, the ranks' NCCL version and
    NCCL_* variables, and an NVLS size is flagged as not comparable."""
    jobs = []

    def launch(self, job, nproc, interconnect="default"):
        jobs.append((job, dict(self.extra_env)))
        if job.get("nccl_log_dir"):
            return _outcome([dict(op="all_reduce", size_bytes=s, inplace=p, count=s // 4,
                                  times_s=[1e-5], wrong=0,
                                  nccl=dict(algorithm="NVLS" if s > 64 else "RING",
                                            protocol="SIMPLE" if s > 64 else "LL", note=None))
                             for s in (64, 4096) for p in (False, True) if s == 64 or not p])
        return _outcome([dict(op="all_reduce", size_bytes=s, inplace=p, count=s // 4,
                              times_s=[2e-5, 3e-5], wrong=0)
                         for s in (64, 4096) for p in (False, True)],
                        nccl_version="2.28.9", nccl_env={"NCCL_NVLS_ENABLE": "0"})

    monkeypatch.setattr(TorchrunLauncher, "launch", launch)
    recs = launchers.torchrun().run_comm(["all_reduce"], [64, 4096], 2, {}, backend="nccl",
                                       timing="graph", iters_per_sample=10, probe=True)
    probe, timed = jobs
    assert probe[0]["iters"] == 1 and probe[0]["warmup"] == 0 and probe[0]["timing"] == "graph"
    assert probe[1]["NCCL_DEBUG"] == "INFO" and probe[1]["NCCL_DEBUG_SUBSYS"] == "TUNING"
    assert probe[1]["NCCL_DEBUG_FILE"].endswith("nccl.%h.%p.log")
    assert "nccl_log_dir" not in timed[0] and "NCCL_DEBUG" not in timed[1]
    got = {(r.config.size_bytes, r.config.inplace): r for r in recs}
    assert (got[(64, False)].algorithm, got[(64, False)].protocol) == ("RING", "LL")
    assert got[(64, False)].busbw_comparable is True
    assert got[(4096, False)].algorithm == "NVLS" and got[(4096, False)].busbw_comparable is False
    lost = got[(4096, True)]                 # a size the probe had no row for: unknown, and why
    assert lost.algorithm == "unknown" and "no row" in lost.algorithm_note
    assert all(r.nccl_version == "2.28.9" and r.nccl_env == {"NCCL_NVLS_ENABLE": "0"}
               and r.config.timing == "graph" for r in recs)
    t = comm_table(recs)
    row = next(x for x in t.rows if x[1] == "4 KiB")
    assert row[7].endswith("*") and row[-1] == "NVLS/SIMPLE (in-place unknown)"
    assert any("NVLS or CollNet ran" in n for n in t.notes)
    assert next(x for x in t.rows if x[1] == "64 B")[-1] == "RING/LL"

    # a probe that fails leaves every record unknown, saying why
    def failing(self, job, nproc, interconnect="default"):
        if job.get("nccl_log_dir"):
            return JobOutcome(1, None, {0: {"ok": False, "rank": 0, "error": "Traceback\nboom"}})
        return launch(self, job, nproc, interconnect)
    monkeypatch.setattr(TorchrunLauncher, "launch", failing)
    recs = launchers.torchrun().run_comm(["all_reduce"], [64], 2, {}, backend="nccl", probe=True)
    assert all(r.algorithm == "unknown" and r.algorithm_note ==
               "the algorithm probe failed (rank 0: boom)" for r in recs)


# -- published figures ----------------------------------------------------------------------------
TOPO_NVLINK = ("GPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
               "GPU0\t X \tNV18\t0-31\t0\t\tN/A\nGPU1\tNV18\t X \t0-31\t0\t\tN/A\n\nLegend:\n\n"
               "  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n")
TOPO_PCIE = "\tGPU0\tGPU1\nGPU0\t X \tPHB\nGPU1\tPHB\t X \n"


def _env(name, topo):
    return {"accelerator": "cuda", "gpus": [{"name": name}], "topology": topo}


def test_every_published_figure_has_a_source_and_a_known_gpu():
    ids = {s.id for s in gpu_specs()}
    refs = busbw_references()
    assert refs and all(r.sources and all(s.startswith("https://") for s in r.sources)
                        for r in refs)
    assert all(r.busbw_gbs > 0 and r.basis in ("maintainer", "measured") for r in refs)
    assert all(r.gpu_id is None or r.gpu_id in ids for r in refs)
    assert all(not r.comparable for r in refs if r.algorithm == "nvls")


def test_the_docs_list_every_published_figure_with_its_source():
    page = (ROOT / "docs" / "scaling.md").read_text()
    table = page[page.index("### Published figures beside yours"):
                 page.index("### Beside nccl-tests")]
    rows = [line for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    for ref in busbw_references():
        assert any(f"| {ref.busbw_gbs:g} |" in line and all(s in line for s in ref.sources)
                   for line in rows), ref
    assert len(rows) - 1 == len(busbw_references())       # the header, then one row each


def test_which_published_figures_describe_a_host():
    assert gpu_link(TOPO_NVLINK) == "nvlink" and gpu_link(TOPO_PCIE) == "pcie"
    assert gpu_link(None) is None
    h100 = _env("NVIDIA H100 80GB HBM3", TOPO_NVLINK)
    two = references_for(h100, 2, 1)
    assert [(r.algorithm, r.busbw_gbs) for r in two] == [("ring", 370)]
    eight = {(r.algorithm, r.busbw_gbs) for r in references_for(h100, 8, 1)}
    assert eight == {("ring", 370), ("nvls", 480)}
    assert references_for(_env("NVIDIA H100 80GB HBM3", TOPO_PCIE), 2, 1) == []
    assert references_for(h100, 2, None) == []              # node count unknown: no guess
    across = references_for(h100, 16, 2)
    assert {r.per for r in across} == {None, "nic"} and any(r.busbw_gbs == 470 for r in across)
    assert references_for(_env("NVIDIA H200", TOPO_NVLINK), 2, 1) == []  # none published
    bridged = references_for(_env("NVIDIA H100 PCIe", TOPO_NVLINK), 2, 1)
    assert [r.busbw_gbs for r in bridged] == [116.26]


def test_the_published_figures_stand_beside_the_highest_all_reduce():
    def rec(size, t, inplace=False, op="all_reduce"):
        cfg = CommConfig(op=op, size_bytes=size, ranks=2, backend="nccl", inplace=inplace,
                         timing="graph", iters_per_sample=10)
        return CommRecord(config=cfg, env=_env("NVIDIA H100 80GB HBM3", TOPO_NVLINK),
                          rank_times_s=((t,) * 3,) * 2, count=size // 4, wrong=0,
                          rank_hosts=("a", "a"), algorithm="RING", protocol="SIMPLE")
    recs = [rec(1 << 30, (1 << 30) / 350e9), rec(1 << 20, 1e-5), rec(1 << 30, 1.0, True),
            rec(1 << 30, (1 << 30) / 400e9, op="all_gather")]
    t = reference_table(recs)
    assert t is not None and len(t.rows) == 1
    row = t.rows[0]
    assert row[3:6] == ("ring", "370", "maintainer") and row[6].startswith("https://")
    assert row[7] == "350.0 (1 GiB, graph x10, rotated, 2 ranks)" and row[8] == f"{350 / 370:.2f}"
    assert [x.title for x in comm_tables(recs)][-1] == t.title
    no_p2p = [replace(r, config=replace(r.config, interconnect="no-p2p")) for r in recs]
    assert reference_table(no_p2p) is None       # a profile with links off is not the platform


# -- the command ----------------------------------------------------------------------------------
def _dlbench(*args, timeout=120):
    return run_cli(*args, timeout=timeout)


@pytest.mark.slow
def test_comm_cli(tmp_path):
    p = _dlbench("comm", "--device", "cpu", "--gpus", "2", "--op", "all_reduce", "--min", "8B",
                 "--max", "32B", "--iters", "2", "--warmup", "0", "--timing", "batched",
                 "--iters-per-sample", "3", "--json", "-q", "--db", str(tmp_path / "c.db"))
    assert p.returncode == 0, p.stderr[-2000:]
    docs = json.loads(p.stdout)
    assert [d["config"]["size_bytes"] for d in docs] == [8, 8, 16, 16, 32, 32]
    assert all(d["wrong"] == 0 and d["busbw"] == pytest.approx(d["algbw"]) for d in docs)
    assert all(d["config"]["timing"] == "batched" and d["config"]["iters_per_sample"] == 3
               and d["latency_us"] == pytest.approx(d["time_s"] * 1e6)
               and d["p99_us"] >= d["p50_us"] > 0 and d["algorithm"] == "unknown"
               for d in docs)
    # how the calls were made: on the host, and torch's all_reduce in place on either row
    assert all(d["stream"] == "host" and d["call_in_place"] is True for d in docs)


def test_comm_cli_refuses_a_graph_without_nccl(tmp_path):
    p = _dlbench("comm", "--device", "cpu", "--timing", "graph", "--db", str(tmp_path / "c.db"))
    assert p.returncode == 2 and "--timing graph" in p.stderr
    assert not (tmp_path / "c.db").exists()


@pytest.mark.parametrize("args, said, printed", [
    ((["nope"], [], "8B", "1KiB", 2), "op must be among all_reduce, all_gather, reduce_scatter, "
     "broadcast, all_to_all; got 'nope'", "--op must be among"),
    ((["all_reduce"], [], "2KiB", "1KiB", 2), "sizes: need 1 <= min_size <= max_size and "
     "factor >= 2", "sizes: need 1 <= --min-bytes <= --max-bytes and --factor >= 2"),
    ((["all_reduce"], ["fast"], "8B", "1KiB", 2), "interconnect must be among default, no-p2p, "
     "no-shm, no-p2p+no-shm, no-ib; got 'fast'", "--interconnect must be among")])
def test_the_plans_errors_name_fields_and_the_command_line_flags(args, said, printed):
    from dlbench.commands.common import as_flags
    from dlbench.jobs.runs import comm_plan
    with pytest.raises(ConfigError) as err:
        comm_plan(*args, device="cpu")
    assert str(err.value) == said and "--" not in said
    assert as_flags(err.value).startswith(printed)


def test_comm_cli_refuses_nccl_buffers_without_nccl(tmp_path):
    p = _dlbench("comm", "--device", "cpu", "--buffers", "nccl", "--db", str(tmp_path / "c.db"))
    assert p.returncode == 2 and "--buffers nccl allocates with ncclMemAlloc" in p.stderr
    assert "--backend nccl" in p.stderr and "--buffers torch" in p.stderr
    assert not (tmp_path / "c.db").exists()


def test_comm_cli_refuses_nccls_own_api_without_nccl(tmp_path):
    p = _dlbench("comm", "--device", "cpu", "--api", "nccl", "--db", str(tmp_path / "c.db"))
    assert p.returncode == 2 and "--api nccl calls NCCL itself" in p.stderr
    assert "--backend nccl" in p.stderr and "--api torch" in p.stderr
    assert not (tmp_path / "c.db").exists()


@pytest.mark.gpu
@pytest.mark.parametrize("timing", ["graph", "eager"])
def test_comm_on_nccl(timing):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    recs = launchers.torchrun(timeout_s=300).run_comm(["all_reduce"], [1 << 20], 2, {},
                                                    backend="nccl", timing=timing,
                                                    iters_per_sample=10 if timing == "graph"
                                                    else 1, probe=True, dtype="bfloat16")
    assert all(r.ok and r.wrong == 0 and r.config.backend == "nccl" for r in recs)
    assert all(r.algorithm != "unknown" and r.nccl_version for r in recs), \
        [(r.algorithm, r.algorithm_note) for r in recs]


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                "all_to_all"])
def test_nccls_own_api_is_exact_on_two_gpus(op):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    recs = launchers.torchrun(timeout_s=300).run_comm([op], [1 << 20], 2, {}, backend="nccl",
                                                    timing="graph", iters_per_sample=10,
                                                    dtype="bfloat16", api="nccl")
    assert recs and all(r.ok and r.wrong == 0 and r.config.api == "nccl" for r in recs), \
        [(r.error, r.wrong) for r in recs]
    # NCCL's own API calls every out-of-place row out of place, on the job's own stream
    assert all(r.stream == "side" and r.call_in_place == r.config.inplace for r in recs)


@pytest.mark.gpu
@pytest.mark.parametrize("api", ["torch", "nccl"])
def test_nccl_buffers_are_exact_on_two_gpus(api):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    recs = launchers.torchrun(timeout_s=300).run_comm(
        ["all_reduce", "all_gather"], [1 << 20], 2, {}, backend="nccl", timing="graph",
        iters_per_sample=10, api=api, buffers="nccl")
    assert len(recs) == 4 and all(r.ok and r.wrong == 0 and r.config.buffers == "nccl"
                                  for r in recs), [(r.error, r.wrong) for r in recs]


def test_report_gives_each_rank_count_and_profile_its_own_collectives_table():
    from dlbench.report.tables import tables_for

    def rec(ranks, profile, **kw):
        cfg = CommConfig(op="all_reduce", size_bytes=1 << 20, ranks=ranks, backend="nccl",
                         interconnect=profile, **kw)
        return CommRecord(config=cfg, env={}, rank_times_s=((1e-4,) * 3,) * ranks, count=1 << 18,
                          wrong=0)
    titles = [t.title for t in tables_for([rec(2, "default"), rec(4, "default"),
                                           rec(2, "no-p2p"),
                                           rec(2, "default", timing="graph", iters_per_sample=10)],
                                          "GPU")]
    assert titles == ["Collectives, 2 ranks, nccl, default, rotated",
                      "Collectives, 4 ranks, nccl, default, rotated",
                      "Collectives, 2 ranks, nccl, no-p2p, rotated",
                      "Collectives, 2 ranks, nccl, default, graph x10, rotated"]
    # a record from before rotation (one set of buffers): eager goes unsaid, as it did
    old = rec(2, "default")
    old = replace(old, config=replace(old.config, rotate=False))
    assert [t.title for t in tables_for([old], "GPU")] == ["Collectives, 2 ranks, nccl, default"]
