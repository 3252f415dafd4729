"""docs/reports.md and docs/serving.md against what they state. Rules and defaults are checked
against the code constant or parser default they name; measured figures against the committed
files they come from (src/dlbench/reference/*_spread.json, results/pt2.14-cpu/gate-cpu.json,
the H100 store, the serving campaign's store). The gate table and the H100 client-overhead
figure are checked elsewhere (tests/test_gate_experiment.py, tests/test_serve_page.py)."""

from __future__ import annotations

import inspect
import json
import math
import statistics
from pathlib import Path

import pytest

from fakes.pages import H, assert_says, store_fixture

from dlbench.cli import build_parser
from dlbench.commands import common as exits
from dlbench.jobs import serve_runs as jobs
from dlbench.launch import server as launch
from dlbench.launch import signals
from dlbench.measure import serving as sv
from dlbench.measure.stats import t_quantile
from dlbench.records import serve as serve_rec
from dlbench.report import compare as cmp
from dlbench.store import LOCK_WAIT_ENV, LOCK_WAIT_S
from dlbench.workloads.serve import load

ROOT = Path(__file__).resolve().parents[1]
REPORTS = (ROOT / "docs" / "reports.md").read_text()
SERVING = (ROOT / "docs" / "serving.md").read_text()
REF = ROOT / "src" / "dlbench" / "reference"
GATE = json.loads((ROOT / "results" / "pt2.14-cpu" / "gate-cpu.json").read_text())
H100_MODEL = "NVIDIA H100 80GB HBM3"

store = store_fixture(H.H100)


@pytest.fixture(scope="module")
def serve_store(tmp_path_factory):
    """The serving campaign's store: the sweep against `transformers serve` and the stub points."""
    s = H.open_store(ROOT / "results", H.H100_SERVE, tmp_path_factory.mktemp("serve"))
    yield s
    s.close()


def reports_say(text: str) -> None:
    assert_says(REPORTS, text)


def serving_says(text: str) -> None:
    assert_says(SERVING, text)


def default(command: str, flag: str):
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    [action] = [a for a in sub._actions if flag in a.option_strings]
    return action.default


# -- docs/reports.md ------------------------------------------------------------------------------
def test_compare_rules():
    assert cmp.DEFAULT_THRESHOLD == 0.05 and cmp.DEFAULT_ALPHA == 0.05
    assert default("compare", "--threshold") == cmp.DEFAULT_THRESHOLD
    reports_say(f"more than `--threshold` ({cmp.DEFAULT_THRESHOLD:g}); "
                f"`--alpha` ({cmp.DEFAULT_ALPHA:g}) is the test's level")
    reports_say(f"Exit codes: **{exits.EXIT_REGRESSION}** when there is at least one regression, "
                f"**{exits.EXIT_NO_MATCH}** when nothing was compared")
    reports_say(f"{exits.EXIT_OK} otherwise")
    reports_say(f"{exits.EXIT_USAGE} for an unknown run, tag or store")


def test_one_process_a_side():
    # the kinds judged by processes, and those whose commands take --repeat
    reports_say("(throughput, generate, serve, scaling, net, comm, peak)")
    assert set(cmp.BY_PROCESSES) == {"throughput", "generate", "serve", "scaling", "net", "comm",
                                     "peak"}
    no_repeat = [k for k in cmp.BY_PROCESSES if k not in cmp.REPEATABLE]
    assert no_repeat == ["net", "comm", "peak"]
    reports_say("Net, comm and peak have no `--repeat`")
    for command in ("throughput", "generate", "serve", "scale"):
        assert default(command, "--repeat") in (None, 1)
    # the former test's false alarms, from the committed experiment
    fa = GATE["summary"]["former_one_process"]["false_alarms"]
    reports_say(f"called identical code a regression in {fa['k']} of its {fa['n']} trials")
    # the stored spread: one entry, its figure, its configs, what it adds to two one-process sides
    spreads = json.loads((REF / "run_spread.json").read_text())
    kinds = {k: v for k, v in spreads.items() if k not in ("about", "sources")}
    assert list(kinds) == ["throughput"] and list(kinds["throughput"]) == [H100_MODEL]
    e = kinds["throughput"][H100_MODEL]
    widest = max(e["configs"], key=lambda c: c["rel_sd"])
    assert widest["rel_sd"] == e["rel_sd"] and widest["config"].startswith("vgg16 b512")
    assert "processes' own intervals are <= 1%" in spreads["about"]
    words = {3: "three", 5: "five"}
    reports_say(f"It holds one entry: throughput on the {H100_MODEL.removeprefix('NVIDIA ')}, sd {e['rel_sd']:.2%} of one "
                f"process's figure (vgg16 b512, {e['df']} degrees of freedom; "
                f"{words[len(e['configs'])]} configs")
    added = t_quantile(0.975, e["df"]) * e["rel_sd"] * math.sqrt(2)
    reports_say(f"two one-process H100 throughput runs get +-{added:.2%} added to their interval")
    reports_say("(processes whose own interval is at most 1%")


