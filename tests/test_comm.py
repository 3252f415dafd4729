"""Collective bandwidth: nccl-tests' factors, sizes, and the #wrong check on a 2-process gloo job."""

import pytest
import torch

from dlbench.launch.torchrun import TorchrunLauncher
from dlbench.measure.bandwidth import algbw, busbw_factor
from dlbench.records import record_from_dict
from dlbench.records.comm import CommConfig, CommRecord
from dlbench.report.tables import comm_table
from dlbench.workloads.comm import element_count, expected, parse_size, sizes_between


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


def test_comm_on_gloo_is_correct_and_a_corrupted_rank_fails_its_rows():
    ops = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"]
    recs = TorchrunLauncher(timeout_s=120).run_comm(ops, [64, 4096], 2, {}, iters=3, warmup=1)
    assert {r.config.op for r in recs} == set(ops)
    assert len(recs) == 5 * 2 * 2 - 2                   # all_to_all has no in-place row
    assert all(r.ok and r.wrong == 0 and r.busbw() > 0 for r in recs), \
        [(r.config.label, r.error) for r in recs if not r.ok]
    assert all(len(r.rank_times_s) == 2 and len(r.rank_times_s[0]) == 3 for r in recs)
    t = comm_table(recs)
    assert len(t.rows) == 10 and t.rows[0][:2] == ("all_reduce", "64 B")

    bad = TorchrunLauncher(timeout_s=120).run_comm(["all_reduce", "all_gather"], [64], 2, {},
                                                   iters=2, warmup=0, corrupt_rank=1)
    for r in bad:
        assert r.status == "error" and r.error_type == "wrong_result" and r.wrong > 0
        assert r.headline() is None
    # one wrong input element spoils one element of the sum on both ranks
    assert next(r for r in bad if r.config.op == "all_reduce").wrong == 2
    # all_gather: the element lands in rank 1's slot on both ranks
    assert next(r for r in bad if r.config.op == "all_gather").wrong == 2


def test_comm_cli(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path
    src = str(Path(__file__).resolve().parents[1] / "src")
    env = dict(os.environ, PYTHONPATH=src, OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, "-m", "dlbench", "comm", "--device", "cpu", "--gpus", "2",
                        "--op", "all_reduce", "--min", "8B", "--max", "32B", "--iters", "2",
                        "--warmup", "0", "--json", "-q", "--db", str(tmp_path / "c.db")],
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    docs = json.loads(p.stdout)
    assert [d["config"]["size_bytes"] for d in docs] == [8, 8, 16, 16, 32, 32]
    assert all(d["wrong"] == 0 and d["busbw"] == pytest.approx(d["algbw"]) for d in docs)


@pytest.mark.gpu
def test_comm_on_nccl():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    recs = TorchrunLauncher(timeout_s=300).run_comm(["all_reduce"], [1 << 20], 2, {},
                                                    backend="nccl")
    assert all(r.ok and r.config.backend == "nccl" for r in recs)


def test_report_gives_each_rank_count_and_profile_its_own_collectives_table():
    from dlbench.records.comm import CommConfig, CommRecord
    from dlbench.report.tables import tables_for

    def rec(ranks, profile):
        cfg = CommConfig(op="all_reduce", size_bytes=1 << 20, ranks=ranks, backend="nccl",
                         interconnect=profile)
        return CommRecord(config=cfg, env={}, rank_times_s=((1e-4,) * 3,) * ranks, count=1 << 18,
                          wrong=0)
    titles = [t.title for t in tables_for([rec(2, "default"), rec(4, "default"),
                                           rec(2, "no-p2p")], "GPU")]
    assert titles == ["Collectives, 2 ranks, nccl, default", "Collectives, 4 ranks, nccl, default",
                      "Collectives, 2 ranks, nccl, no-p2p"]
