"""The report's charts: each drawn exactly when its data exists, user text escaped, no resource
from elsewhere, and the whole page opened in real headless Chromium (skipped without one).

Every record is built here with the real record classes and known numbers; a made-up store holds
one of every kind the charts draw (throughput with telemetry and an OOM, scaling on two
interconnect profiles, maxbatch, peak), so the whole report renders on a CPU in seconds.
"""

from __future__ import annotations

import random
import re

import pytest
from fakes.cli import script

from dlbench.store import RunInfo
from dlbench.records.maxbatch import MaxBatchConfig, MaxBatchRecord, Probe
from dlbench.records.peak import PeakConfig, PeakRecord
from dlbench.records.scaling import ScalingConfig, ScalingRecord
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report import charts
from dlbench.report import html as report_html
from dlbench.store import Store
from dlbench.env import env_key
from dlbench.telemetry.summary import finish

browser = script("tools/browser.py")  # headless Chromium (a repository script, not in dlbench)

EVIL = "<script>alert(1)</script>"
GIB = 1024 ** 3
H100 = {"accelerator": "cuda", "gpu_count": 1, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}],
        "packages": {"torch": "2.11.0"}, "hostname": "gpu-host"}
CPU = {"accelerator": "cpu", "cpu_model": "Test CPU", "cpu_logical_cores": 2,
       "packages": {"torch": "2.11.0"}, "hostname": "cpu-host"}
RUN = "run-made-up"
COMMAND = f"dlbench run --suite made-up --tag '{EVIL}'"
COMMANDS = {RUN: COMMAND}


# -- records with known numbers -------------------------------------------------------------------

def steps(mean_s: float, n: int = 40) -> tuple[float, ...]:
    """``n`` step times around ``mean_s`` (2% spread), the same every run."""
    rng = random.Random(n * mean_s)
    return tuple(mean_s * (1.0 + rng.gauss(0.0, 0.02)) for _ in range(n))


def thr(model="tiny_cnn", batch=16, step=0.01, env=H100, precision="fp32", mode="train",
        alloc=None, flops=2_000_000, **kw):
    """A finished throughput result: ``batch`` samples every ``step`` seconds."""
    cfg = ThroughputConfig(model=model, batch_size=batch, precision=precision, mode=mode,
                           **{k: kw.pop(k) for k in ("method",) if k in kw})
    memory = {"allocated_peak_bytes": alloc, "device_total_bytes": 80 * GIB} if alloc else {}
    return ThroughputRecord(config=cfg, env=env, step_times_s=steps(step),
                            samples_per_step=batch, unit="images", flops_per_sample=flops,
                            memory=memory, stop_reason="converged", run_id=RUN, **kw)


def oom(model="tiny_cnn", batch=128, env=H100):
    return ThroughputRecord(config=ThroughputConfig(model=model, batch_size=batch), env=env,
                            status="error", error_type="oom", error="CUDA out of memory",
                            run_id=RUN)


def telemetry(power=(70.0, 300.0, 310.0, 305.0, 120.0)):
    """A GPU series of five samples, 0.5 s apart, the window from 0.4 s to 1.6 s."""
    n = len(power)
    series = {"t_s": [0.5 * i for i in range(n)], "power_w": list(power),
              "energy_mj": [None] * n, "util_gpu_pct": [0, 98, 99, 97, 5],
              "util_mem_pct": [0, 40, 41, 40, 0], "mem_used_bytes": [GIB] * n,
              "temp_c": [40, 60, 65, 66, 50], "sm_clock_mhz": [345, 1980, 1980, 1755, 345],
              "mem_clock_mhz": [2619] * n, "throttle_reasons": [0] * n,
              "pcie_tx_kbs": [None] * n, "pcie_rx_kbs": [None] * n,
              "nvlink_tx_kib": [None] * n, "nvlink_rx_kib": [None] * n}
    raw = {"marks": {"warmup_start": 0.2, "window_start": 0.4, "window_end": 1.6},
           "gpus": [{"index": 0, "name": "NVIDIA H100 80GB HBM3", "series": series}],
           "host": None}
    return finish(raw, samples=1000)


