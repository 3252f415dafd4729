"""FLOP counts of known layers, MFU arithmetic on known numbers, the roofline and its plot."""

from dataclasses import replace

import pytest
import torch

from dlbench.measure import mfu as mfumod
from dlbench.measure.roofline import Roofs, attainable, bytes_per_step, point_for, ridge
from dlbench.records.peak import PeakConfig, PeakRecord
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord

H100_ENV = {"accelerator": "cuda", "gpu_count": 1, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}]}


def _count(module, x, train):
    from torch.utils.flop_counter import FlopCounterMode

    from dlbench.measure.flops import _FLOP_OVERRIDES
    with FlopCounterMode(display=False, custom_mapping=_FLOP_OVERRIDES) as fc:
        out = module(x)
        if train:
            out.sum().backward()
    return fc.get_total_flops()


def test_linear_flops_exact():
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(8, 64, requires_grad=True)
    assert _count(lin, x, train=False) == 2 * 8 * 64 * 32
    # backward: input gradient and weight gradient, each as much as the forward
    assert _count(lin, x, train=True) == 3 * 2 * 8 * 64 * 32


def test_conv2d_flops_exact_including_grouped_backward():
    conv = torch.nn.Conv2d(8, 16, kernel_size=3, padding=1, bias=False)
    x = torch.randn(2, 8, 10, 10, requires_grad=True)
    fwd = 2 * 2 * 10 * 10 * 16 * 8 * 3 * 3
    assert _count(conv, x, train=False) == fwd
    assert _count(conv, x, train=True) == 3 * fwd
    dw = torch.nn.Conv2d(8, 8, kernel_size=3, padding=1, groups=8, bias=False)
    dfwd = 2 * 2 * 10 * 10 * 8 * 1 * 3 * 3
    assert _count(dw, x, train=True) == 3 * dfwd   # not groups-times the weight gradient


def _rec(env, precision="bf16", flops=1e12, step=0.01, batch=10, ok=True):
    cfg = ThroughputConfig(model="resnet50", batch_size=batch, precision=precision)
    if not ok:
        return ThroughputRecord(config=cfg, env=env, status="error", error_type="oom", error="OOM")
    return ThroughputRecord(config=cfg, env=env, step_times_s=(step,) * 10, samples_per_step=batch,
                            flops_per_sample=int(flops), stop_reason="converged")


def test_mfu_against_datasheet_and_measured_peak():
    r = _rec(H100_ENV)                       # 10 samples x 1e12 FLOP / 0.01 s = 1000 TFLOP/s
    assert r.achieved_tflops() == pytest.approx(1000.0)
    peak = PeakRecord(config=PeakConfig("matmul", precision="bf16", shape=(8, 8, 8)), env=H100_ENV,
                      times_s=(1.0, 1.0, 1.0), work=800e12, run_id="r1")   # 800 TFLOP/s
    peaks = mfumod.measured_peaks([peak])
    m = mfumod.mfu(r, peaks)
    assert m.gpu == "h100-sxm" and m.datasheet_peak_tflops == 989.5
    assert m.datasheet == pytest.approx(1000 / 989.5)
    assert m.measured_peak_tflops == pytest.approx(800.0)
    assert m.measured == pytest.approx(1.25)
    # fp32 is compared with the non-tensor FP32 peak, tf32 with the TF32 tensor one
    assert mfumod.mfu(_rec(H100_ENV, "fp32", flops=6.7e9), peaks).datasheet == pytest.approx(0.1)
    assert mfumod.mfu(_rec(H100_ENV, "tf32", flops=4.945e11), peaks).datasheet == pytest.approx(1.0)


def test_latest_peak_run_of_the_device_wins():
    def pk(run, tf):
        return PeakRecord(config=PeakConfig("matmul", precision="bf16", shape=(8, 8, 8)),
                          env=H100_ENV, times_s=(1.0,), work=tf * 1e12, run_id=run)
    peaks = mfumod.measured_peaks([pk("old", 900), pk("old", 100), pk("new", 700)])
    assert peaks == {"NVIDIA H100 80GB HBM3": {"bf16": 700.0}}


