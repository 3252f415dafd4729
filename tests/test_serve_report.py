"""The ``serve`` record and its views on known numbers (tests/fakes/serve_records.py): figures,
the store round trip, the terminal/Markdown tables, the HTML report's charts, the CSV and JSON
exports, the Python API, and ``compare``."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import pytest

from fakes.serve_records import (every_column_records, failed_serve, serve_record,
                                 telemetry_record)

from dlbench.store import RunInfo
from dlbench.records import record_from_dict
from dlbench.records.serve import ServeConfig
from dlbench.report import compare as cmp
from dlbench.report import export
from dlbench.report.html import all_charts, render_html, render_markdown
from dlbench.report.serve_tables import serve_tables
from dlbench.report.tables import tables_for
from dlbench.store import Store


def test_the_figures_of_a_known_point():
    r = serve_record()
    assert r.requests == 8 and r.completed() == 8 and r.failed() == 0
    assert r.window_s == pytest.approx(0.28)
    assert r.request_throughput() == pytest.approx(8 / 0.28)
    assert r.output_tokens_per_s() == pytest.approx(40 / 0.28)
    assert r.total_tokens_per_s() == pytest.approx(600.0)
    assert r.ttft().p50_s == pytest.approx(0.1) and r.e2e().p50_s == pytest.approx(0.14)
    assert r.tpot().mean_s == pytest.approx(0.01) and r.itl().n == 32
    assert r.goodput() == pytest.approx(8 / 0.28) and r.good_fraction()[0] == 1.0
    assert r.slo_at_p99() and r.headline() == pytest.approx(40 / 0.28)


def test_goodput_counts_the_limits_and_never_a_failure():
    r = serve_record(failed=2, slo_ttft_s=0.05)     # every TTFT 100 ms > 50 ms
    assert r.good() == 0 and r.goodput() == 0 and not r.slo_at_p99()
    r = serve_record(failed=2)
    assert r.good() == 6 and r.good_fraction()[0] == pytest.approx(6 / 8)
    assert not r.slo_at_p99()                       # a failure fails MLPerf's judgement
    assert r.failure_reasons() == [("HTTP 500: stub: internal error", 2)]
    r = serve_record(itl_s=0.2)                     # TPOT 200 ms > 100 ms
    assert r.good() == 0 and r.tpot().p99_s == pytest.approx(0.2)


def test_a_record_survives_the_store(tmp_path):
    r = telemetry_record()
    with Store(tmp_path / "s.db") as s:
        s.start_run("run-serve", "dlbench serve", r.env, "k", "H100")
        s.add(r, "k")
        [back] = s.results(kind="serve")
    assert back == r and record_from_dict(json.loads(json.dumps(r.to_dict()))) == r
    assert back.energy_per_output_token_j() == pytest.approx(10.0)
    assert back.net_energy_per_output_token_j() == pytest.approx(7.5)


def test_identity_leaves_out_what_does_not_change_the_measurement():
    a = ServeConfig(model="m", concurrency=4)
    b = dataclasses.replace(a, endpoint="http://other:9000", slo_ttft_s=0.5, warmup_requests=9)
    assert a.key() == b.key() and a.setup_key() == b.setup_key()
    c = dataclasses.replace(a, concurrency=8)
    assert c.key() != a.key() and c.setup_key() == a.setup_key()
    assert dataclasses.replace(a, extra_body={"temperature": 0}).key() != a.key()


def test_the_table_rows_say_the_figures_and_flags():
    recs = [serve_record(), serve_record(None, 20.0, failed=1, late_s=0.05), failed_serve()]
    [main, pct] = serve_tables(recs, "H100")
    ok, rate, bad = main.rows
    assert ok[:7] == ("made-up-lm", "completions", "c4", "16+5", "8/8", "28.6", "142.9")
    assert ok[7:14] == ("100", "100", "10.0", "10.0", "10.0", "10.0", "0.140")
    assert ok[14] == "28.6 (100%)" and ok[15] == "yes" and ok[16] == ""
    assert rate[2] == "20 req/s" and rate[15] == "no"
    assert "1 of 8 failed (1: HTTP 500" in rate[16] and "client behind (8 of 8" in rate[16]
    assert bad[4] == "0" and bad[-1].startswith("exception: the endpoint cannot be used")
    assert "SLO: TTFT <= 2000 ms, TPOT <= 100 ms" in main.notes
    assert [row[4] for row in pct.rows[:4]] == ["TTFT", "TPOT", "ITL", "e2e"]
    assert pct.rows[0][12] == "100-inf"          # 8 samples cannot bound a p99 from above


def test_energy_and_overhead_tables_appear_where_their_data_is():
    stub = serve_record(server={"endpoint": "x", "fixed_length": "ignore-eos", "notes": [],
                                "stub": {"ttft_ms": 20.0, "itl_ms": 5.0}})
    titles = [t.title for t in serve_tables([telemetry_record(), stub])]
    assert titles[2:] == ["Serving: GPU energy per output token",
                          "Serving: the client's own overhead (against dlbench's stub)"]
    energy, over = serve_tables([telemetry_record(), stub])[2:]
    assert energy.rows[0][4:] == ("142.9", "10.0", "7.50", "400.0", "1")
    # measured TTFT 100 ms against a 20 ms stub: 80 ms over; ITL 10 ms against 5: 5 over
    assert over.rows[0][4:9] == ("20 / 5", "80.0", "80.0", "5.00", "5.00")


def test_the_report_draws_the_latency_throughput_and_goodput_charts():
    recs = [serve_record(c) for c in (1, 4, 16)] + \
           [serve_record(None, r, ttft_s=0.1 * r) for r in (5.0, 10.0, 40.0)]
    for i, r in enumerate(recs):
        recs[i] = dataclasses.replace(r, run_id="run-serve")
    runs = [RunInfo(run_id="run-serve", command="dlbench serve --concurrency 1,4,16 --rate 5,10,40")]
    charts = [c for c in all_charts(recs, runs) if "Serving" in c.title or "Goodput" in c.title]
    assert [c.title.split(" ")[0] for c in charts] == ["Serving", "Goodput"]
    assert all("<svg" in c.svg for c in charts) and charts[0].commands == (runs[0].command,)
    page = render_html(recs, runs)
    assert "Serving from" in page and page.count("<figure>") >= 2
    md = render_markdown(recs, runs)
    assert "Serving from" in md and "| made-up-lm | completions | c16 |" in md


def test_tables_for_lays_serve_records_out_with_the_others():
    titles = [t.title for t in tables_for([serve_record()], "H100")]
    assert titles == ["Serving from H100: throughput, latency, goodput",
                      "Serving: latency percentiles with 95% intervals"]


def test_csv_and_json_exports_carry_the_figures():
    recs = every_column_records()
    rows = list(csv.DictReader(io.StringIO(export.to_csv(recs, "serve"))))
    assert list(rows[0]) == [c.name for c in export.columns("serve")]
    conc, rate, dur, bad = rows
    assert conc["load"] == "concurrency" and conc["concurrency"] == "4" and conc["rate"] == ""
    assert conc["failed"] == "2" and conc["first_failure"] == "HTTP 500: stub: internal error"
    assert float(conc["j_per_output_token"]) == pytest.approx(400 / 30)
    assert conc["flags"] == "failed_requests"
    assert rate["rate"] == "20.0" and rate["slo_e2e_ms"] == "30000.0"
    assert rate["ttft_p99_high_ms"] != "" and float(rate["offered_rate"]) == pytest.approx(20.0)
    assert dur["duration_s"] == "2.0" and dur["num_requests"] == ""
    assert dur["server_launch"] == "vllm serve m --port 8000"
    assert bad["status"] == "error" and bad["requests"] == "" and bad["error_type"] == "exception"
    docs = json.loads(export.to_json(recs))
    assert docs[0]["figures"]["completed"] == 6 and len(docs[1]["ttft_s"]) == 400


def test_to_dataframe_returns_the_serve_table(tmp_path):
    pytest.importorskip("pandas")
    from dlbench.api import to_dataframe
    df = to_dataframe(every_column_records())
    assert list(df.columns) == [c.name for c in export.columns("serve")] and len(df) == 4


def _group(recs, name):
    return [r.in_group(name, i, len(recs)) for i, r in enumerate(recs)]


def test_compare_judges_throughput_ttft_and_tpot_across_repeats():
    a = _group([serve_record(spread=0.01 * k) for k in (1, 2, 3)], "ga")
    b = _group([serve_record(itl_s=0.02, spread=0.01 * k) for k in (1, 2, 3)], "gb")
    c = cmp.compare(a, b)
    by = {p.label.split()[-1]: p for p in c.pairs}
    assert set(by) == {"16+5", "TTFT", "TPOT"}
    assert by["TPOT"].regression and by["TPOT"].ratio == pytest.approx(0.5, rel=0.02)
    assert by["16+5"].regression                        # slower tokens: fewer tok/s
    assert not by["TTFT"].regression                    # the first token did not change
    assert all(p.basis == cmp.ACROSS_PROCESSES for p in c.pairs)
    assert c.only_a == () and c.only_b == ()


def test_compare_of_one_run_a_side_is_inconclusive_never_a_regression():
    c = cmp.compare([serve_record(spread=0.01)], [serve_record(itl_s=0.05, spread=0.01)])
    assert c.pairs and all(p.inconclusive and not p.regression for p in c.pairs)
    table = cmp.comparison_table(c)
    assert [row[4] for row in table.rows] == ["output tok/s", "TTFT mean", "TPOT mean"]
    assert table.rows[2][2:4] == ("10.000 ms", "50.00 ms")
