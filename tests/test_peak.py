"""dlbench peak: the CPU runs the same verbs and stores them; records, ceilings and the GPU path."""

import json

import pytest
import torch

MIB = 2 ** 20

from dlbench.records import record_from_dict
from dlbench.records.peak import PeakConfig, PeakRecord, ceilings
from dlbench.store import Store
from dlbench.report.tables import peak_table
from dlbench.workloads.peak import (
    GRID_PRECISIONS,
    PUBLISHED_BEST,
    PeakPlan,
    default_plan,
    mamf_grid,
    measure_point,
    plan_points,
)


def test_peak_cli_on_cpu_runs_quick_and_stores(tmp_path, capsys):
    from dlbench.cli import main
    db = tmp_path / "p.db"
    rc = main(["peak", "--quick", "--device", "cpu", "--db", str(db), "--json"])
    assert rc == 0
    printed = json.loads(capsys.readouterr().out)
    with Store(db) as store:
        recs = store.results(kind="peak")
        runs = store.runs()
    assert len(runs) == 1 and runs[0].suite == "peak" and runs[0].status == "done"
    assert len(recs) == len(printed) > 0
    labels = {r.config.label for r in recs}
    assert {"matmul fp32 128x128x128", "matmul bf16 256x256x256", "copy 16 MiB", "read 16 MiB",
            "write 16 MiB"} <= labels
    for r in recs:
        assert isinstance(r, PeakRecord) and r.ok, r.error
        assert r.best() >= r.median() > 0
    fp32 = next(r for r in recs if r.config.label == "matmul fp32 256x256x256")
    assert fp32.work == 2 * 256 ** 3 and fp32.unit == "TFLOP/s"


def test_cpu_refuses_tf32_as_an_unsupported_row(cpu_env):
    plan = default_plan(torch.device("cpu"), quick=True)
    rec = measure_point(PeakConfig("matmul", precision="tf32", shape=(64, 64, 64)), cpu_env, plan)
    assert rec.status == "error" and rec.error_type == "unsupported" and "tf32" in rec.error
    assert rec.median() is None


def test_plan_on_cpu_has_no_transfers():
    plan = default_plan(torch.device("cpu"), quick=True)
    pts = plan_points(torch.device("cpu"), ["fp32"], plan)
    assert [p.verb for p in pts] == ["matmul", "matmul", "copy", "read", "write"]


def test_record_rates_and_round_trip():
    cfg = PeakConfig("matmul", precision="bf16", shape=(1000, 1000, 1000), device="cuda:0")
    rec = PeakRecord(config=cfg, env={}, times_s=(0.004, 0.002, 0.003), work=2e9)
    assert rec.best() == pytest.approx(1.0)          # 2e9 FLOP / 2 ms = 1 TFLOP/s
    assert rec.median() == pytest.approx(2e9 / 0.003 / 1e12)
    back = record_from_dict(json.loads(json.dumps(rec.to_dict())))
    assert back == rec and back.config.key() == cfg.key()


def test_ceiling_is_the_best_median_over_shapes_and_the_best_iteration_has_its_own_shape():
    def mm(shape, times):
        m, n, k = shape
        return PeakRecord(config=PeakConfig("matmul", precision="fp16", shape=shape), env={},
                          times_s=times, work=2.0 * m * n * k)
    small = mm((1000, 1000, 1000), (0.0002, 0.010, 0.010))  # one lucky iteration: 10 TFLOP/s
    big = mm((2000, 2000, 2000), (0.004, 0.004, 0.004))
    mid = mm((1000, 2000, 1000), (0.002, 0.002))             # median 2 TFLOP/s
    cop = PeakRecord(config=PeakConfig("copy", nbytes=10 ** 9), env={}, times_s=(0.5,),
                     work=2e9, unit="GB/s")
    c = ceilings([small, big, mid, cop])
    assert c["fp16"]["label"] == "matmul fp16 2000x2000x2000"
    assert c["fp16"]["median"] == pytest.approx(4.0)
    assert c["fp16"]["best"] == pytest.approx(10.0)   # shown beside, never the ceiling
    assert c["fp16"]["best_label"] == "matmul fp16 1000x1000x1000"
    assert c["fp16"]["points"] == 3 and c["fp16"]["iterations"] == 3
    assert c["copy"]["median"] == pytest.approx(4.0) and c["copy"]["points"] == 1
    table = peak_table([small, big, mid, cop])
    row = next(r for r in table.rows if r[0] == "fp16")
    assert row == ("fp16", "4.000 TFLOP/s", "matmul fp16 2000x2000x2000", "10.00 TFLOP/s",
                   "matmul fp16 1000x1000x1000", "3", "3")


def test_the_gpu_plan_sweeps_a_mamf_grid_for_the_tensor_core_precisions():
    grid = mamf_grid()
    assert len(grid) == len(set(grid)) == 76 and PUBLISHED_BEST[0] in grid
    assert {m for m, _, _ in grid} >= {4096, 8192, 16384} and {k for *_, k in grid} >= {2048, 8192}
    plan = PeakPlan(shapes=((64, 64, 64),), memory_bytes=MIB, transfer_bytes=0, grid=grid,
                    grid_precisions=GRID_PRECISIONS)
    pts = plan_points(torch.device("cpu"), ["fp32", "bf16"], plan, verbs=("matmul",))
    assert [p.shape for p in pts if p.precision == "fp32"] == [(64, 64, 64)]
    assert [p.shape for p in pts if p.precision == "bf16"] == list(grid)
    assert plan.target_for(pts[-1]) == plan.grid_target_s < plan.target_for(pts[0])


def test_a_grid_point_is_measured_for_its_own_shorter_time():
    # a real (small) grid on the CPU: each point measured, the ceiling is one of them
    grid = ((64, 64, 64), (128, 64, 96), (96, 128, 64))
    plan = PeakPlan(shapes=((32, 32, 32),), memory_bytes=MIB, transfer_bytes=0, warmup=1,
                    min_iters=3, max_iters=5, target_s=0.05, grid=grid, grid_precisions=("bf16",))
    recs = [measure_point(c, {}, plan) for c in plan_points(torch.device("cpu"), ["bf16"], plan,
                                                             verbs=("matmul",))]
    assert len(recs) == 3 and all(r.ok and 3 <= len(r.times_s) <= 5 for r in recs)
    c = ceilings(recs)["bf16"]
    assert c["points"] == 3 and c["median"] == max(r.median() for r in recs)
    assert c["best"] == max(r.best() for r in recs) >= c["median"]


@pytest.mark.gpu
def test_peak_on_gpu_quick(tmp_path):
    from dlbench.env import capture_environment
    dev = torch.device("cuda", 0)
    plan = default_plan(dev, quick=True)
    env = capture_environment(include_topology=False)
    recs = [measure_point(c, env, plan) for c in plan_points(dev, ["fp32", "bf16"], plan)]
    ok = {r.config.label: r for r in recs if r.ok}
    assert any(k.startswith("matmul bf16") for k in ok)
    assert ok["copy 256 MiB"].median() > 50          # GB/s: any GPU of the last decade
    assert "h2d pinned 64 MiB" in ok and "d2h pageable 64 MiB" in ok