def test_mfu_is_none_where_it_would_mislead():
    cpu = mfumod.mfu(_rec({"accelerator": "cpu", "gpus": []}))
    assert cpu.datasheet is None and "CPU" in cpu.datasheet_reason
    # --device cpu on a GPU machine: the environment names the H100, the result is the CPU's.
    on_gpu_host = _rec(H100_ENV)
    on_gpu_host = replace(on_gpu_host, config=replace(on_gpu_host.config, device="cpu"))
    host = mfumod.mfu(on_gpu_host, {mfumod.device_key(H100_ENV): {"bf16": 800.0}})
    assert host.datasheet is None and host.measured is None and "CPU" in host.datasheet_reason
    unknown = mfumod.mfu(_rec({"accelerator": "cuda", "gpus": [{"name": "NVIDIA H100 NVL"}]}))
    assert unknown.datasheet is None and "not in the spec table" in unknown.datasheet_reason
    no_tensor = mfumod.mfu(_rec({"accelerator": "cuda", "gpus": [{"name": "NVIDIA GeForce GTX 1080 Ti"}]},
                                precision="fp16"))
    assert no_tensor.datasheet is None and "no fp16 peak" in no_tensor.datasheet_reason
    failed = mfumod.mfu(_rec(H100_ENV, ok=False))
    assert failed.achieved_tflops is None and "oom" in failed.datasheet_reason
    assert "dlbench peak" in mfumod.mfu(_rec(H100_ENV)).measured_reason


def test_throughput_table_shows_datasheet_mfu():
    from dlbench.report import tables
    t = tables.throughput_table([_rec(H100_ENV, step=0.02)])
    tflops, mfu = t.columns.index("TFLOP/s"), t.columns.index("MFU")
    assert t.rows[0][tflops] == "500" and t.rows[0][mfu] == "50.5%"   # 500 / 989.5


def test_roofline_arithmetic_and_byte_model():
    assert ridge(800.0, 3000.0) == pytest.approx(266.67, rel=1e-3)
    assert attainable(10.0, 800.0, 3000.0) == pytest.approx(30.0)
    assert attainable(1e4, 800.0, 3000.0) == 800.0
    from dlbench.measure.flops import params_count
    from dlbench.measure.roofline import activation_elements
    from dlbench.models import get_model
    spec = get_model("resnet50")
    w, a = 4 * params_count(spec), activation_elements(spec)
    assert a > 0
    assert bytes_per_step(spec, "eval", "fp32", 4) == w + 2 * a * 4 * 4
    assert bytes_per_step(spec, "train", "bf16", 4) == 3 * w + 4 * a * 4 * 2


def test_roofline_plot_files(tmp_path):
    pytest.importorskip("matplotlib")
    from dlbench.measure.roofline import RooflinePoint
    from dlbench.report.plots import roofline_plot
    roofs = Roofs("NVIDIA H100 80GB HBM3", {"bf16": 795.0, "fp32": 51.5}, 3000.0, "measured")
    pts = [RooflinePoint("resnet50 train b256", "bf16", "train", 95.0, 103.0, "memory"),
           RooflinePoint("vgg16 train b512", "bf16", "train", 400.0, 311.0, "compute")]
    paths = roofline_plot(pts, roofs, tmp_path / "roof")
    png, svg = (tmp_path / "roof.png"), (tmp_path / "roof.svg")
    assert paths == [png, svg]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
    text = svg.read_text()
    assert text.lstrip().startswith("<?xml") and "<svg" in text and "resnet50" in text