def test_the_gate_experiment_prose():
    s, cfg = GATE["summary"], GATE["config"]
    assert cfg["batch"] == 32 and cfg["threads"] == 1 and cfg["slowdown"] == 0.05
    reports_say("batch 32, one torch thread")
    reports_say(f"18 trials in {GATE['wall_s'] / 60:.1f} minutes")
    assert len(GATE["trials"]) == 18 and GATE["environment"]["cpu_logical_cores"] == 2
    assert GATE["environment"]["packages"]["torch"].startswith("2.14.1")
    reports_say("2-core development VM (AMD EPYC, torch 2.14.1)")
    assert 1 / (1 + cfg["slowdown"]) == pytest.approx(0.952, abs=5e-4)
    reports_say("B/A is about 0.952")
    sds = [statistics.stdev(side["figures"]) / statistics.mean(side["figures"])
           for t in GATE["trials"] for side in t["sides"].values()]
    sd = statistics.median(sds)
    reports_say(f"one process's figure varied by {sd:.1%}")
    ratios = [t["identical"]["processes"]["ratio"] for t in GATE["trials"]]
    reports_say(f"anywhere from {min(ratios):.2f}x to {max(ratios):.2f}x across processes")
    reports_say(f"the mean B/A over the trials was {s['mean_ratio']['identical']:.3f} for identical "
                f"code and {s['mean_ratio']['slowed']:.3f} for the slowed model")
    # processes a side to detect 5% at 90% power (two-sided 5% level), with that sd
    z = t_quantile(0.975, 1e9) + t_quantile(0.90, 1e9)
    n = 2 * (z * sd / cfg["slowdown"]) ** 2
    assert round(n, -1) == 70
    reports_say(f"Three processes a side of sd {sd:.1%} cannot resolve 5% (about 70 a side would)")
    det, fa = s["former_one_process"]["detections"]["k"], s["former_one_process"]["false_alarms"]["k"]
    reports_say(f"The former test's {det} detections came with {fa} false alarms while the slowed "
                f"model's mean B/A was {s['mean_ratio']['slowed']:.3f}")
    hi = s["processes"]["false_alarms"]["wilson95"][1]
    reports_say(f"18 trials can only bound that rate by {hi:.1%}")
    reports_say(f"It did not detect the 5% slowdown: {s['processes']['detections']['k']} of 18")


def test_two_cards(store):
    spread = json.loads((REF / "card_spread.json").read_text())["throughput"][H100_MODEL]
    widest = max(spread["configs"], key=lambda c: c["rel_halfwidth"])
    assert widest["rel_halfwidth"] == spread["rel_halfwidth"]
    assert widest["config"].startswith("gpt2 b64") and "compiled" in widest["config"]
    assert widest["cards"] == 4
    recs = [store.get(i) for i in widest["records"]]
    assert len({r.env["gpus"][0]["uuid"] for r in recs}) == 4
    halfwidths = [r.summary().rel_halfwidth for r in recs]
    flags = {tuple(H.record_flags(r)) for r in recs}
    assert flags == {("throttled (power)", "one process")}
    reports_say(f"on four H100s the compiled GPT-2 b64 config measured {widest['min']:,.0f}-"
                f"{widest['max']:,.0f} tok/s while each record stated "
                f"+-{min(halfwidths) * 100:.1f}-{max(halfwidths):.1%} (each record flagged "
                f"{', '.join(next(iter(flags)))})")
    reports_say(f"across {len(spread['configs'])} configs measured on three or more H100s the "
                f"widest range was +-{spread['rel_halfwidth']:.2%} of the mean")
    assert all(c["cards"] >= 3 for c in spread["configs"])


def test_what_protects_the_store():
    assert LOCK_WAIT_S == 60.0
    reports_say(f"retried with backoff for up to {LOCK_WAIT_S:.0f} s (`{LOCK_WAIT_ENV}` sets it)")
    reports_say(f"refuse (exit {exits.EXIT_USAGE})")


# -- docs/serving.md ------------------------------------------------------------------------------
def test_what_is_measured_rules():
    assert default("serve", "--burstiness") == 1.0
    serving_says("shape `--burstiness` (1: a Poisson process, the default")
    assert default("serve", "--warmup") == 2
    serving_says("after `--warmup` requests (default 2)")
    slo = sv.Slo()
    assert (slo.ttft_s, slo.tpot_s) == (2.0, 0.1) == tuple(sv.MLPERF_LLAMA31_8B_SERVER.values())
    serving_says(f"TTFT <= {slo.ttft_s * 1e3:.0f} ms and TPOT <= {slo.tpot_s * 1e3:.0f} ms")
    inter = sv.parse_slo("ttft=500ms,tpot=30ms")
    assert (inter.ttft_s, inter.tpot_s) == (0.5, 0.03)
    # a p99's upper bound at 95% needs 368 samples; exact binomial tails up to 2,000
    assert sv.quantile_ranks(367, 0.99)[1] is None and sv.quantile_ranks(368, 0.99)[1] is not None
    assert sv.quantile_ranks(100, 0.99)[1] is None
    serving_says("a p99 needs at least 368 samples to have an upper bound at 95%")
    serving_says(f"exact binomial tails up to {sv.EXACT_MAX_N:,} samples")


