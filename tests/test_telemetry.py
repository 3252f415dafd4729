"""Telemetry: energy arithmetic on scripted series, throttle flags, the sampler thread against a
scripted fake NVML (slow calls, a counter wrap), NVML absent, the CLI export; GPU tests on CUDA."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import sys
import time
import warnings

import pytest
import torch
from conftest import FAST_STOP

from dlbench.config import ConfigError
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report.tables import energy_table, flags
from dlbench.store import Store
from dlbench.telemetry import energy as E
from dlbench.telemetry import sampler as sampler_mod
from dlbench.telemetry.sampler import Sampler, TelemetryWarning
from dlbench.telemetry.summary import finish, gpu_rows, summarize, throttle_in
from dlbench.workloads import throughput

try:
    from tests.fakes.fake_nvml import (
        REASON_GPU_IDLE,
        REASON_HW_THERMAL,
        REASON_SW_POWER_CAP,
        FakeGpu,
        make_fake_pynvml,
    )
except ModuleNotFoundError:
    from fakes.fake_nvml import (  # type: ignore[no-redef]
        REASON_GPU_IDLE,
        REASON_HW_THERMAL,
        REASON_SW_POWER_CAP,
        FakeGpu,
        make_fake_pynvml,
    )

WRAP = 2 ** 64


@pytest.fixture(autouse=True)
def fresh_warning_flag(monkeypatch):
    monkeypatch.setattr(sampler_mod, "_nvml_warned", False)


def install(monkeypatch, *gpus):
    fake = make_fake_pynvml(list(gpus))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


# -- energy arithmetic ------------------------------------------------------------------------
TS = [i / 10 for i in range(11)]        # 0.0 .. 1.0 s every 100 ms
P = [250.0] * 11                        # constant 250 W
COUNTER = [1_000_000 + 250_000 * t for t in TS]  # mJ: 250 J/s


def test_counter_and_integration_agree_on_constant_power():
    by_power = E.power_energy_j(TS, P, 0.25, 0.75)
    by_counter = E.counter_energy_j(TS, COUNTER, 0.25, 0.75)
    assert by_power == pytest.approx(125.0)
    assert by_counter == pytest.approx(125.0)
    assert E.window_energy_j(TS, COUNTER, P, 0.25, 0.75) == (pytest.approx(125.0), "counter")
    # no counter (a GPU before Volta): integrated power
    assert E.window_energy_j(TS, [None] * 11, P, 0.25, 0.75) == (pytest.approx(125.0), "power")
    # a window the samples do not cover has no figure, rather than a wrong one
    assert E.window_energy_j(TS, COUNTER, P, 0.5, 1.5) == (None, None)


def test_integration_follows_a_power_ramp():
    ramp = [100.0 + 1000.0 * t for t in TS]  # 100 W -> 1100 W, linear: trapezoid is exact
    assert E.power_energy_j(TS, ramp, 0.0, 1.0) == pytest.approx(600.0)
    assert E.power_energy_j(TS, ramp, 0.5, 1.0) == pytest.approx(0.5 * (600 + 1100) / 2)


def test_counter_wrap_is_unwrapped():
    start = WRAP - 100_000  # 100 J below the top: it wraps 0.4 s in
    wrapped = [(start + 25_000 * i) % WRAP for i in range(11)]  # exact integers, as NVML gives
    assert wrapped[4] < wrapped[3]  # the series really wraps
    assert E.counter_energy_j(TS, wrapped, 0.0, 1.0) == pytest.approx(250.0)
    assert E.counter_energy_j(TS, wrapped, 0.25, 0.75) == pytest.approx(125.0)


def test_counter_reset_falls_back_to_power_for_that_interval():
    reset = COUNTER[:5] + [500 + 250_000 * (t - 0.5) for t in TS[5:]]  # driver reload at 0.45 s
    # the wrapped step would imply ~1.8e17 W: a reset, so 0.4-0.5 s comes from power (25 J)
    assert E.counter_energy_j(TS, reset, 0.0, 1.0, P) == pytest.approx(250.0 - 0.5 + 0.5, abs=1)


def test_missing_samples_are_skipped():
    gaps = [v if i % 3 else None for i, v in enumerate(P)]
    assert E.power_energy_j(TS, gaps, 0.1, 0.8) == pytest.approx(175.0)
    assert E.power_energy_j(TS, gaps, 0.0, 0.8) is None  # the first sample is missing
    assert E.counter_rate([0, 1, 2], [0, 1024, 3072], 1 / 1024) == [None, 1.0, 2.0]


# -- throttle flags ---------------------------------------------------------------------------
def test_throttle_flags_only_inside_the_window():
    reasons = [REASON_HW_THERMAL, REASON_GPU_IDLE, 0, REASON_SW_POWER_CAP, REASON_SW_POWER_CAP,
               0, 0, 0, 0, 0, REASON_HW_THERMAL]
    thr = throttle_in(TS, reasons, 0.15, 0.95)
    assert thr["flags"] == ["power"]          # thermal at 0.0 and 1.0 s lies outside
    assert thr["fractions"]["power"] == pytest.approx(2 / 8)
    assert thr["reasons"] == ["sw_power_cap"]
    assert throttle_in(TS, [REASON_GPU_IDLE] * 11, 0, 1)["flags"] == []  # idle is not throttling


def _raw_gpu(power, reasons, counter=COUNTER):
    n = len(TS)
    series = {"t_s": TS, "power_w": power, "energy_mj": counter, "util_gpu_pct": [90] * n,
              "util_mem_pct": [40] * n, "mem_used_bytes": [2 ** 30] * n, "temp_c": [60] * n,
              "sm_clock_mhz": [1980] * n, "mem_clock_mhz": [2619] * n,
              "throttle_reasons": reasons, "pcie_tx_kbs": [None] * n, "pcie_rx_kbs": [None] * n,
              "nvlink_tx_kib": [None] * n, "nvlink_rx_kib": [None] * n}
    return {"index": 0, "name": "NVIDIA H100", "memory_total_bytes": 80 * 2 ** 30,
            "series": series}


def test_summary_energy_per_sample_and_idle_baseline():
    idle_power = [70.0, 70.0, 70.0] + [250.0] * 8
    raw = {"marks": {"idle_start": 0.0, "idle_end": 0.2, "window_start": 0.3,
                     "window_end": 0.8}, "gpus": [_raw_gpu(idle_power, [0] * 11)], "host": None}
    s = summarize(raw, samples=500)
    g = s["gpus"][0]
    assert g["energy_j"] == pytest.approx(125.0) and g["energy_method"] == "counter"
    assert g["idle_power_w"] == pytest.approx(70.0)
    assert g["net_energy_j"] == pytest.approx(125.0 - 70.0 * 0.5)
    assert g["j_per_sample"] == pytest.approx(0.25) and g["samples_per_j"] == pytest.approx(4.0)
    assert g["mean_power_w"] == pytest.approx(250.0) and g["max_power_w"] == 250.0
    assert g["mean_sm_clock_mhz"] == 1980 and g["max_temp_c"] == 60
    assert s["total"]["samples_per_j"] == pytest.approx(4.0) and s["throttled"] == []


def test_two_gpus_are_summed():
    raw = {"marks": {"window_start": 0.25, "window_end": 0.75},
           "gpus": [_raw_gpu(P, [0] * 11), dict(_raw_gpu(P, [0] * 11), index=1)]}
    s = summarize(raw, samples=1000)
    assert s["total"]["energy_j"] == pytest.approx(250.0)
    assert s["total"]["samples_per_j"] == pytest.approx(4.0)
    assert [g["samples_per_j"] for g in s["gpus"]] == [pytest.approx(4.0)] * 2  # 500 each


def test_throttled_result_is_flagged_in_tables(cpu_env):
    rec = stored_record(cpu_env)
    raw = {"marks": {"window_start": 0.15, "window_end": 0.95},
           "gpus": [_raw_gpu(P, [0, 0, 0, REASON_SW_POWER_CAP] + [0] * 7)]}
    hot = dataclasses.replace(rec, telemetry=finish(raw, 100))
    assert "throttled (power)" in flags(hot)
    assert not any("throttled" in f for f in flags(rec))
    table = energy_table([hot, rec])
    row = dict(zip(table.columns, table.rows[0]))
    assert row["throttled"] == "power" and row["energy from"] == "counter"
    assert row["mean W"] == "250" and row["samples/J"] == "0.500"
    assert dict(zip(table.columns, table.rows[1]))["energy from"] == "-"  # a CPU result


def stored_record(env, **kw):
    """A small finished CPU result, built directly (no model run)."""
    cfg = ThroughputConfig(model="tiny_mlp", batch_size=8, device="cpu", stop=FAST_STOP)
    return ThroughputRecord(config=cfg, env=env, step_times_s=(0.01,) * 20, samples_per_step=8,
                            stop_reason="converged", **kw)


# -- the counter against the sampled power ---------------------------------------------------
def test_power_tolerance_shrinks_with_the_window():
    # 3% for two sensors, plus 5% of the share of the samples' mean lying before the window
    assert E.power_agreement_tolerance(1.2, 0.1) == pytest.approx(0.03 + 0.05 * 1.1 / 1.2)
    assert E.power_agreement_tolerance(30.0, 0.1) == pytest.approx(0.03 + 0.05 * 1.1 / 30)
    assert E.power_agreement_tolerance(4.0, 0.1) < E.power_agreement_tolerance(1.2, 0.1)
    assert E.sample_interval([0.0, 0.1, 0.2, 0.5, 0.6]) == pytest.approx(0.1)


def test_counter_and_samples_agree_on_constant_power():
    check = E.power_agreement(250.0, 250.0, 0.5, 0.1)
    assert check["agree"] and check["rel_diff"] == 0.0
    assert E.power_agreement(None, 250.0, 0.5, 0.1) is None  # nothing to compare


LONG_TS = [i / 10 for i in range(101)]  # 0 .. 10 s every 100 ms


def _long_gpu(power, counter):
    g = _raw_gpu([None] * 11, [0] * 11)
    n = len(LONG_TS)
    series = {k: ([v[0]] * n if isinstance(v, list) else v) for k, v in g["series"].items()}
    series.update(t_s=LONG_TS, power_w=power, energy_mj=counter, throttle_reasons=[0] * n)
    return dict(g, series=series)


def test_a_counter_reading_above_its_samples_is_an_energy_mismatch(cpu_env):
    # The counter says 700 W (700 J/s) while every power sample reads 600 W: 16.7% apart over a
    # 6-second window, whose tolerance is 3.9%.
    power = [600.0] * len(LONG_TS)
    counter = [700_000 * t for t in LONG_TS]
    raw = {"marks": {"window_start": 2.0, "window_end": 8.0}, "gpus": [_long_gpu(power, counter)]}
    summ = summarize(raw, samples=600)
    g = summ["gpus"][0]
    assert g["mean_power_w"] == pytest.approx(700.0)
    assert g["sampled_mean_power_w"] == pytest.approx(600.0)
    assert g["power_check"]["agree"] is False
    assert g["power_check"]["tolerance"] == pytest.approx(0.03 + 0.05 * 1.1 / 6)
    m = summ["energy_mismatch"]
    assert m["counter_w"] == pytest.approx(700.0) and m["sampled_w"] == pytest.approx(600.0)
    # reported on every table, for old records too: the check reads the raw series
    rec = dataclasses.replace(stored_record(cpu_env), telemetry={**raw, "summary": None})
    assert "energy-mismatch (counter 700.0 W, sampled 600.0 W)" in flags(rec)


def test_a_short_window_after_a_lower_warm_up_is_within_tolerance(cpu_env):
    # NVML's reading averages the last second: after warm-up at 640 W the card draws 700 W
    # from 2 s on, so the readings climb to 700 W over one second. A 1.2-second window that
    # starts at 2 s sees readings 5% under the counter; its tolerance (7.6%) allows that.
    true_w = [640.0 if t < 2.0 else 700.0 for t in LONG_TS]
    read_w = [sum(true_w[max(0, i - 9):i + 1]) / len(true_w[max(0, i - 9):i + 1])
              for i in range(len(LONG_TS))]
    counter, total = [], 0.0
    for i, t in enumerate(LONG_TS):
        total += true_w[i] * 0.1 * 1000 if i else 0.0
        counter.append(total)
    raw = {"marks": {"window_start": 2.05, "window_end": 3.25},
           "gpus": [_long_gpu(read_w, counter)]}
    summ = summarize(raw, samples=100)
    check = summ["gpus"][0]["power_check"]
    assert check["counter_w"] > 695 and 0.02 < check["rel_diff"] < check["tolerance"]
    assert summ["energy_mismatch"] is None
    rec = dataclasses.replace(stored_record(cpu_env), telemetry=finish(raw, 100))
    assert not any(f.startswith("energy-mismatch") for f in flags(rec))
    # the same readings against a counter 10% higher still are a mismatch
    raw["gpus"] = [_long_gpu(read_w, [c * 1.1 for c in counter])]
    assert summarize(raw, samples=100)["energy_mismatch"]["gpus"] == 1


# -- the sampler thread -----------------------------------------------------------------------
def test_sampler_energy_from_counter_and_power_agree(monkeypatch):
    t_start = time.perf_counter()
    gpu = FakeGpu(power_usage_mw=300_000,
                  energy_mj=lambda: int(WRAP - 60_000 + 300_000 * (time.perf_counter() - t_start)) % WRAP,
                  throttle_reasons=lambda: REASON_SW_POWER_CAP
                  if 0.2 < time.perf_counter() - t_start < 0.3 else 0, nvlink_tx_kib=0)
    fake = install(monkeypatch, gpu)
    s = Sampler(0.02, gpus=[{"index": 0, "uuid": gpu.uuid}], host=True).start()
    time.sleep(0.05)
    s.mark("window_start")
    time.sleep(0.4)  # the counter wraps 0.2 s after start
    s.mark("window_end")
    raw = s.stop()
    assert raw["stopped_cleanly"] and fake.state.shutdown_calls == 1
    out = summarize(raw, samples=120)
    g = out["gpus"][0]
    window = raw["marks"]["window_end"] - raw["marks"]["window_start"]
    assert g["energy_method"] == "counter"
    assert g["energy_j"] == pytest.approx(300 * window, rel=0.03)
    assert E.power_energy_j(raw["gpus"][0]["series"]["t_s"], raw["gpus"][0]["series"]["power_w"],
                            raw["marks"]["window_start"], raw["marks"]["window_end"]) \
        == pytest.approx(g["energy_j"], rel=0.03)
    assert out["throttled"] == ["power"]
    assert "pcie_tx_kbs" not in raw["gpus"][0]["unsupported"]
    assert raw["gpus"][0]["series"]["t_s"][-1] > raw["marks"]["window_end"]  # a sample after


def test_a_benchmark_over_several_gpus_of_one_process_samples_every_one(monkeypatch):
    """JAX's data parallel runs one process over several GPUs: the benchmark's sampler takes
    each of them (matched by the UUIDs the environment holds), so energy is every card's."""
    from types import SimpleNamespace

    from dlbench import telemetry
    a = FakeGpu(power_usage_mw=300_000, uuid="GPU-a")
    b = FakeGpu(power_usage_mw=200_000, uuid="GPU-b")
    install(monkeypatch, a, b)
    env = {"gpus": [{"index": 0, "uuid": a.uuid}, {"index": 1, "uuid": b.uuid}]}
    cuda = [SimpleNamespace(type="cuda", index=i) for i in (0, 1)]
    with telemetry.for_benchmark(0.02, cuda[0], env, more=cuda) as s:
        s.mark("window_start")
        time.sleep(0.15)
        s.mark("window_end")
    raw = s.stop()
    assert [g["uuid"] for g in raw["gpus"]] == [a.uuid, b.uuid]
    assert [g["series"]["power_w"][-1] for g in raw["gpus"]] == [300.0, 200.0]
    assert len(summarize(raw, samples=100)["gpus"]) == 2  # the total sums both
    alone = telemetry.for_benchmark(0.02, cuda[1], env)  # one GPU: that one only
    assert [g["uuid"] for g in alone._want_gpus] == [b.uuid]