def host_telemetry():
    raw = {"marks": {"window_start": 0.1, "window_end": 0.9}, "gpus": [],
           "host": {"series": {"t_s": [0.0, 0.5, 1.0], "cpu_pct": [50, 99, 60],
                               "proc_cpu_pct": [45, 98, 50], "rss_bytes": [GIB] * 3,
                               "mem_used_bytes": [2 * GIB] * 3}}}
    return finish(raw, samples=100)


def scaling(gpus, profile="default", step=0.1, ok=True):
    base = ThroughputConfig(model="tiny_cnn", batch_size=16)
    cfg = ScalingConfig(base=base, gpus=gpus, interconnect=profile)
    if not ok:
        return ScalingRecord(config=cfg, env=H100, status="error", error_type="oom",
                             error="CUDA out of memory", run_id=RUN)
    return ScalingRecord(config=cfg, env=H100, rank_step_times_s=(steps(step, 20),) * gpus,
                         rank_samples_per_step=(16,) * gpus, unit="images", run_id=RUN)


def maxbatch():
    probes = (Probe(64, "ok", 20 * GIB, 22 * GIB, 80 * GIB),
              Probe(128, "ok", 40 * GIB, 42 * GIB, 80 * GIB),
              Probe(256, "oom", error="CUDA out of memory"),
              Probe(192, "ok", 60 * GIB, 62 * GIB, 80 * GIB))
    cfg = MaxBatchConfig(base=ThroughputConfig(model="tiny_mlp", batch_size=1))
    return MaxBatchRecord(config=cfg, env=H100, best_batch=192, first_oom_batch=256,
                          probes=probes, run_id=RUN)


def peak(env=H100, precision="fp32", tflops=50.0):
    return PeakRecord(config=PeakConfig("matmul", precision=precision, shape=(8, 8, 8),
                                        device="cuda:0" if env is H100 else "cpu"),
                      env=env, times_s=(1.0, 1.0, 1.0), work=tflops * 1e12, run_id=RUN)


def every_kind():
    """One of everything the charts draw, on a made-up H100."""
    return [thr(batch=16, alloc=2 * GIB), thr(batch=32, alloc=4 * GIB, telemetry=telemetry()),
            thr(batch=64, alloc=8 * GIB), oom(batch=128),
            thr(model="vgg16", batch=16, mode="eval", method="fwd-bwd", flops=None),
            scaling(1), scaling(2, step=0.105), scaling(4, step=0.11), scaling(8, ok=False),
            scaling(2, "no-p2p", step=0.12), scaling(4, "no-p2p", step=0.13),
            maxbatch(), peak()]


EXPECTED_TITLES = ("Throughput per configuration", "Throughput against batch size",
                   "Memory and throughput against batch size", "Scaling: throughput by GPU count",
                   "Interconnect A/B", "MFU on NVIDIA H100 80GB HBM3",
                   "Roofline: NVIDIA H100 80GB HBM3", "Your GPU among published GPUs",
                   "Telemetry of tiny_cnn b32 fp32 train")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The report of a made-up store holding every kind, written by ``dlbench report``."""
    from dlbench.cli import main
    tmp = tmp_path_factory.mktemp("store")
    db, out = tmp / "made-up.db", tmp / "report.html"
    with Store(db) as s:
        s.start_run(RUN, COMMAND, H100, env_key(H100), "NVIDIA H100 80GB HBM3", tag=EVIL)
        for r in every_kind():
            s.add(r, env_key(H100))
        s.finish_run(RUN, "done")
    assert main(["report", "--db", str(db), "-o", str(out), "--title", f"report {EVIL}"]) == 0
    return out.read_text(encoding="utf-8")


def captions(text):
    return re.findall(r"<figcaption>(.*?)</figcaption>", text, re.S)


def are_expected(caps) -> bool:
    """One caption per expected chart, in the report's order."""
    return len(caps) == len(EXPECTED_TITLES) and all(
        c.startswith(t) for c, t in zip(caps, EXPECTED_TITLES))


