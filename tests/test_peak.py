"""dlbench peak: the CPU runs the same verbs and stores them; records, ceilings and the GPU path."""

import json

import pytest
import torch

from dlbench.records import record_from_dict
from dlbench.records.peak import PeakConfig, PeakRecord, ceilings
from dlbench.store import Store
from dlbench.workloads.peak import default_plan, measure_point, plan_points


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


def test_ceiling_is_the_best_median_over_shapes():
    def mm(shape, times):
        m, n, k = shape
        return PeakRecord(config=PeakConfig("matmul", precision="fp16", shape=shape), env={},
                          times_s=times, work=2.0 * m * n * k)
    small = mm((1000, 1000, 1000), (0.0002, 0.010, 0.010))  # one lucky iteration: 10 TFLOP/s
    big = mm((2000, 2000, 2000), (0.004, 0.004, 0.004))
    cop = PeakRecord(config=PeakConfig("copy", nbytes=10 ** 9), env={}, times_s=(0.5,),
                     work=2e9, unit="GB/s")
    c = ceilings([small, big, cop])
    assert c["fp16"]["label"] == "matmul fp16 2000x2000x2000"
    assert c["fp16"]["median"] == pytest.approx(4.0)
    assert c["fp16"]["best"] == pytest.approx(10.0)   # shown beside, never the ceiling
    assert c["copy"]["median"] == pytest.approx(4.0)


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