def test_idle_baseline_waits_for_the_power_to_settle(monkeypatch):
    # A card that has just finished work: 500 W falling to 100 W over 0.6 s, then flat.
    t_start = time.perf_counter()
    gpu = FakeGpu(power_usage_mw=lambda: int(1000 * max(100.0, 500.0 - 700.0 * (
        time.perf_counter() - t_start))))
    install(monkeypatch, gpu)
    s = Sampler(0.02, gpus="all", host=False).start()
    s.idle(0.2, settle_max_s=3.0)
    s.mark("window_start")
    time.sleep(0.05)
    s.mark("window_end")
    raw = s.stop()
    out = summarize(raw, samples=10)
    assert out["idle_settled"] is True
    assert raw["marks"]["idle_start"] >= 0.55  # not before the power had come down
    assert out["gpus"][0]["idle_power_w"] == pytest.approx(100.0, rel=0.02)


def test_idle_baseline_that_never_settles_is_marked(monkeypatch):
    t_start = time.perf_counter()
    gpu = FakeGpu(power_usage_mw=lambda: int(1000 * (500.0 - 300.0 * (time.perf_counter()
                                                                         - t_start))))
    install(monkeypatch, gpu)
    s = Sampler(0.02, gpus="all", host=False).start()
    s.idle(0.1, settle_max_s=0.5)
    s.mark("window_start")
    s.mark("window_end")
    raw = s.stop()
    assert "idle_unsettled" in raw["marks"]
    assert summarize(raw, samples=1)["idle_settled"] is False