# -- the whole page -------------------------------------------------------------------------------

def test_made_up_store_renders_every_chart_once(page):
    """Every kind went through the store and back, and each chart is drawn once."""
    caps = captions(page)
    assert are_expected(caps), caps
    assert page.count("<svg") == len(caps)
    # every caption names the command that produced the data, escaped
    assert all("Data from: <code>dlbench run --suite made-up --tag" in c for c in caps)


def test_page_is_self_contained_and_ids_unique(page):
    assert not re.search(r"<script\b", page, re.I)
    assert not re.search(r"https?:", re.sub(r'xmlns(:\w+)?="[^"]*"', "", page))
    assert "@import" not in page and "url(" not in page.replace("url(#", "")
    # links inside the SVGs point at the page itself only
    for ref in re.findall(r'(?:href|src)\s*=\s*"([^"]*)"', page, re.I):
        assert ref.startswith("#"), ref
    ids = re.findall(r'\bid="([^"]+)"', page)
    assert ids and len(ids) == len(set(ids))
    for ref in re.findall(r'(?:href="|url\()#([^")]+)', page):
        assert ref in ids, ref  # prefixing kept every reference pointing at its definition


def test_user_text_is_escaped_in_titles_and_captions():
    evil_gpu = dict(H100, gpus=[{"name": "NVIDIA H100 80GB HBM3 <img src=x onerror=alert(1)>"}])
    recs = [thr(env=evil_gpu, telemetry=telemetry()), thr(batch=32, env=evil_gpu)]
    runs = [RunInfo(run_id=RUN, command=COMMAND, tag=EVIL)]
    text = report_html.render_html(recs, runs, title=EVIL)
    assert "<img" not in text and "<script" not in text
    caps = captions(text)
    mfu = next(c for c in caps if c.startswith("MFU on"))
    assert "&lt;img src=x onerror=alert(1)&gt;" in mfu  # the device name, as text
    assert any(c.startswith("Telemetry of") and "&lt;img" in c for c in caps)
    assert all("--tag &#x27;&lt;script&gt;alert(1)&lt;/script&gt;&#x27;" in c for c in caps)


# -- each chart exactly when its data exists ------------------------------------------------------

def titles(builder, recs):
    return [c.title for c in builder(recs, COMMANDS)]


def test_throughput_and_batch_charts():
    assert titles(charts.throughput_charts, [scaling(1), maxbatch(), peak()]) == []
    assert len(titles(charts.throughput_charts, [thr(), oom()])) == 1
    assert titles(charts.batch_charts, [thr(), thr(model="tiny_mlp")]) == []  # one batch each
    assert len(titles(charts.batch_charts, [thr(), thr(batch=32)])) == 1


def test_memory_chart_needs_two_batches_with_memory():
    assert titles(charts.memory_charts, [thr(alloc=GIB), oom()]) != []
    assert titles(charts.memory_charts, [maxbatch()]) != []        # the probes alone
    assert titles(charts.memory_charts, [thr(alloc=GIB)]) == []    # one batch
    assert titles(charts.memory_charts, [thr(), thr(batch=32), oom()]) == []  # CPU: no peak
    assert titles(charts.memory_charts, [oom(), oom(batch=256)]) == []       # nothing fitted
    from dlbench.report.charts.memory import memory_points
    pts, total, _ = memory_points([maxbatch(), thr(model="tiny_mlp", batch=192, alloc=61 * GIB)])
    [(setup, by_batch)] = pts.items()
    assert setup[:3] == ("tiny_mlp", "train", "fp32") and total[setup] == 80 * GIB
    assert {b: (p.alloc, p.oom) for b, p in by_batch.items()} == {
        64: (20 * GIB, False), 128: (40 * GIB, False), 256: (None, True),
        192: (61 * GIB, False)}  # the longer measurement at 192 wins over the probe
    assert by_batch[192].per_s is not None and by_batch[64].per_s is None


