"""The CPU page's prose against its records: the figures it quotes are recomputed here from the
committed store, fidelity.json and the what-if check (its tables are rendered from the same store
by tests/test_readme_claims.py)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, store_fixture

from dlbench.report.network import _err, _kb
from dlbench.report.table import fmt_ms
from dlbench.whatif import check

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.CPU_PAGE).read_text()
FOLDER = ROOT / "results" / H.CPU
NET_RUNS = dict(zip((2, 4), H.CPU_NET_RUNS))  # hosts -> run
SHAPED = ("100mbit", "10mbit")


def says(text: str) -> None:
    assert_says(PAGE, text)


store = store_fixture(H.CPU)


@pytest.fixture(scope="module")
def suite(store):
    return store.results(run_id=H.CPU_SUITE_RUN, kind="throughput")


@pytest.fixture(scope="module")
def net(store):
    """(hosts, link, strategy) -> the net record, in stored order."""
    recs = [r for run in NET_RUNS.values() for r in store.results(run_id=run, kind="net")]
    assert len(recs) == 16 and all(r.ok for r in recs)
    return {(r.config.hosts, r.config.link, r.config.strategy): r for r in recs}


def kb(x: float) -> str:
    return f"{x / 1e3:.0f}"


def span(lo: float, hi: float, fmt: str = ".0f", sep: str = "-") -> str:
    return f"{lo:{fmt}}{sep}{hi:{fmt}}"


def test_the_opening(suite, net):
    assert {r.env["cpu_logical_cores"] for r in [*suite, *net.values()]} == {2}
    assert {r.env["packages"]["torch"] for r in suite} == {"2.14.1+cu130"}
    says("A 2-thread virtual machine shared with other jobs")
    says("torch 2.14.1 (CPU)")
    assert all(r.stop_reason == "converged" and H.record_flags(r) == ["one process"]
               for r in suite)
    says("Every window of the cpu suite shown converged")
    assert not any(f.startswith("noisy") for r in net.values() for f in H._net_flags(r))
    assert all("one process" in H.record_flags(r) for r in suite)
    assert all("one process" in H._net_flags(r) for r in net.values())
    says("each figure comes from one process")


def test_the_environment(suite, net):
    fidelity = json.loads((FOLDER / "fidelity.json").read_text())["env"]
    left, right = [*(r.env for r in suite), fidelity], [r.env for r in net.values()]
    assert {e["cpu_model"] for e in left} == {"AMD EPYC"}
    assert {e["cpu_model"] for e in right} == {"Intel(R) Xeon(R) Processor"}
    assert {e["hostname"] for e in left + right} == {"vm"}   # "the same VM"
    says("| CPU | AMD EPYC, 2 threads | Intel Xeon, 2 threads (the same VM, later) |")
    assert {e["torch_threads"] for e in right} == {e["torch_threads"] for e in left[:-1]} == {2}
    assert fidelity["torch_threads"] == 1
    says("| torch | 2.14.1+cu130, 2 threads (the fidelity run: 1) | 2.14.1+cu130, 2 threads |")
    for e in left + right:
        assert e["packages"]["torch"] == "2.14.1+cu130" and e["python"] == "3.11.7"
        assert e["kernel"].startswith("6.18.44-") and e["gpu_count"] == 0
    says("| Python, kernel | 3.11.7, Linux 6.18.44 | 3.11.7, Linux 6.18.44 |")


def wall_s(run) -> str:
    wall = datetime.fromisoformat(run.finished_at) - datetime.fromisoformat(run.started_at)
    return f"{wall.total_seconds():.0f}"


def test_the_cpu_suite(store, suite):
    runs = {r.run_id: r for r in store.runs()}
    run, first = runs[H.CPU_SUITE_RUN], runs[H.CPU_SUITE_FIRST_RUN]
    assert run.suite == first.suite == "cpu" and run.command.startswith("dlbench run ")
    assert {(r.config.precision, r.config.compile) for r in suite} == {("fp32", None)}
    says(f"runs the `cpu` suite (fp32, eager; wall time {wall_s(run)} s; run {run.run_id})")
    sizes = {r.config.model: r.config.input_size for r in suite}
    assert sizes["resnet50"] == sizes["vit_b_16"] == 112 and sizes["gpt2"] == sizes["bert-base"] == 64
    says("ResNet-50 and ViT-B/16 at 112 px, BERT and GPT-2 at sequences of 64")
    steps = [len(r.step_times_s) for r in suite]
    widths = [r.summary().rel_halfwidth * 100 for r in suite]
    says(f"Each window ran {span(min(steps), max(steps), sep=' to ')} steps to an interval of "
         f"{span(min(widths), max(widths), '.2f')}%, inside the suite's 5% target")
    assert max(widths) < 5
    old = store.results(run_id=first.run_id, kind="throughput")
    from dlbench.models import get_model
    assert {r.config.input_size or get_model(r.config.model).input_size for r in old} == {224, 128}
    assert all(H.record_flags(r)[0] == "noisy (time cap)" for r in old)
    steps = [len(r.step_times_s) for r in old]
    widths = [r.summary().rel_halfwidth * 100 for r in old]
    says(f"(224 px, sequences of 128; run {first.run_id}, wall time {wall_s(first)} s, kept in "
         f"the store)")
    says(f"its time cap stopped every window after {span(min(steps), max(steps), sep=' to ')} "
         f"steps, at intervals of {span(min(widths), max(widths))}%, each flagged "
         "`noisy (time cap)`")


def test_fidelity():
    d = json.loads((FOLDER / "fidelity.json").read_text())
    c, rounds = d["config"], d["rounds"]
    assert [r["dlbench_first"] for r in rounds] == [i % 2 == 0 for i in range(len(rounds))]
    says(f"({c['model']}, batch {c['batch_size']}, {c['precision']}, one thread, "
         f"{len(rounds)} alternating rounds of dlbench and a bare loop")
    says(f"median ratio dlbench / bare = **{d['median_ratio']:.4f}**")
    ratios = [r["ratio"] for r in rounds]
    assert (min(ratios), max(ratios)) == (d["min_ratio"], d["max_ratio"])
    says(f"Single rounds range from {min(ratios):.2f} to {max(ratios):.2f} on this shared VM")


def test_training_across_emulated_slow_links(store, net):
    runs = {r.run_id: r for r in store.runs()}
    for hosts, steps in ((2, 30), (4, 20)):
        run = runs[NET_RUNS[hosts]]
        assert f"--hosts {hosts} " in run.command and f"--steps {steps} " in run.command
        assert run.tag == f"net-{hosts}"
        says(f"{run.run_id} ({hosts} hosts)")
    says("--strategy ddp,ps --steps 30` and the same with `--hosts 4 --steps 20`")
    r = net[(2, "unshaped", "ddp")]
    assert {(x.param_count, x.grad_bytes, x.config.base.batch_size, x.config.warmup_steps,
             x.config.base.optimizer, x.config.base.precision) for x in net.values()} == {
        (r.param_count, r.grad_bytes, 8, 3, "sgd", "fp32")}
    says(f"`tiny_mlp`: {r.param_count:,} parameters, {r.grad_bytes:,} bytes of fp32 gradients; "
         "batch 8 per host, 3 warm-up steps, SGD")
    assert all(len(x.topology["hosts"]) == x.config.hosts for x in net.values())

    # the bytes: the ring's share of the gradient, then what the counters read
    ring = {n: 2 * (n - 1) / n * r.grad_bytes for n in (2, 4)}
    says(f"{ring[2] / 1e3:.1f} kB at 2 hosts and {ring[4] / 1e3:.1f} kB at 4 (1.5x the gradient)")

    def ddp_tx(n, links):
        return [b for (h, link, s), x in net.items() if (h, s) == (n, "ddp") and link in links
                for b in x.tx_per_step()]
    fast = {n: {kb(b) for b in ddp_tx(n, ("unshaped", "1gbit"))} for n in (2, 4)}
    assert fast == {2: {"201"}, 4: {"304"}}
    slow = {n: ddp_tx(n, SHAPED) for n in (2, 4)}
    assert {kb(b) for b in slow[4]} == {"323"}
    headers = [b / ring[n] - 1 for n in (2, 4) for b in slow[n]]
    says(f"the counters read 201 and 304 kB unshaped and at 1 Gbit/s, and "
         f"{span(min(slow[2]) / 1e3, max(slow[2]) / 1e3)} and 323 kB at 10-100 Mbit/s, "
         f"{span(min(headers) * 100, max(headers) * 100)}% above the ring's bytes")
    shard = net[(2, "unshaped", "ps")].shard_bytes  # ps: each host owns whole tensors
    uneven = {n: [max(x.tx_per_step()) / min(x.tx_per_step()) for (h, _, s), x in net.items()
                  if (h, s) == (n, "ps")] for n in (2, 4)}
    assert {f"{u:.1f}" for u in uneven[4]} == {"2.6"}
    says(f"at 4 hosts the host owning the first layer ({shard[0] / sum(shard):.1%} of the "
         f"parameters) sends 2.6x what the lightest one sends "
         f"({span(min(uneven[2]), max(uneven[2]), '.1f')}x at 2 hosts)")

    # the parameter server against the ring at 10 Mbit/s, with the flags of its rows
    ps_vs_ddp = [net[(n, "10mbit", "ps")].step_s / net[(n, "10mbit", "ddp")].step_s
                 for n in (2, 4)]
    cv = [H._net_flags(net[(n, "10mbit", "ps")])[0] for n in (2, 4)]
    assert [H._net_flags(net[(n, "10mbit", "ddp")]) for n in (2, 4)] == [["one process"]] * 2
    says(f"{ps_vs_ddp[0]:.1f}x DDP's step at 2 hosts and {ps_vs_ddp[1]:.1f}x at 4 hosts at "
         f"10 Mbit/s (ps's rows there flagged `{cv[0]}` and `{cv[1]}`)")

    # the same losses on every link and strategy, at each host count
    assert all(len({tuple(x.losses) for (h, _, _), x in net.items() if h == n}) == 1
               for n in (2, 4))

    # software-bound and wire-bound rows: their intervals, spreads and flags
    def pick(links):
        return [x.summary() for (_, link, _), x in net.items() if link in links]
    soft, wire = pick(("unshaped", "1gbit")), pick(SHAPED)
    w = [s.rel_halfwidth * 100 for s in soft]
    c = [s.cv * 100 for s in soft]
    assert all(s.noisy for s in soft)
    says(f"hence the ±{span(min(w), max(w))}% intervals and step spreads of "
         f"{span(min(c), max(c))}%")
    w = [s.rel_halfwidth * 100 for s in wire]
    noisy = [s.cv * 100 for s in wire if s.noisy]
    says(f"the shaped 10-100 Mbit/s rows are within ±{min(w):.1f}-{max(w):.0f}% (four of the "
         f"eight flagged `cv {span(min(noisy), max(noisy))}%`)")
    assert len(noisy) == 4
    says("An earlier run of the same commands on this VM, under another load, was not recorded: "
         "no figure of it is quoted here")


def test_the_what_if_check(net):
    rows = check.check_net(list(net.values()))
    text = (FOLDER / "whatif-check.txt").read_text()
    errors = check.error_summary(rows)
    none, _, fit = check.skill_summary(rows)
    for k in (none, fit):
        assert f"vs baseline, {k.line()}" in text
    says(f"perfect scaling (the compute alone, no communication), is off by "
         f"{errors['perfect scaling']:.1%} over every row")
    assert none.rows == len(rows) == 16
    says(f"the model with the probe's latency is closer in {none.closer} of {none.rows} rows "
         f"({none.model:.1%}), with the fitted latency in {fit.closer} of {fit.rows} "
         f"({fit.model:.1%} against the baseline's {fit.baseline:.1%})")
    flags = [H._net_flags(x)[0] for x in net.values() if x.summary().noisy]
    cvs = [int(f.removeprefix("cv ").rstrip("%")) for f in flags]
    says(f"with their flags: `cv {min(cvs)}-{max(cvs)}%` on {len(cvs)} of the {len(rows)} rows, "
         "each one process")
    # "one bucket": the whole gradient fits DDP's first bucket
    assert all(x.grad_bytes < x.config.bucket_mb * 1e6 for x in net.values())

    for r in rows:
        fitted = ("fit | -" if r.link == "unshaped"
                  else f"{fmt_ms(r.predicted_fit_s)} | {_err(r.error_fit)}")
        says(f"| {r.ranks} | {r.link} | {r.strategy} | {fmt_ms(r.measured_s)} | "
             f"{fmt_ms(r.predicted_none_s)} | {_err(r.error_none)} | {fitted} | "
             f"{_kb(r.measured_bytes)} | {_kb(r.predicted_bytes)} | {_err(r.bytes_error)} |")

    byte_errors = [abs(r.bytes_error) for r in rows]
    wire = [abs(r.error_none) for r in rows if r.link in SHAPED]
    says(f"Mean absolute error: **bytes {errors['bytes']:.1%}** (every row within "
         f"{max(byte_errors):.1%}); step time with the probe's latency "
         f"**{sum(wire) / len(wire):.1%} at 10-100 Mbit/s** (every row within "
         f"{max(wire):.0%}), {errors['none']:.0%} over all rows; with the fitted latency "
         f"{errors['fitted latency']:.0%} over the {fit.rows} rows from 1 Gbit/s down")
    assert fit.rows == len([r for r in rows if r.link != "unshaped"])

    # the fitted cost per message beside the probe's round trip on the unshaped link it was
    # fitted on
    per_msg = {(r.ranks, r.strategy): r.fitted_latency_s for r in rows}
    rtt = {n: net[(n, "unshaped", "ddp")].probe["rtt_s"] for n in (2, 4)}
    assert all(net[(n, "unshaped", "ps")].probe["rtt_s"] == rtt[n] for n in (2, 4))
    times = [a / rtt[n] for (n, _), a in per_msg.items()]
    lat = [a * 1e3 for a in per_msg.values()]
    says(f"{min(lat):.2f}-{max(lat):.2f} ms per message as fitted, {min(times):.0f} to "
         f"{max(times):.0f} times the round trip the probe's TCP ping-pong measured on the same "
         f"unshaped bridge ({rtt[2] * 1e6:.0f} us at 2 hosts, {rtt[4] * 1e6:.0f} us at 4)")
    assert re.search(r"\d\.\d\d ms/msg", text)  # the committed check names the fitted costs


def test_the_readme_quotes_the_same_suite(store, suite):
    readme = (ROOT / "README.md").read_text()
    runs = {r.run_id: r for r in store.runs()}
    widths = [r.summary().rel_halfwidth * 100 for r in suite]
    old = [r.summary().rel_halfwidth * 100
           for r in store.results(run_id=H.CPU_SUITE_FIRST_RUN, kind="throughput")]
    assert_says(readme, f"(`dlbench run`, wall time {wall_s(runs[H.CPU_SUITE_RUN])} s, the VM "
                f"otherwise idle) converged in every window (±{span(min(widths), max(widths), '.2f')}%")
    assert_says(readme, f"stopped by its time cap in every window, ±{span(min(old), max(old))}%")