def test_unsupported_fields_are_read_once(monkeypatch):
    gpu = FakeGpu(unsupported={"energy_mj", "throttle_reasons"})
    install(monkeypatch, gpu)
    s = Sampler(0.01, gpus="all", host=False).start()
    time.sleep(0.1)
    raw = s.stop()
    assert set(raw["gpus"][0]["unsupported"]) >= {"energy_mj", "throttle_reasons", "nvlink"}
    assert gpu.reads.get("energy_mj", 0) == 0  # raised NOT_SUPPORTED before counting, once
    assert all(v is None for v in raw["gpus"][0]["series"]["energy_mj"])
    assert len(raw["gpus"][0]["series"]["t_s"]) >= 3


def test_slow_nvml_never_blocks_the_loop(monkeypatch):
    gpu = FakeGpu(call_delay_s=0.03)  # ~12 readings a sample: a sample takes ~0.4 s
    install(monkeypatch, gpu)
    s = Sampler(0.01, gpus="all", host=False).start()
    worst = 0.0
    t_end = time.perf_counter() + 0.5
    while time.perf_counter() < t_end:  # the "loop": marks between bits of work
        t = time.perf_counter()
        s.mark("step")
        worst = max(worst, time.perf_counter() - t)
        sum(range(2000))
    t = time.perf_counter()
    raw = s.stop()
    stop_s = time.perf_counter() - t
    # A mark that waited for the sampler would wait for at least one NVML call (30 ms); below
    # that, what a mark takes is the scheduler's (a loaded 2-core machine took 8 ms once).
    assert worst < 0.025            # a mark never waits for the sampler
    assert raw["stopped_cleanly"]
    assert stop_s < 2.0             # the in-flight sample plus one last one
    assert len(raw["gpus"][0]["series"]["t_s"]) >= 2


