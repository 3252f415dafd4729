"""Every view of the ``generate`` kind: its tables, the paths against eager with their pay-back,
the two charts, the CSV, ``dlbench compare`` and ``to_dataframe``.

Records are built with known numbers (tests/fakes/generate_records.py says how each figure
comes out); one tiny real record (test-llama on the CPU) goes through the store, ``results
show``, ``report``, the CSV and the DataFrame, so the views are proven on what the workload
writes, not only on what the tests make.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import math
import re

import pytest
from fakes.generate_records import CPU, H100, failed_generate, generate_record

from dlbench.records.base import new_id
from dlbench.records.peak import PeakConfig, PeakRecord
from dlbench.report import charts, export
from dlbench.report import compare as cmp
from dlbench.report import html as report_html
from dlbench.report.generate_figures import bandwidth_roof, generate_flags, prefill_mfu
from dlbench.report.generate_tables import (
    EFFICIENCY_COLUMNS,
    SPEED_COLUMNS,
    efficiency_table,
    generate_table,
    generate_tables,
    path_pairs,
    paths_table,
)
from dlbench.report.tables import tables_for
from dlbench.store import Store
from dlbench.env import env_key
from dlbench.tuning.payback import payback


def col(table, row: int, name: str) -> str:
    return table.rows[row][table.columns.index(name)]


def copy_peak(gbs: float, env=H100, device="cuda:0", run_id="run-peak") -> PeakRecord:
    """A ``dlbench peak`` copy point of ``gbs`` GB/s (read + write bytes per second)."""
    return PeakRecord(config=PeakConfig("copy", nbytes=1 << 30, device=device), env=env,
                      times_s=(1.0, 1.0, 1.0), work=gbs * 1e9, unit="GB/s", run_id=run_id)


def matmul_peak(tflops: float, precision="bf16", env=H100, device="cuda:0",
                run_id="run-peak") -> PeakRecord:
    return PeakRecord(config=PeakConfig("matmul", precision=precision, shape=(8, 8, 8),
                                        device=device),
                      env=env, times_s=(1.0, 1.0, 1.0), work=tflops * 1e12, run_id=run_id)


# -- the speed and latency table ------------------------------------------------------------------
def test_speed_table_known_numbers_and_a_failure_as_a_row():
    t = generate_table([generate_record(), failed_generate()])
    assert t.columns == SPEED_COLUMNS
    assert t.rows[0] == ("made-up-lm", "4", "8+4", "bf16", "eager", "695.7 tok/s", "0.00%",
                         "2,087", "20.0", "20.0", "1.00", "1.00", "1.00", "1.00", "5", "1.50",
                         "")
    fail = t.rows[1]
    assert fail[:5] == ("made-up-lm", "64", "8+4", "bf16", "eager")
    assert set(fail[5:-1]) == {"-"}
    assert fail[-1] == "oom: CUDA out of memory. Tried to allocate 2 GiB"


def test_latency_percentiles_come_from_every_decode_step():
    # 5 requests x 3 steps, 2% above and below 1 ms in turn: 8 slow steps, 7 fast ones
    r = generate_record(spread=0.02)
    t = generate_table([r])
    assert r.tpot().n == 15 and r.tpot().mean_s == pytest.approx((8 * 1.02 + 7 * 0.98) / 15e3)
    assert col(t, 0, "TPOT ms mean") == "1.00"
    assert (col(t, 0, "TPOT p50"), col(t, 0, "TPOT p99")) == ("1.02", "1.02")
    assert col(t, 0, "TTFT p99") == "20.4"


def test_flags_reuse_the_throughput_flags_and_add_missing_telemetry():
    capped = generate_record(spread=0.3, stop_reason="time_cap")
    assert generate_flags(capped)[0] == "noisy (time_cap)"
    assert "no telemetry" in generate_flags(generate_record(telemetry=None))
    assert generate_flags(generate_record()) == []
    assert generate_flags(generate_record(env=CPU)) == []   # a CPU has no GPU telemetry to miss
    assert col(generate_table([capped]), 0, "note").startswith("noisy (time_cap)")


# -- compute, bandwidth, energy -------------------------------------------------------------------
def test_efficiency_table_against_the_datasheet():
    t = efficiency_table([generate_record(), failed_generate()])
    assert t.columns == EFFICIENCY_COLUMNS
    assert t.rows == (("made-up-lm", "4", "8+4", "bf16", "eager", "3.17", "0.3%", "-", "2,000",
                       "59.7%", "3,350 datasheet", "5.00", "3.75", "3.00", "0.250"),)
    assert "memory roofs: datasheet (H100 SXM): 3,350 GB/s" in t.notes


def test_measured_peaks_of_the_same_device_replace_the_datasheet():
    r = generate_record()
    peaks = [copy_peak(2000.0), copy_peak(3000.0, run_id="later"), matmul_peak(100.0)]
    roof = bandwidth_roof(r, peaks)
    assert (roof.gbs, roof.source) == (3000.0, "measured")  # the latest peak run's copy
    m = prefill_mfu(r, peaks)
    assert m.tflops == pytest.approx(3.1720576)
    assert m.datasheet == pytest.approx(3.1720576 / 989.5)
    assert m.measured == pytest.approx(0.031720576)
    t = efficiency_table([r], peaks)
    assert (col(t, 0, "MFU measured"), col(t, 0, "% memory roof"),
            col(t, 0, "memory roof GB/s")) == ("3.2%", "66.7%", "3,000 measured")
    # another card's peaks say nothing of this one
    other = {**H100, "gpus": [{"name": "NVIDIA H200"}]}
    assert bandwidth_roof(r, [copy_peak(4800.0, env=other)]).source == "datasheet"


def test_the_roof_of_the_very_card_however_many_gpus_its_peak_run_saw():
    """A peak run with both of a host's cards visible measures the first: it is that card's
    roof for a generation run on it alone, before another card's of the same model."""
    card = {**H100["gpus"][0], "uuid": "GPU-aaaa"}
    mine = {**H100, "gpu_count": 1, "gpus": [card]}
    host = {**H100, "gpu_count": 2, "gpus": [card, {**card, "uuid": "GPU-bbbb"}]}
    other = {**H100, "gpu_count": 1, "gpus": [{**card, "uuid": "GPU-cccc"}]}
    r = dataclasses.replace(generate_record(), env=mine)
    peaks = [copy_peak(3000.0, env=host), copy_peak(3100.0, env=other, run_id="later")]
    assert bandwidth_roof(r, peaks).gbs == 3000.0
    # no peak of its card: the latest of its model's single-card runs
    assert bandwidth_roof(r, peaks[1:]).gbs == 3100.0