def test_scaling_chart_labels_the_factor_over_one_gpu():
    assert titles(charts.scaling_charts, [thr(), maxbatch()]) == []
    assert titles(charts.scaling_charts, [scaling(2, "no-p2p")]) == []  # default profile only
    assert titles(charts.scaling_charts, [scaling(8, ok=False)]) == []  # nothing ran
    from dlbench.report.charts.scaling import scaling_bars
    # the same step times on 1 and 2 GPUs: twice the samples, factor 2.00; 8 GPUs ran out
    bars = {b.gpus: b for b in scaling_bars([scaling(1), scaling(2), scaling(8, ok=False)])}
    assert bars[1].factor == pytest.approx(1.0) and bars[2].factor == pytest.approx(2.0)
    assert bars[2].value[0] == pytest.approx(2 * bars[1].value[0]) and bars[2].unit == "images"
    assert bars[8].value is None and bars[8].error == "oom" and bars[8].unit == "images"
    assert scaling_bars([scaling(2)])[0].factor is None  # no 1-GPU result to divide by
    chart = charts.scaling_charts([scaling(1), scaling(2), scaling(8, ok=False)], COMMANDS)[0]
    assert chart.title.startswith("Scaling: throughput by GPU count, img/s")
    assert chart.commands == (COMMAND,)


def test_interconnect_chart_needs_a_profile_beside_default():
    from dlbench.report.charts.scaling import interconnect_factors
    assert titles(charts.interconnect_charts, [scaling(1), scaling(2)]) == []
    assert titles(charts.interconnect_charts, [scaling(2, "no-p2p")]) == []   # nothing to divide by
    assert titles(charts.interconnect_charts, [scaling(4), scaling(2, "no-p2p")]) == []  # other count
    got = interconnect_factors([scaling(2), scaling(2, "no-p2p", step=0.12)])
    [(key, (f, lo, hi))] = got.items()
    assert key[1:] == (2, "no-p2p")
    assert f == pytest.approx(0.1 / 0.12, rel=0.02) and lo < f < hi
    assert len(titles(charts.interconnect_charts, [scaling(2), scaling(2, "no-p2p")])) == 1


def test_mfu_chart_needs_a_peak_to_compare_with():
    assert titles(charts.mfu_charts, [thr(env=CPU)]) == []                 # no CPU datasheet
    assert titles(charts.mfu_charts, [thr(flops=None)]) == []              # no counted FLOPs
    assert titles(charts.mfu_charts, [oom()]) == []
    assert titles(charts.mfu_charts, [thr()]) == [
        "MFU on NVIDIA H100 80GB HBM3: achieved model TFLOP/s over the datasheet and the "
        "measured peak"]
    cpu = titles(charts.mfu_charts, [thr(env=CPU), peak(env=CPU)])      # a measured CPU peak
    assert len(cpu) == 1 and cpu[0].startswith("MFU on CPU: Test CPU")


def test_roofline_chart_needs_a_roof():
    assert titles(charts.roofline_charts, [thr(env=CPU)]) == []           # no roof of a CPU
    assert titles(charts.roofline_charts, [thr(flops=None), peak()]) == []
    assert titles(charts.roofline_charts, [thr()]) == [
        "Roofline: NVIDIA H100 80GB HBM3 (roofs: datasheet (H100 SXM))"]
    assert titles(charts.roofline_charts, [thr(env=CPU), peak(env=CPU)])[0].startswith(
        "Roofline: CPU: Test CPU")