def test_stuck_sampler_is_abandoned_not_waited_for(monkeypatch):
    gpu = FakeGpu(call_delay_s=0.5)
    fake = install(monkeypatch, gpu)
    s = Sampler(0.01, gpus="all", host=False, join_timeout_s=0.2).start()
    time.sleep(0.05)
    t = time.perf_counter()
    raw = s.stop()
    assert time.perf_counter() - t < 1.0
    assert raw["stopped_cleanly"] is False
    assert fake.state.shutdown_calls == 0  # NVML is not shut down under a running call


def test_absent_nvml_warns_once_and_samples_the_host(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "import pynvml" fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raws = [Sampler(0.02, gpus="all").start() for _ in range(2)]
        time.sleep(0.1)
        raws = [s.stop() for s in raws]
    mine = [w for w in caught if issubclass(w.category, TelemetryWarning)]
    assert len(mine) == 1 and "nvidia-ml-py" in str(mine[0].message)
    for raw in raws:
        assert raw["gpus"] == [] and "nvidia-ml-py" in raw["nvml_error"]
        assert len(raw["host"]["series"]["t_s"]) >= 2
        assert all(r > 0 for r in raw["host"]["series"]["rss_bytes"])


def test_nvml_init_failure_is_not_an_error(monkeypatch):
    fake = make_fake_pynvml([FakeGpu()], fail_init=True)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    with pytest.warns(TelemetryWarning, match="NVML could not start"):
        s = Sampler(0.05, gpus=[{"index": 0}]).start()
    assert s.stop()["gpus"] == []


# -- the benchmark ----------------------------------------------------------------------------
def test_measure_carries_host_telemetry_and_can_switch_it_off(cpu_env):
    # A window of at least 0.3 s: the host is sampled every 0.1 s, and a window shorter than
    # that may hold no sample (its summary then has no peak memory to check).
    window = dataclasses.replace(FAST_STOP, min_seconds=0.3, max_seconds=2.0)
    base = dict(model="tiny_mlp", batch_size=8, device="cpu", warmup_steps=2,
                warmup_seconds=0, stop=window)
    rec = throughput.measure(ThroughputConfig(**base), cpu_env)
    tele = rec.telemetry
    m = tele["marks"]
    assert m["warmup_start"] <= m["window_start"] < m["window_end"]
    assert m["window_end"] - m["window_start"] == pytest.approx(rec.window_wall_s, abs=1e-5)
    assert tele["gpus"] == [] and tele["nvml_error"] is None  # CPU run: NVML not even tried
    assert tele["summary"]["samples"] == len(rec.step_times_s) * 8
    assert tele["summary"]["host"]["max_rss_bytes"] > 0
    # the record round-trips through JSON, and records from before telemetry still load
    d = json.loads(json.dumps(rec.to_dict()))
    assert type(rec).from_dict(d).telemetry == tele
    del d["telemetry"]
    assert type(rec).from_dict(d).telemetry is None
    off = throughput.measure(ThroughputConfig(**base, telemetry_interval_s=None), cpu_env)
    assert off.telemetry is None
    assert ThroughputConfig(**base).key() == off.config.key()  # not part of the identity
    with pytest.raises(ConfigError, match="^telemetry_interval_s must be > 0"):
        ThroughputConfig(**base, telemetry_interval_s=0)


def test_cli_exports_a_stored_series(tmp_path, cpu_env, capsys):
    from fakes.cli import run as dlbench

    from dlbench.cli import main

    host = {"t_s": [0.0, 0.5], "cpu_pct": [50.0, 60.0], "proc_cpu_pct": [90.0, 99.0],
            "rss_bytes": [2 ** 28, 2 ** 28], "mem_used_bytes": [2 ** 32, 2 ** 32]}
    rec = stored_record(cpu_env, telemetry={"marks": {}, "gpus": [], "host": {"series": host}})
    raw = {"t0": 0.0, "interval_s": 0.1,
           "marks": {"idle_start": 0.0, "idle_end": 0.2, "window_start": 0.25,
                     "window_end": 0.75},
           "gpus": [_raw_gpu(P, [0] * 5 + [REASON_HW_THERMAL] + [0] * 5)], "host": None}
    gpu_rec = dataclasses.replace(rec, telemetry=finish(raw, 400), run_id="r1")
    db = tmp_path / "t.db"
    with Store(db) as store:
        store.start_run("r1", "test", cpu_env, "k", "cpu")
        store.add(gpu_rec)
        store.add(dataclasses.replace(rec, id="cpu000000000", run_id="r1"))
    out = tmp_path / "series.csv"
    p = dlbench("telemetry", gpu_rec.id[:8], "--db", str(db), "--csv", str(out))
    assert p.returncode == 0, p.stderr
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 11
    assert [r["phase"] for r in rows[:4]] == ["idle", "idle", "idle", "window"]
    assert rows[5]["throttle"] == "hw_thermal" and rows[5]["power_w"] == "250.0"
    assert float(rows[10]["energy_j"]) == pytest.approx(250.0)
    capsys.readouterr()
    assert main(["telemetry", "cpu0000", "--db", str(db), "--csv", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["t_s,phase,cpu_pct,proc_cpu_pct,rss_mib,mem_used_mib",
                     "0.0,,50.0,90.0,256.0,4096.0", "0.5,,60.0,99.0,256.0,4096.0"]
    assert main(["telemetry", "--run", "r1", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "hw_thermal" not in out and "thermal" in out and "counter" in out


def test_monitor_prints_a_line_per_gpu_and_writes_csv(monkeypatch, tmp_path, capsys):
    from dlbench.cli import main

    install(monkeypatch, FakeGpu(power_usage_mw=[100_000, 200_000, 300_000],
                                 energy_mj=[WRAP - 50, 950, 2_950]),
            FakeGpu(uuid="GPU-1", throttle_reasons=REASON_SW_POWER_CAP))
    out = tmp_path / "mon.csv"
    assert main(["monitor", "--interval", "0.05", "--duration", "0.12", "--csv", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = list(csv.DictReader(out.open()))
    assert len(lines) == len(rows) >= 4 and len(rows) % 2 == 0
    assert lines[0].split()[1] == "gpu0" and lines[1].split()[1] == "gpu1"
    assert "throttle sw_power_cap" in lines[1]
    gpu0 = [r for r in rows if r["gpu"] == "0"]
    assert [r["power_w"] for r in gpu0[:3]] == ["100.0", "200.0", "300.0"]
    assert [r["energy_j"] for r in gpu0[:3]] == ["0.0", "1.0", "3.0"]  # across the wrap


# -- the real thing -----------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_benchmark_has_energy_and_clocks(cpu_env):
    pytest.importorskip("pynvml")
    from dlbench.env import capture_environment

    env = capture_environment(include_topology=False)
    rec = throughput.measure(ThroughputConfig(model="resnet50", batch_size=64, precision="bf16",
                                              device="cuda", stop=FAST_STOP), env)
    s = rec.telemetry["summary"]
    g = s["gpus"][0]
    assert g["energy_j"] > 0 and g["samples_per_j"] > 0 and g["mean_power_w"] > 50
    assert g["mean_sm_clock_mhz"] > 100 and g["max_temp_c"] > 0
    assert g["energy_method"] == "counter"  # every datacenter GPU since Volta has the counter
    assert g["idle_power_w"] is not None and g["idle_power_w"] < g["mean_power_w"]
    rows = gpu_rows(rec.telemetry)
    assert any(r["phase"] == "window" for r in rows)


@pytest.mark.gpu
def test_gpu_sampler_reads_every_offered_field():
    pytest.importorskip("pynvml")
    s = Sampler(0.05, gpus=[{"index": 0}], host=False).start()
    x = torch.randn(4096, 4096, device="cuda")
    s.mark("window_start")
    for _ in range(200):
        x = x @ x
        x = x / x.norm()
    torch.cuda.synchronize()
    s.mark("window_end")
    raw = s.stop()
    series = raw["gpus"][0]["series"]
    assert all(v is not None for v in series["power_w"])
    assert all(v is not None for v in series["sm_clock_mhz"])
    assert {"power_w", "sm_clock_mhz", "mem_used_bytes"}.isdisjoint(raw["gpus"][0]["unsupported"])


def test_the_energy_table_is_left_out_for_runs_that_sampled_no_gpu(cpu_env):
    from dlbench.report.tables import tables_for
    rec = stored_record(cpu_env)
    cpu_only = dataclasses.replace(rec, telemetry={"gpus": [], "host": {"series": {}}})
    titles = [t.title for t in tables_for([cpu_only], "cpu")]
    assert not any(t.startswith("Energy and telemetry") for t in titles), titles
    raw = {"marks": {"window_start": 0.15, "window_end": 0.95}, "gpus": [_raw_gpu(P, [0] * 11)]}
    gpu = dataclasses.replace(rec, telemetry=finish(raw, 100))
    titles = [t.title for t in tables_for([gpu, cpu_only], "cuda")]
    assert "Energy and telemetry" in titles, titles