def test_a_cpu_run_has_no_datasheet_roof_but_a_measured_one():
    r = generate_record(env=CPU)
    assert bandwidth_roof(r) is None and prefill_mfu(r).datasheet is None
    assert prefill_mfu(r).why_not.startswith("CPU")
    cpu_copy = copy_peak(20.0, env=CPU, device="cpu")
    assert bandwidth_roof(r, [cpu_copy]).gbs == 20.0
    # on a GPU host, a --device cpu run is not measured against the GPU's roof
    on_gpu_host = dataclasses.replace(r, env=H100)
    assert bandwidth_roof(on_gpu_host, [copy_peak(3000.0)]) is None
    assert bandwidth_roof(on_gpu_host, [copy_peak(20.0, env=H100, device="cpu")]).gbs == 20.0
    cpu_matmul = matmul_peak(1.0, env=H100, device="cpu")   # 1 TFLOP/s: MFU = the TFLOP/s
    assert prefill_mfu(on_gpu_host, [cpu_matmul, matmul_peak(100.0)]).measured == \
        pytest.approx(3.1720576)


# -- paths against eager --------------------------------------------------------------------------
def test_paths_table_factor_setup_and_payback():
    eager = generate_record()                                   # setup 2.0 + 1.5 s
    comp = generate_record(path="compile", tpot_s=0.0005, ttft_s=0.015, first_step_s=30.0)
    slow = generate_record(path="static", tpot_s=0.002, first_step_s=1.0)
    quick = generate_record(path="graph", tpot_s=0.0005, first_step_s=0.5)
    other_batch = generate_record(batch=8, path="compile")  # no eager at batch 8: no row
    recs = [comp, eager, slow, quick, other_batch]
    assert [(e.id, o.config.path) for e, o in path_pairs(recs)] == [
        (eager.id, "static"), (eager.id, "graph"), (eager.id, "compile")]
    t = paths_table(recs)
    compile_row = t.rows[2]
    assert compile_row == ("made-up-lm", "4", "8+4", "bf16", "compile", "695.7", "969.7", "1.39x",
                           "1.00 / 0.500", "3.5 / 32.0", "+28.5",
                           "70,154 tokens (4,385 requests, 72.3 s)")
    assert col(t, 0, "pays back after") == "never" and col(t, 1, "pays back after") == "at once"
    # tuning.payback's formula, unchanged: samples are output tokens, a step is a request
    p = payback(eager, comp)
    saved = 1 / eager.output_tokens_per_s() - 1 / comp.output_tokens_per_s()
    assert p.extra_setup_s == pytest.approx(28.5) and p.samples == pytest.approx(28.5 / saved)
    assert p.steps == pytest.approx(p.samples / 16)