def test_published_chart_needs_your_fp32_result_on_a_known_gpu():
    vgg = dict(model="vgg16", mode="eval", method="fwd-bwd", flops=None)
    assert titles(charts.published_charts, [thr(**vgg, env=CPU)]) == []
    assert titles(charts.published_charts, [thr(**vgg, precision="fp16")]) == []
    assert titles(charts.published_charts, [thr()]) == []   # tiny_cnn: nothing published
    unknown = dict(H100, gpus=[{"name": "NVIDIA H100 NVL"}])
    assert titles(charts.published_charts, [thr(**vgg, env=unknown)]) == []
    chart = charts.published_charts([thr(**vgg)], COMMANDS)[0]
    assert chart.title.startswith("Your GPU among published GPUs")
    assert chart.commands[-1].startswith("published: ms per batch")


def test_telemetry_timeline_only_for_gpu_series():
    assert titles(charts.telemetry_charts, [thr()]) == []
    assert titles(charts.telemetry_charts, [thr(env=CPU, telemetry=host_telemetry())]) == []
    got = titles(charts.telemetry_charts, [thr(telemetry=telemetry()), thr(batch=32)])
    assert len(got) == 1 and got[0].startswith("Telemetry of tiny_cnn b16 fp32 train")


def test_telemetry_timelines_are_capped_and_the_rest_named(monkeypatch):
    from dlbench.report.charts import telemetry as tmod
    monkeypatch.setattr(tmod, "MAX_TIMELINES", 1)
    recs = [thr(telemetry=telemetry()), thr(batch=32, telemetry=telemetry())]
    got = titles(charts.telemetry_charts, recs)
    assert len(got) == 1 and f"1 more result(s) with telemetry not drawn: {recs[1].id}" in got[0]


def test_builders_are_the_report_order():
    assert report_html.CHART_BUILDERS[:2] == (charts.throughput_charts, charts.batch_charts)
    assert charts.telemetry_charts in report_html.CHART_BUILDERS
    assert report_html.render_html([], []).count("<svg") == 0


# -- in a real browser ----------------------------------------------------------------------------

needs_chromium = pytest.mark.skipif(browser.find_chromium() is None,
                                    reason="no Chromium binary (apt-get install chromium, or set "
                                           "DLBENCH_CHROMIUM); .ci/run installs it")


@needs_chromium
def test_report_opens_in_headless_chromium_without_errors(page, tmp_path):
    path = tmp_path / "report.html"
    path.write_text(page, encoding="utf-8")
    got = browser.open_page(path)
    assert got.errors == []
    assert got.info["figures"] == got.info["svg"] == got.info["drawn"] == len(EXPECTED_TITLES)
    assert got.info["tables"] >= 5 and got.info["title"] == f"report {EVIL}"  # as text
    assert are_expected(got.info["captions"])
    # the screenshot: a PNG of the whole page, kept in the test's temp dir as an artifact
    shot = tmp_path / "report.png"
    shot.write_bytes(got.png)
    assert got.png[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image
    with Image.open(shot) as im:
        assert im.size[0] == 1280 and im.size[1] == got.info["height"] > 3000
        colors = im.convert("RGB").resize((64, 512)).getcolors(64 * 512)
        assert colors is None or len(colors) > 50  # charts drawn, not a blank page


@needs_chromium
def test_browser_check_sees_console_errors_and_missing_files(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><title>t</title><img src="gone.png">'
                   '<script>console.error("boom"); not_defined();</script>')
    got = browser.open_page(bad, screenshot=False)
    assert any("boom" in e for e in got.errors)
    assert any("not_defined" in e for e in got.errors)
    assert any("gone.png" in e for e in got.errors)


def test_no_chromium_is_said_clearly(monkeypatch):
    monkeypatch.setenv("DLBENCH_CHROMIUM", "/nonexistent/chromium")
    assert browser.find_chromium() is None
    with pytest.raises(browser.BrowserError, match="apt-get install chromium"):
        browser.open_page("report.html")
