"""dlbench peak: the CPU runs the same verbs and stores them; records, ceilings and the GPU path;
the sustained method (warm-up first, fixed iterations, the best mean) beside the burst one."""

import hashlib
import io
import json
import re
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
from fakes.pages import H, assert_says
from torch.utils._python_dispatch import TorchDispatchMode

MIB = 2 ** 20
ROOT = Path(__file__).resolve().parents[1]

from dlbench.cli import build_parser
from dlbench.records import record_from_dict
from dlbench.records.peak import PeakConfig, PeakRecord, ceilings
from dlbench.store import Store
from dlbench.env import env_key
from dlbench.report.tables import peak_table
from dlbench.workloads.peak import (
    GRID_PRECISIONS,
    ESTIMATE_TFLOPS,
    PUBLISHED_BEST,
    SUSTAINED_K,
    SUSTAINED_MN,
    PeakPlan,
    default_plan,
    mamf_grid,
    measure_point,
    plan_points,
    sustained_grid,
    sweep_estimate_s,
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
    assert c["fp16"]["method"] == "burst" and c["fp16"]["ceiling"] == c["fp16"]["median"]
    table = peak_table([small, big, mid, cop])
    row = next(r for r in table.rows if r[0] == "fp16")
    assert row == ("fp16", "burst", "-", "4.000 TFLOP/s", "matmul fp16 2000x2000x2000",
                   "10.00 TFLOP/s", "matmul fp16 1000x1000x1000", "3", "3")


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


# -- sustained and burst -----------------------------------------------------------------------
class TickClock:
    """A host clock that moves one second at every read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


class MatmulLog(TorchDispatchMode):
    """The (m, k, n) of every matrix product run under it, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, int, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket is torch.ops.aten.mm:
            (m, k), (_, n) = args[0].shape, args[1].shape
            self.shapes.append((m, k, n))
        return func(*args, **(kwargs or {}))


def sustained_cpu_plan(**kw) -> PeakPlan:
    fields = dict(shapes=((64, 32, 16), (32, 64, 16)), memory_bytes=MIB, transfer_bytes=0,
                  method="sustained", warmup_s=3.0, warmup_shape=(8, 8, 8), shape_warmup=1,
                  iters=4)
    return PeakPlan(**{**fields, **kw})


def test_the_sustained_sweep_warms_the_device_up_before_it_times_a_shape():
    plan = sustained_cpu_plan()
    first, second = plan_points(torch.device("cpu"), ["fp32"], plan, verbs=("matmul",))
    assert (first.method, first.warmup_s) == ("sustained", 3.0) and plan.opens_sweep(first)
    assert not plan.opens_sweep(second)
    clock, log = TickClock(), MatmulLog()
    with log:
        a = measure_point(first, {}, plan, clock=clock)
    # 3 s of warm-up on a clock that moves 1 s a read: two warm-up products, then the shape's
    # one untimed and four timed iterations, none before the warm-up's last product
    assert log.shapes == [(8, 8, 8)] * 2 + [(64, 16, 32)] * 5
    assert a.ok and a.warmup_times_s == (1.0,) and a.times_s == (1.0,) * 4
    assert a.iterations == 4 and a.method == "sustained" and a.config.warmup_s == 3.0
    log = MatmulLog()
    with log:  # the next shape of the sweep: the device is warm, no warm-up again
        b = measure_point(second, {}, plan, clock=TickClock())
    assert log.shapes == [(32, 16, 64)] * 5 and b.iterations == 4


def test_each_precision_opens_with_its_own_warm_up_on_a_product_of_that_precision():
    plan = sustained_cpu_plan(warmup_s=2.0, iters=2)
    pts = plan_points(torch.device("cpu"), ["fp32", "bf16"], plan, verbs=("matmul",))
    assert [plan.opens_sweep(p) for p in pts] == [True, False, True, False]
    dtypes = []

    class Dtypes(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket is torch.ops.aten.mm:
                dtypes.append((args[0].dtype, tuple(args[0].shape)))
            return func(*args, **(kwargs or {}))
    with Dtypes():
        recs = [measure_point(p, {}, plan, clock=TickClock()) for p in pts]
    assert all(r.ok and r.iterations == 2 for r in recs)
    warm = [i for i, (_, shape) in enumerate(dtypes) if shape == (8, 8)]
    assert [dtypes[i][0] for i in warm] == [torch.float32, torch.bfloat16]
    # each sweep's first product: one warm-up product (2 s), then two shapes of 1 + 2 iterations
    assert warm == [0, 1 + 2 * (plan.shape_warmup + plan.iters)]


def test_a_sustained_point_reports_its_mean_and_median_and_the_ceiling_is_the_best_mean():
    def mm(shape, times):
        m, n, k = shape
        cfg = PeakConfig("matmul", precision="bf16", shape=shape, device="cuda:0",
                         method="sustained", warmup_s=30.0)
        return PeakRecord(config=cfg, env={}, times_s=times, work=2.0 * m * n * k)
    # 2e12 FLOP an iteration: a median iteration of 1 s (2 TFLOP/s) but one slow one
    spiky = mm((1000, 1000, 1_000_000), (1.0, 1.0, 1.0, 5.0))
    steady = mm((1000, 2000, 600_000), (1.2, 1.2, 1.2, 1.2))   # 2.4e12 FLOP, 2 TFLOP/s flat
    assert spiky.median() == pytest.approx(2.0) and spiky.mean() == pytest.approx(2e12 / 2e12)
    assert steady.mean() == steady.median() == pytest.approx(2.0)
    assert spiky.headline() == spiky.mean() and spiky.ceiling_rate() == pytest.approx(1.0)
    c = ceilings([spiky, steady])["bf16"]
    assert c["method"] == "sustained" and c["warmup_s"] == 30.0
    assert c["ceiling"] == c["mean"] == pytest.approx(2.0)
    assert c["ceiling_label"] == c["mean_label"] == steady.config.label
    assert c["median"] == pytest.approx(2.0) and c["label"] == spiky.config.label  # first of two
    assert c["iterations"] == 4 and c["points"] == 2
    row = peak_table([spiky, steady]).rows[0]
    assert row[:5] == ("bf16", "sustained (30 s warm-up)", "2.000 TFLOP/s", "2.000 TFLOP/s",
                       f"mean: {steady.config.label}; median: {spiky.config.label}")


def test_a_store_of_both_methods_keeps_their_ceilings_apart():
    def mm(method, seconds):
        cfg = PeakConfig("matmul", precision="bf16", shape=(1000, 1000, 1000), method=method,
                         warmup_s=30.0 if method == "sustained" else 0.0)
        return PeakRecord(config=cfg, env={}, times_s=(seconds,) * 3, work=2e9)
    cop = PeakRecord(config=PeakConfig("copy", nbytes=10 ** 9), env={}, times_s=(0.5,),
                     work=2e9, unit="GB/s")
    c = ceilings([mm("burst", 0.002), mm("sustained", 0.004), cop])
    assert set(c) == {"bf16 (burst)", "bf16 (sustained)", "copy"}
    assert c["bf16 (burst)"]["ceiling"] == pytest.approx(1.0)
    assert c["bf16 (sustained)"]["ceiling"] == pytest.approx(0.5)
    assert c["copy"]["method"] == "burst"   # memory verbs are timed the burst way


def test_the_sustained_grid_covers_mamf_finders_shapes_and_its_best_h100_shape():
    grid = sustained_grid()
    assert (2048, 2048, 13312) in grid and (2048, 2048, 13312) in PUBLISHED_BEST
    assert set(PUBLISHED_BEST) <= set(grid) and len(grid) == len(set(grid)) == 442
    assert min(m for m, _, _ in grid) == min(n for _, n, _ in grid) == 2048
    assert max(k for *_, k in grid) == 16384
    plan = default_plan(torch.device("cuda"))
    assert plan.method == "sustained" and plan.grid == grid
    assert (plan.warmup_s, plan.iters) == (30.0, 100)
    pts = plan_points(torch.device("cpu"), ["bf16", "fp32"], plan, verbs=("matmul",))
    assert [p.shape for p in pts if p.precision == "bf16"] == list(grid)
    assert len([p for p in pts if p.precision == "fp32"]) == 5
    assert all(p.method == "sustained" and p.warmup_s == 30.0 for p in pts)


def test_help_states_the_sustained_sweeps_estimated_time():
    plan = default_plan(torch.device("cuda"))
    est = sweep_estimate_s(plan, "bf16")      # 30 s + 110 x 0.475 PFLOP at 750 TFLOP/s
    assert 95 < est < 105
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args(["peak", "--help"])
    text = " ".join(out.getvalue().split())
    assert f"about {round(est, -1):.0f} s a precision on an H100 (an estimate, not a" in text
    assert f"FLOPs at {ESTIMATE_TFLOPS:.0f} TFLOP/s" in text
    assert f"{len(sustained_grid())} shapes" in text and "2048x2048x13312" in text
    assert f"({plan.warmup_s:.0f} s on a GPU" in text and f"{plan.iters} timed" in text
    cpu = default_plan(torch.device("cpu"))
    assert f"{cpu.warmup_s:.0f} s on the CPU" in text and f"and {cpu.iters}" in text
    assert default_plan(torch.device("cpu"), quick=True).warmup_s < 1


def test_burst_is_todays_method_unchanged():
    plan = default_plan(torch.device("cuda"), method="burst")
    assert plan.method == "burst" and plan.grid == mamf_grid() and len(plan.grid) == 76
    assert (plan.grid_target_s, plan.warmup, plan.min_iters, plan.max_iters) == (0.1, 3, 10, 50)
    assert PUBLISHED_BEST[0] in plan.grid and (2048, 2048, 13312) not in plan.grid
    cpu = default_plan(torch.device("cpu"), quick=True, method="burst")
    pts = plan_points(torch.device("cpu"), ["fp32"], cpu, verbs=("matmul",))
    assert all(p.method == "burst" and p.warmup_s == 0.0 for p in pts)
    # stored as every point was before methods existed: no new field, the same key
    d = pts[0].to_dict()
    assert "method" not in d and "warmup_s" not in d
    old = hashlib.sha256(b"peak" + json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]
    assert pts[0].key() == old
    log = MatmulLog()
    with log:  # no device warm-up: the shape's own iterations alone, an adaptive count of them
        r = measure_point(pts[0], {}, cpu)
    assert set(log.shapes) == {(128, 128, 128)} and not cpu.opens_sweep(pts[0])
    assert len(r.warmup_times_s) == cpu.warmup and cpu.min_iters <= r.iterations <= cpu.max_iters
    assert r.headline() == r.median()


def test_a_record_stored_before_methods_existed_loads_as_burst(tmp_path):
    stored = {"kind": "peak", "config": {"verb": "matmul", "precision": "bf16",
                                         "shape": [8, 8, 8], "nbytes": 0, "pinned": None,
                                         "device": "cuda:0", "peer": None},
              "env": {}, "times_s": [1.0, 2.0, 3.0], "work": 1e12, "unit": "TFLOP/s"}
    r = record_from_dict(stored)
    assert r.method == "burst" and r.config.warmup_s == 0.0 and r.headline() == r.median()
    assert r.config.to_dict() == {**stored["config"], "shape": [8, 8, 8]}
    # a committed store written before: every peak point is burst, under the key it was stored by
    with H.open_store(ROOT / "results", H.H100, tmp_path) as store:
        recs = store.results(kind="peak")
        keys = {k for e in {env_key(r.env) for r in recs} for k in store.measured_keys(e)}
    assert recs and all(r.method == "burst" for r in recs)
    assert all(r.config.key() in keys for r in recs if r.ok)


def test_the_cli_measures_sustained_by_default_and_burst_on_request(tmp_path, capsys):
    from dlbench.cli import main
    db = tmp_path / "p.db"
    assert main(["peak", "--quick", "--device", "cpu", "--method", "sustained", "--verbs",
                 "matmul", "--db", str(db), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert main(["peak", "--quick", "--device", "cpu", "--method", "burst", "--verbs",
                 "matmul", "--precision", "fp32", "--db", str(db)]) == 0
    table = capsys.readouterr().out
    with Store(db) as store:
        runs = store.runs()
        sustained = store.results(kind="peak", run_id=runs[-1].run_id)
        burst = store.results(kind="peak", run_id=runs[0].run_id)
    quick = default_plan(torch.device("cpu"), quick=True)
    assert len(printed) == len(sustained) == 4 and all(r.ok for r in sustained)
    assert all(r.method == "sustained" and r.iterations == quick.iters
               and r.config.warmup_s == quick.warmup_s for r in sustained)
    assert {d["config"]["method"] for d in printed} == {"sustained"}
    assert len(burst) == 2 and all(r.method == "burst" and r.ok for r in burst)
    assert re.search(r"fp32 +│ burst +│", table) or re.search(r"fp32 +\| burst", table), table


def test_the_ceilings_page_states_the_sustained_method_as_the_code_runs_it():
    page = (ROOT / "docs/ceilings.md").read_text()

    def listed(values):
        return f"{', '.join(map(str, values[:-1]))} and {values[-1]}"
    gpu, cpu = default_plan(torch.device("cuda")), default_plan(torch.device("cpu"))
    grid = sustained_grid()
    assert_says(page, f"sweep {len(grid)} shapes that cover mamf-finder's shape space, coarser "
                      f"than its searches: M and N each of {listed(SUSTAINED_MN)}, K each of "
                      f"{listed(SUSTAINED_K)}")
    assert_says(page, f"plus the published best shapes: {'x'.join(map(str, PUBLISHED_BEST[0]))} "
                      f"(below) and {'x'.join(map(str, PUBLISHED_BEST[1]))}, mamf-finder's best")
    assert_says(page, f"(an {gpu.warmup_shape[0]} cube on a GPU) run back to back for a fixed "
                      f"time, {gpu.warmup_s:.0f} s on a GPU")
    assert_says(page, f"every shape runs {gpu.shape_warmup} untimed and {gpu.iters} timed "
                      "iterations")
    assert_says(page, f"On the CPU the warm-up is {cpu.warmup_s:.0f} s")
    assert_says(page, f"a shape gets {cpu.shape_warmup} untimed and {cpu.iters} timed iterations")
    est = sweep_estimate_s(gpu, "bf16")
    assert_says(page, f"One precision takes about {round(est, -1):.0f} s on an H100, an "
                      f"estimate, not a measurement: the warm-up's {gpu.warmup_s:.0f} s and the "
                      f"grid's FLOPs at {ESTIMATE_TFLOPS:.0f} TFLOP/s ({gpu.shape_warmup + gpu.iters} iterations "
                      "a shape)")
    # the sustained GPU ceilings measured since are on the page, checked against their store
    # by tests/test_2x_h100_page.py; the sentence saying there were none is gone
    assert "No sustained ceiling of a GPU has been measured yet" not in " ".join(page.split())