def test_a_failed_eager_still_shows_the_path_and_says_why():
    comp = generate_record(batch=64, path="compile")
    t = paths_table([failed_generate(batch=64), comp])
    assert (col(t, 0, "eager tok/s"), col(t, 0, "factor"), col(t, 0, "pays back after")) == \
        ("oom", "-", "-")


def test_tables_for_lays_out_generate_beside_the_other_kinds():
    recs = [generate_record(), generate_record(path="compile"), copy_peak(3000.0)]
    titles = [t.title for t in tables_for(recs, "NVIDIA H100 80GB HBM3")]
    assert titles == ["Generation on NVIDIA H100 80GB HBM3: speed and latency",
                          "Generation on NVIDIA H100 80GB HBM3: compute, memory bandwidth, energy",
                          "Generation paths against eager (model.generate())", "Device ceilings"]
    eff = tables_for(recs, "x")[1]
    assert col(eff, 0, "memory roof GB/s") == "3,000 measured"   # the peak beside it
    assert generate_tables([copy_peak(1.0)]) == []


def test_a_profiled_record_gets_the_kernel_tables():
    prof = {"steps": 2, "activity": "cpu", "kernels": [["aten::mm", 8, 0.004],
                                                       ["aten::softmax", 2, 0.001]]}
    titles = [t.title for t in generate_tables([generate_record(profile=prof)])]
    assert titles[-2:] == ["Where the time went: made-up-lm b4 bf16 8+4 eager",
                           "Top kernels: made-up-lm b4 bf16 8+4 eager"]


# -- charts ---------------------------------------------------------------------------------------
def sweep(path="eager", env=H100, batches=(1, 4, 16)):
    return [generate_record(batch=b, path=path, env=env, tpot_s=0.001 * (1 + b / 32))
            for b in batches]


def test_latency_chart_needs_a_batch_sweep_and_labels_points_by_batch():
    assert charts.latency_charts(sweep(batches=(4,)), {}) == []
    recs = sweep() + sweep("compile")
    [c] = charts.latency_charts(recs, {"run-gen": "dlbench generate -m made-up-lm"})
    assert c.title.startswith("Generation on NVIDIA H100 80GB HBM3: time per output token")
    assert c.commands == ("dlbench generate -m made-up-lm",)
    assert "<svg" in c.svg


def test_roofline_chart_needs_a_roof():
    [c] = charts.decode_roofline_charts(sweep(), {})
    assert "roof: datasheet (H100 SXM)" in c.title
    assert charts.decode_roofline_charts(sweep(env=CPU), {}) == []  # a CPU, no peak run
    [m] = charts.decode_roofline_charts(sweep(env=CPU) + [copy_peak(20.0, env=CPU, device="cpu")],
                                        {"run-peak": "dlbench peak --quick"})
    assert "roof: measured" in m.title and m.commands == ("dlbench peak --quick",)


def test_report_builders_include_the_generate_charts():
    assert charts.latency_charts in report_html.CHART_BUILDERS
    assert charts.decode_roofline_charts in report_html.CHART_BUILDERS