def test_the_number_of_requests_a_point_sends():
    # no parser default: the plan fills one in per point where neither flag is given
    assert default("serve", "--num-requests") is None and default("serve", "--duration") is None
    assert jobs.MIN_DEFAULT_REQUESTS == 50
    points = jobs.plan(model="m", apis=["completions"], concurrencies=[1, 4, 8, 16], rates=[1, 4],
                       prompt_lens=[128], output_lens=[128])
    got = {p.load_label: p.num_requests for p in points}
    assert got == {"c1": 50, "c4": 50, "c8": 80, "c16": 160, "1 req/s": 50, "4 req/s": 120}
    timed = jobs.plan(model="m", apis=["completions"], concurrencies=[8], rates=[],
                      prompt_lens=[128], output_lens=[128], duration_s=20.0)
    assert [(p.num_requests, p.duration_s) for p in timed] == [(None, 20.0)]
    serving_says("Each point sends `--num-requests` requests (default: 10 per request in flight, "
                 f"or 30 s of arrivals, at least {jobs.MIN_DEFAULT_REQUESTS}) or sends for "
                 "`--duration` seconds")


def test_starting_the_server_rules():
    assert launch.POLL_S == 0.5 and launch.HEALTH_PATHS == ("/health", "/v1/models")
    serving_says("dlbench polls `/health`, then `/v1/models`, every half second")
    assert default("serve", "--launch-timeout") == launch.HEALTH_TIMEOUT_S == 600.0
    serving_says("(`--launch-timeout`, default 600 s)")
    assert signals.STOP_GRACE_S == 3.0
    assert inspect.signature(signals.stop).parameters["grace_s"].default == signals.STOP_GRACE_S
    serving_says(f"SIGTERM to its process group, SIGKILL after {signals.STOP_GRACE_S:.0f} s, "
                 "every process it started")
    serving_says(f"exit {exits.EXIT_INTERRUPTED}, the points measured kept")
    serving_says(f"(exit {exits.EXIT_USAGE}, nothing measured)")


def test_the_client_rules():
    assert load.LAG_PERIOD_S == 0.005
    serving_says("how late a 5 ms sleep wakes")
    assert serve_rec.LATE_FRACTION == 0.01 and default("serve", "--late-threshold") == 0.010
    serving_says("more than 1% of requests were sent later than `--late-threshold` (10 ms)")
    # the 2-core stub table had no committed record behind it: the page no longer quotes one
    assert "40,584" not in SERVING and "2-core CPU" not in SERVING


def test_transformers_serve_refuses_unknown_fields(serve_store):
    sweep = serve_store.results(run_id=H.SERVE_RUN, kind="serve")
    assert sweep and all(r.server["fixed_length"] == "generation-config" for r in sweep)
    assert all(any("refused ignore-eos (HTTP 422" in n for n in r.server["notes"]) for r in sweep)
    serving_says("`transformers serve` (which refuses unknown fields with HTTP 422)")


def test_the_client_overhead_on_the_h100_host(serve_store):
    """The stub points the page quotes (the overhead figure itself is checked with the serving
    campaign's page, tests/test_serve_page.py)."""
    stub = {r.config.load_label: r for r in
            serve_store.results(run_id=H.SERVE_STUB_RUN, kind="serve")}
    assert list(stub) == ["c1", "c16", "c64", "c256"]
    [cores] = {r.env["cpu_logical_cores"] for r in stub.values()}
    [out] = {r.config.output_len for r in stub.values()}
    [seconds] = {r.config.duration_s for r in stub.values()}
    assert all(H.serve_record_flags(r)[-1] == "one process" for r in stub.values())
    serving_says(f"On the {cores}-core H100 host of the [serving campaign]"
                 f"(results/2026-11-h100-serve.md) ({out} output tokens, {seconds:.0f} s a point, "
                 "each point one process)")
    # the event loop's own lag reached the late threshold at c256 only
    lagged = [label for label, r in stub.items()
              if r.client["p99_s"] >= r.config.late_threshold_s]
    assert lagged == ["c256"]
    serving_says("at c256 the event loop lagged too")


def test_failures_rules():
    assert default("serve", "--stall-timeout") == 120.0
    assert default("serve", "--request-timeout") == 600.0
    serving_says("a stream silent for `--stall-timeout` (120 s)")
    serving_says("a request past `--request-timeout` (600 s)")
    src = (ROOT / "src/dlbench/workloads/serve/client.py").read_text()
    assert "one_line(r.body)[:160]" in src
    serving_says("`HTTP 500: <the first 160 characters of the body>`")
    serving_says(f"ends with exit code {exits.EXIT_FAILED_RESULTS} when a point failed")


def test_records_and_comparisons():
    assert "serve" in cmp.REPEATABLE
    serving_says(f"gates (exit {exits.EXIT_REGRESSION}) on a regression")
    reports_say("| serve | output tokens/s | as throughput, on the requests' end-to-end times | |")