def test_point_for_a_record_uses_counted_flops():
    from dlbench.measure.flops import count_flops
    from dlbench.models import get_model, list_models
    name = next(m.name for m in list_models(include_test=True) if m.test_only)
    spec = get_model(name)
    f = count_flops(spec, "eval")
    cfg = ThroughputConfig(model=name, batch_size=4, mode="eval", precision="fp32")
    r = ThroughputRecord(config=cfg, env={}, step_times_s=(0.001,) * 5, samples_per_step=4,
                         flops_per_sample=f, stop_reason="converged")
    roofs = Roofs("x", {"fp32": 1.0}, 1.0, "test")    # ridge at 1000 FLOP/byte
    p = point_for(r, roofs)
    assert p.intensity == pytest.approx(f * 4 / bytes_per_step(spec, "eval", "fp32", 4))
    assert p.achieved_tflops == pytest.approx(f * 4 / 0.001 / 1e12)
    assert p.bound == ("memory" if p.intensity < 1000 else "compute")


def test_roofline_cli_writes_table_and_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from dlbench.cli import main
    from dlbench.measure.flops import count_flops
    from dlbench.models import get_model
    from dlbench.store import Store
    db = tmp_path / "r.db"
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=8, mode="eval", precision="fp32")
    tput = ThroughputRecord(config=cfg, env=H100_ENV, step_times_s=(0.001,) * 5, samples_per_step=8,
                            flops_per_sample=count_flops(get_model("tiny_cnn"), "eval"),
                            stop_reason="converged", run_id="t1")
    peak = PeakRecord(config=PeakConfig("matmul", precision="fp32", shape=(8, 8, 8)), env=H100_ENV,
                      times_s=(1.0,), work=50e12, run_id="p1")
    with Store(db) as store:
        for run, rec in (("p1", peak), ("t1", tput)):
            store.start_run(run, "test", H100_ENV, "k", "H100")
            store.add(rec, "k")
    assert main(["roofline", "--db", str(db), "-o", str(tmp_path / "roof")]) == 0
    out = capsys.readouterr().out
    assert "tiny_cnn" in out and "roofs (measured + datasheet (H100 SXM))" in out
    assert (tmp_path / "roof.png").stat().st_size > 0 and (tmp_path / "roof.svg").stat().st_size > 0


def test_mfu_above_the_peak_is_kept_and_explained():
    # 10 samples x 1e12 FLOP / 0.01 s = 1000 TFLOP/s against a measured 800: above 100%.
    r = _rec(H100_ENV)
    m = mfumod.mfu(r, {mfumod.device_key(H100_ENV): {"bf16": 800.0}})
    assert m.measured == pytest.approx(1.25) and "Winograd" in m.measured_reason
    assert m.datasheet == pytest.approx(1000 / 989.5) and "Winograd" in m.datasheet_reason


def test_a_cards_own_ceiling_counts_whatever_the_hosts_label():
    """A peak run that saw four cards keys its ceiling '4x ...'; a run limited to two of them
    (CUDA_VISIBLE_DEVICES) is '2x ...'. Measured on one of the run's own cards, the ceiling is
    that card's, so the run gets it; a ceiling of a card the run did not use, under another
    label, stays out."""
    from dlbench.report.cards import own_card_peaks

    def env(*uuids):
        return {"accelerator": "cuda", "gpu_count": len(uuids),
                "gpus": [{"name": "NVIDIA H100 80GB HBM3", "uuid": u} for u in uuids]}

    def peak(e, tf, run):
        return PeakRecord(config=PeakConfig("matmul", precision="bf16", shape=(8, 8, 8)), env=e,
                          times_s=(1.0,), work=tf * 1e12, run_id=run)
    r = _rec(env("A", "B"))
    mine = own_card_peaks(r, [peak(env("A", "B", "C", "D"), 800, "p1")])
    assert mine[mfumod.device_key(r.env)] == {"bf16": 800.0}
    assert mfumod.mfu(r, mine).measured == pytest.approx(1000 / 800)
    other = own_card_peaks(r, [peak(env("C", "D", "A", "B"), 700, "p2")])
    assert mfumod.device_key(r.env) not in other