# -- CSV and DataFrame ----------------------------------------------------------------------------
def test_csv_row_holds_the_records_figures():
    ok, fail = generate_record(), failed_generate()
    rows = list(csv.DictReader(io.StringIO(export.to_csv([ok, fail, copy_peak(1.0)],
                                                         "generate"))))
    assert list(rows[0]) == [c.name for c in export.columns("generate")]
    assert len(rows) == 2
    row = rows[0]
    assert float(row["output_tokens_per_s"]) == pytest.approx(16 / 0.023)
    assert float(row["total_tokens_per_s"]) == pytest.approx(48 / 0.023)
    assert float(row["tpot_mean_ms"]) == pytest.approx(1.0)
    assert float(row["ttft_mean_ms"]) == pytest.approx(20.0)
    assert float(row["decode_bytes_per_step"]) == 2_000_096_000
    assert float(row["decode_gbps"]) == pytest.approx(2000.096)
    assert float(row["datasheet_bandwidth_gbps"]) == 3350
    assert float(row["roofline_fraction_datasheet"]) == pytest.approx(2000.096 / 3350)
    assert float(row["prefill_tflops"]) == pytest.approx(3.1720576)
    assert float(row["j_per_output_token"]) == pytest.approx(5.0)
    assert float(row["net_j_per_output_token"]) == pytest.approx(3.75)
    assert int(row["decode_steps"]) == 15 and int(row["requests"]) == 5
    assert row["path"] == "eager" and row["pair_key"] == ok.config.pair_key()
    assert row["gpu_uuid"] == H100["gpus"][0]["uuid"]
    failed = rows[1]
    assert failed["error_type"] == "oom" and failed["output_tokens_per_s"] == ""


def test_to_dataframe_of_a_store(tmp_path):
    pytest.importorskip("pandas")
    import dlbench
    db = tmp_path / "gen.db"
    recs = [generate_record(), generate_record(path="compile", tpot_s=0.0005), failed_generate()]
    with Store(db) as s:
        s.start_run("run-gen", "dlbench generate", H100, env_key(H100), "H100")
        for r in recs + [copy_peak(1.0, run_id="run-gen")]:
            s.add(r, env_key(H100))
        s.finish_run("run-gen", "done")
    df = dlbench.to_dataframe(db, kind="generate")
    assert list(df.columns) == [c.name for c in export.columns("generate")]
    assert list(df["path"]) == ["eager", "compile", "eager"]
    assert df.loc[1, "tpot_mean_ms"] == pytest.approx(0.5)
    assert df.loc[0, "decode_gbps"] == pytest.approx(2000.096)
    assert math.isnan(df.loc[2, "output_tokens_per_s"])
    with pytest.raises(ValueError, match="several kinds"):
        dlbench.to_dataframe(db)


# -- compare ---------------------------------------------------------------------------------------
#: A run-to-run spread of generation on the fake H100, as benchmarks/run_spread.py stores one:
#: one process a side is judged against it (none is shipped for generate yet).
GEN_SPREAD = {"generate": {"NVIDIA H100 80GB HBM3": {"rel_sd": 0.005, "df": 20,
                                                      "configs": [{}]}}}


def test_compare_gates_output_tokens_and_tpot():
    a = [generate_record(spread=0.001, requests=20)]
    # without a spread, one process a side cannot be judged: inconclusive, never a regression
    blind = cmp.compare(a, [generate_record(spread=0.001, requests=20, tpot_s=0.0013,
                                            ttft_s=0.026, run_id="b")], spreads={})
    assert not blind.regressions and all(p.inconclusive for p in blind.pairs)
    compare = functools.partial(cmp.compare, spreads=GEN_SPREAD)
    # a stored spread describes steady windows (intervals of at most 1%), as these are
    assert a[0].summary().rel_halfwidth <= cmp.SPREAD_WINDOW_MAX_REL_HALFWIDTH
    same = compare(a, [dataclasses.replace(a[0], id=new_id())])
    assert [p.unit for p in same.pairs] == ["output tok/s", "1/TPOT"]
    assert not same.regressions and not same.only_a and not same.only_b
    # every step 30% slower: both figures regress; TPOT shown as ms, ratio = TPOT A / TPOT B
    slow = compare(a, [generate_record(spread=0.001, requests=20, tpot_s=0.0013,
                                       ttft_s=0.026, run_id="b")])
    tok, tpot = slow.pairs
    assert tok.regression and tok.test == "welch"
    assert tpot.regression and tpot.ratio == pytest.approx(1 / 1.3)
    assert tpot.label.endswith("eager TPOT")
    t = cmp.comparison_table(slow)
    assert t.rows[1][2:5] == ("1.000 ms", "1.300 ms", "TPOT mean")
    # a faster decode with a slower prefill: TPOT better, the output rate a regression
    mixed = compare(a, [generate_record(spread=0.001, requests=20, tpot_s=0.0009,
                                        ttft_s=0.03, run_id="b")])
    assert [p.regression for p in mixed.pairs] == [True, False]
    assert mixed.pairs[1].improvement


def test_compare_cli_exits_5_on_a_generate_regression(tmp_path, capsys):
    from dlbench.cli import main
    db = tmp_path / "cmp.db"
    with Store(db) as s:
        for run, tpot in (("run-a", 0.001), ("run-b", 0.0013)):
            s.start_run(run, "dlbench generate", H100, env_key(H100), "H100", tag=run)
            for i in range(3):   # a --repeat group of 3: compare tests across processes
                rec = generate_record(spread=0.02, requests=20, tpot_s=tpot * (1 + 0.003 * i),
                                      run_id=run)
                s.add(dataclasses.replace(rec, id=new_id()).in_group(f"g-{run}", i, 3),
                      env_key(H100))
            s.finish_run(run, "done")
    assert main(["compare", "tag:run-a", "tag:run-b", "--db", str(db), "--kind",
                 "generate"]) == 5
    assert main(["compare", "tag:run-a", "tag:run-a", "--db", str(db)]) == 0
    assert "TPOT" in capsys.readouterr().out


# -- one real record through the store and every view ---------------------------------------
@pytest.fixture(scope="module")
def real_store(tmp_path_factory):
    from dlbench.env import capture_environment
    from dlbench.measure.stopping import StopRule
    from dlbench.records.generate import GenerateConfig
    from dlbench.workloads.generate import measure
    env = capture_environment(include_topology=False)
    stop = StopRule(min_steps=3, min_seconds=0.0, max_seconds=1.0)
    cfg = GenerateConfig(model="test-llama", batch_size=2, prompt_len=8, output_len=6,
                         precision="fp32", path="static", device="cpu", stop=stop,
                         telemetry_interval_s=None)
    real = dataclasses.replace(measure(cfg, env, idle_baseline=False), run_id="run-real")
    eager = dataclasses.replace(real, id=new_id(), config=dataclasses.replace(cfg, path="eager"),
                                step_times_s=tuple(t * 1.5 for t in real.step_times_s))
    db = tmp_path_factory.mktemp("real") / "real.db"
    with Store(db) as s:
        s.start_run("run-real", "dlbench generate -m test-llama", env, env_key(env), "CPU")
        s.add(real, env_key(env))
        s.add(eager, env_key(env))
        s.finish_run("run-real", "done")
    return db, real


def test_a_real_record_in_every_view(real_store, capsys, tmp_path):
    from dlbench.cli import main
    db, real = real_store
    assert real.ok and real.tpot().n == real.summary().steps * 5
    assert main(["results", "show", "--db", str(db), "latest"]) == 0
    out = capsys.readouterr().out
    assert "speed and latency" in out and "Generation paths against eager" in out
    assert "test-llama" in out
    rows = list(csv.DictReader(io.StringIO(export.to_csv(Store(db).results(), "generate"))))
    assert float(rows[0]["output_tokens_per_s"]) == pytest.approx(real.output_tokens_per_s())
    assert rows[0]["datasheet_bandwidth_gbps"] == ""   # a CPU: no datasheet roof
    html = tmp_path / "report.html"
    assert main(["report", "--db", str(db), "-o", str(html)]) == 0
    page = html.read_text(encoding="utf-8")
    assert "Generation on CPU" in page and "Generation paths against eager" in page
    # one batch and no roof on a CPU without a peak run: neither chart has its data
    assert not re.search(r"<figcaption>Generation on|<figcaption>Decode against", page)
    md = tmp_path / "report.md"
    assert main(["report", "--db", str(db), "--markdown", "-o", str(md)]) == 0
    assert "| model | batch | prompt+output |" in md.read_text(encoding="utf-8")


def test_report_draws_both_charts_of_a_gpu_sweep(tmp_path):
    from dlbench.cli import main
    db, out = tmp_path / "sweep.db", tmp_path / "report.html"
    with Store(db) as s:
        s.start_run("run-gen", "dlbench generate -b 1,4,16", H100, env_key(H100), "H100")
        for r in sweep() + sweep("compile") + [failed_generate()]:
            s.add(r, env_key(H100))
        s.finish_run("run-gen", "done")
    assert main(["report", "--db", str(db), "-o", str(out)]) == 0
    caps = re.findall(r"<figcaption>(.*?)</figcaption>", out.read_text(encoding="utf-8"), re.S)
    gen = [c for c in caps if "Generation on" in c or "Decode against" in c]
    assert len(gen) == 2 and "dlbench generate -b 1,4,16" in gen[0]
