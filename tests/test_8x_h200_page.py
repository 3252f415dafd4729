"""The eight-H200 page's prose against its records: the figures it quotes outside its generated
table are recomputed here from the committed store and the what-if check committed beside it
(the generated table is checked by tests/test_readme_claims.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, environment_rows, store_fixture

from dlbench.reference import spec_for_env
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.telemetry.summary import power_check, window

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs/results/2026-11-8x-h200.md").read_text()
FOLDER = ROOT / "results" / H.H200_8
SCALE_RUN, COMM_RUN, AB_RUN = "cb8a0534e661", "f846c96c833c", "9afe37ea2e35"
STRATEGY_RUNS = ("299cfb08a8b2", "696f4e4e21da")


def says(text: str) -> None:
    assert_says(PAGE, text)


store = store_fixture(H.H200_8)


@pytest.fixture(scope="module")
def runs(store):
    return {r.run_id: r for r in store.runs()}


@pytest.fixture(scope="module")
def scaled(store):
    """(model, GPUs) -> the ddp record of the scaling run."""
    return {(r.config.model, r.config.gpus): r
            for r in store.results(run_id=SCALE_RUN, kind="scaling")}


def command(run) -> str:
    """The run's command as the page gives it: without the options of the harness."""
    return run.command.split(" --timeout")[0].split(" --db")[0]


def gpus(r) -> list[dict]:
    return r.telemetry["summary"]["gpus"]


def span(values) -> str:
    """``7.7-14.9%``: the range of fractions, one decimal, as the page writes it."""
    lo, hi = f"{min(values) * 100:.1f}", f"{max(values) * 100:.1f}"
    return f"{lo}%" if lo == hi else f"{lo}-{hi}%"


def checks(r) -> list[dict]:
    """Each GPU's counter mean power against its power samples' over the record's window."""
    return [power_check(g, *window(r.telemetry)) for g in r.telemetry["gpus"]]


def test_what_was_measured_and_what_was_not(store, runs, scaled):
    assert set(runs) == {SCALE_RUN, COMM_RUN, AB_RUN, *STRATEGY_RUNS}
    assert set(scaled) == {(m, n) for m in ("resnet50", "vgg16") for n in (1, 8)}
    says("two models at 1 and 8 GPUs, collectives at 8 ranks, and the strategies at 1 and 2 GPUs")
    assert {r.config.ranks for r in store.results(kind="comm")} == {8}
    ab = runs[AB_RUN]
    assert (ab.status, ab.results) == ("interrupted", 0) and not store.results(run_id=AB_RUN)
    assert "--gpus 8 --interconnect" in ab.command
    says(f"the interconnect A/B at 8 GPUs (run {AB_RUN} was cut by a time limit before its "
         "first result; it holds no rows)")
    # "the other models at 8 GPUs, fp32, and time to accuracy at 8 GPUs": none in the store
    every = store.results(kind="scaling")
    assert {r.config.model for r in every if r.config.gpus == 8} == {"resnet50", "vgg16"}
    assert {r.config.base.precision for r in every} == {"bf16"} and not store.results(kind="train")
    says("the other models at 8 GPUs, fp32, and time to accuracy at 8 GPUs")
    # the script's GPU counts on an eight-GPU host
    script = (ROOT / "benchmarks" / "multi_gpu.sh").read_text()
    counts = script[script.index("counts() {"):].split("\n}\n")[0] + "\n}"
    out = subprocess.run(["bash", "-c", f"n=8\n{counts}\ncounts"], capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == "1,2,4,8"
    says("(every model at 1, 2, 4 and 8 GPUs, fp32, the interconnect A/B at 8)")


def test_the_environment(store, scaled):
    recs = store.results(kind="scaling") + store.results(kind="comm")
    env = scaled[("resnet50", 8)].env
    cards = env["gpus"]
    assert [g["name"] for g in cards] == ["NVIDIA H200"] * 8
    (gib,), (sms,), (watts,), (clock,) = ({g[k] for g in cards} for k in (
        "memory_total_bytes", "sm_count", "power_limit_w", "max_sm_clock_mhz"))
    spec = spec_for_env(env)[0]
    assert spec.source.startswith("NVIDIA H200 Tensor Core GPU datasheet")
    says(f"| GPUs | 8x NVIDIA H200 ({spec.memory_gb} GB on NVIDIA's datasheet, "
         f"{gib / 2**30:.1f} GiB as torch reports it; {sms} SMs; power limit {watts:.0f} W; "
         f"SM clock up to {clock:,} MHz) |")
    assert {r.env["nccl"] for r in recs} == {env["nccl"]}  # every record's, comm's too
    for row in environment_rows(env):
        says(row)
    off = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
           "NVSHMEM_DISABLE_NVLS": "1"}
    assert all(r.launch_env == off for r in recs)
    says("Every rank ran with `" + " ".join(f"{k}={v}" for k, v in off.items()) + "`")


def test_the_scaling_windows(runs, scaled):
    run = runs[SCALE_RUN]
    says(f"`{command(run)}` (ddp, eager, batch per GPU; run {SCALE_RUN})")
    opt = command(run).split()
    value = lambda flag: opt[opt.index(flag) + 1]  # noqa: E731
    says(f"at least {value('--min-steps')} steps and {value('--min-time')} s, at most "
         f"{value('--max-time')} s.")
    recs = list(scaled.values())
    every = [g for r in recs for g in gpus(r)]
    assert all(g["throttle"]["fractions"]["power"] == 1.0
               and g["throttle"]["reasons"] == ["sw_power_cap"] for g in every)
    assert all("throttled (power)" in H.record_flags(r) for r in recs)
    (cap,) = {g["power_limit_w"] for g in every}
    (top,) = {c["max_sm_clock_mhz"] for r in recs for c in r.env["gpus"]}
    clocks = [g["mean_sm_clock_mhz"] for g in every]
    says(f"NVML reported the {cap:.0f} W software power cap holding the clocks back on every GPU "
         f"(each GPU's mean SM clock over its window {min(clocks):,.0f}-{max(clocks):,.0f} MHz, "
         f"of {top:,})")
    steps = [r.summary().steps for r in recs]
    assert all(r.repeat_group is None for r in recs)
    says(f"Each figure comes from one process (one window of {min(steps)} to {max(steps)} steps)")


def test_the_energy_mismatch(scaled):
    r = scaled[("resnet50", 8)]
    total = r.telemetry["summary"]["total"]
    cs = checks(r)
    bad = [c for c in cs if not c["agree"]]
    counter, sampled = sum(c["counter_w"] for c in cs), sum(c["sampled_w"] for c in cs)
    window_s = r.telemetry["summary"]["window_s"]
    assert all(c["rel_diff"] > 0 for c in bad)
    assert any(x.startswith("energy-mismatch") for x in H.record_flags(r))
    says(f"over its {window_s:.2f}-second window the counters' mean power ({counter:,.0f} W "
         f"summed, up to {max(c['counter_w'] for c in cs):.0f} W on one GPU) ran "
         f"{span([c['rel_diff'] for c in bad])} above the "
         f"power samples' ({sampled:,.0f} W) on {len(bad)} of the {len(cs)} GPUs, beyond the "
         f"{span([c['tolerance'] for c in bad])} such a short window allows")
    assert total["energy_j"] == pytest.approx(counter * window_s, rel=1e-6)
    says(f"Its {total['j_per_sample']:.3f} J per image is the counters'; the samples would give "
         f"{sampled * window_s / r.telemetry['summary']['samples']:.3f} J.")
    others = [c["rel_diff"] for key, o in scaled.items() if key != ("resnet50", 8)
              for c in checks(o) if c["agree"]]
    assert len(others) == 1 + 1 + 8  # every GPU of the other three windows agrees
    says(f"The other three windows agree within their tolerance ({min(others):+.1%} to "
         f"{max(others):+.1%})")


def test_mean_powers_above_the_cap(scaled):
    over = {key: [c for c, g in zip(checks(r), gpus(r)) if c["counter_w"] > g["power_limit_w"]]
            for key, r in scaled.items()}
    assert {key for key, v in over.items() if v} == {("vgg16", 1), ("vgg16", 8)}
    (c1,), (c8,) = over[("vgg16", 1)], over[("vgg16", 8)]  # one GPU over the cap in each
    assert c1["counter_w"] == gpus(scaled[("vgg16", 1)])[0]["mean_power_w"]
    says(f"(VGG-16: {c1['counter_w']:.0f} W on one GPU, up to {c8['counter_w']:.0f} W per GPU at "
         "8)")
    w1, w8 = (scaled[("vgg16", n)].telemetry["summary"]["window_s"] for n in (1, 8))
    says(f"over windows of {w1:.1f} and {w8:.1f} s, where the samples read "
         f"{c1['sampled_w']:.0f} and {c8['sampled_w']:.0f} W")
    assert c1["agree"] and c8["agree"]
    says(f"which read {c1['rel_diff']:.1%} and {c8['rel_diff']:.1%} above the samples here "
         "(within these windows' tolerance)")


def test_the_collectives(store, runs):
    says(f"`{command(runs[COMM_RUN])}` (run {COMM_RUN}; nccl-tests' busbw, float32, every "
         "element checked: #wrong 0)")
    recs = store.results(run_id=COMM_RUN, kind="comm")
    assert all(r.ok and r.wrong == 0 and r.config.dtype == "float32" for r in recs)
    big = {(r.config.op, r.config.inplace): r for r in recs if r.config.size_bytes == 4 << 30}
    assert {f for r in big.values() for f in H._comm_flags(r)} == {"one process"}
    says("Flags every figure here carries: one process.")
    for inplace, place in ((False, "out of place"), (True, "in place")):
        cells = " | ".join(f"{big[(op, inplace)].busbw() / 1e9:.0f} GB/s"
                           for op in ("all_reduce", "all_gather", "reduce_scatter"))
        says(f"| 4 GiB, {place} | {cells} |")


def test_the_what_if_check(store, scaled):
    from dlbench.whatif import check, scenarios
    db = str(store.path)
    rows = scenarios.check_against(db, busbw_from=db).scaling
    text = (FOLDER / "whatif-check.txt").read_text()
    for row in rows:
        model = row.label.split(" bf16")[0]
        ms = lambda s: f"{s * 1e3:.1f} ms"  # noqa: E731
        says(f"| {model} | {ms(row.measured_s)} | {ms(row.predicted_none_s)} "
             f"({row.error_none:+.1%}) | {ms(row.predicted_full_s)} ({row.error_full:+.1%}) |")
        assert re.search(rf"│\s+{row.measured_s * 1e3:.1f} │", text)
        # the steps are the scaling records' own: the 8-GPU one measured, the 1-GPU one compute
        m, batch = model.split(" b")
        assert scaled[(m, 8)].id == row.record_id and int(batch) == \
            scaled[(m, 8)].config.base.batch_size
        assert row.compute_s == pytest.approx(scaled[(m, 1)].summary().mean_s)
    s = check.error_summary(rows)
    none, full = check.skill_summary(rows)
    assert full.same == full.rows == len(rows)  # the overlap prediction is the 1-GPU step
    assert (f"mean absolute error perfect scaling: {s['perfect scaling']:.1%}, none: "
            f"{s['none']:.1%}, full: {s['full']:.1%}") in text
    says(f"Mean absolute error {s['none']:.1%} (no overlap) and {s['full']:.1%} (overlap); "
         f"perfect scaling (the 1-GPU step) is off by {s['perfect scaling']:.1%}, so the overlap "
         "prediction, which is the 1-GPU step in both rows, has no skill.")
    flags = {key: H.record_flags(r) for key, r in scaled.items()}
    assert all({"throttled (power)", "one process"} <= set(f) for f in flags.values())
    assert [k for k, f in flags.items() if "noisy" in f] == [("vgg16", 1)]
    assert [k for k, f in flags.items()
            if any(x.startswith("energy-mismatch") for x in f)] == [("resnet50", 8)]
    says("every one `throttled (power)` and `one process`, the 1-GPU VGG-16 step `noisy`, the "
         "8-GPU ResNet-50 one `energy-mismatch`.")


def test_the_strategies(store, runs, scaled, tmp_path):
    window_opts = command(runs[SCALE_RUN]).split("--channels-last on")[1]
    for run_id, gpu_ids in zip(STRATEGY_RUNS, ((0, 1), (2, 3))):
        run = runs[run_id]
        assert (run.status, run.device) == ("interrupted", "2x NVIDIA H200")
        assert command(run).endswith(window_opts)  # "the same window flags"
        # the GPUs of the eight-GPU run's order
        uuids = {tuple(g["uuid"] for g in r.env["gpus"]) for r in
                 store.results(run_id=run_id, kind="scaling")}
        eight = scaled[("resnet50", 8)].env["gpus"]
        assert uuids == {tuple(eight[i]["uuid"] for i in gpu_ids)}
    says(f"`{command(runs[STRATEGY_RUNS[0]]).split(window_opts)[0]}` on GPUs 0-1 beside "
         "`dlbench scale -m inception_v3,resnet152 ...` on GPUs 2-3, the same window flags (runs "
         f"{STRATEGY_RUNS[0]} and {STRATEGY_RUNS[1]}; both cut by a time limit after ResNet-50 "
         "and Inception v3, status `interrupted`)")
    recs = [r for run in STRATEGY_RUNS for r in store.results(run_id=run, kind="scaling")]
    assert {r.config.model for r in recs} == {"resnet50", "inception_v3"}
    assert all(r.env["gpu_count"] == 2 for r in recs)  # the 1-GPU rows' device too
    common = H._common([H.record_flags(r) for r in recs])
    assert common == ["one process"]
    says("img/s (factor over the strategy's 1 GPU) ±95%. Flags every figure here carries: one "
         "process.")

    def cell(r, base=None) -> str:
        s = r.summary()
        factor = f" ({s.throughput / base.summary().throughput:.2f})" if base else ""
        rest = H._rest(H.record_flags(r), common)
        return (f"{fmt_num(s.throughput)}{factor} ±{fmt_pct(s.rel_halfwidth)}"
                + ("" if rest == "–" else f", {rest}"))
    factors = {}
    for model in ("resnet50", "inception_v3"):
        for strategy in ("ps", "dp"):
            one, two = (H.latest(recs, model=model, strategy=strategy, gpus=n) for n in (1, 2))
            factors[(model, strategy)] = two.summary().throughput / one.summary().throughput
            says(f"| {model} | {strategy} | {cell(one)} | {cell(two, one)} |")
    assert factors[("resnet50", "dp")] > 2  # "more than two GPUs can do"
    says(f"{factors[('resnet50', 'dp')]:.2f}x on two GPUs is more than two GPUs can do")
    # the dp figures measured after the fix, on the four-H200 page
    four = H.open_store(ROOT / "results", H.H200_4, tmp_path)
    ids = {(m, p): i.split() for m, p, i in H._STRATEGY_IDS}[("resnet50", "bf16")]
    a, b = (four.get(i) for i in ids[2:4])
    four.close()
    assert (a.config.strategy, a.config.gpus, b.config.strategy, b.config.gpus) == ("dp", 1,
                                                                                   "dp", 2)
    fa, fb = H.record_flags(a), H.record_flags(b)
    assert "throttled (power)" in fa and "throttled (power)" in fb and "noisy (time cap)" in fb
    assert "one process" in fa and "one process" in fb and len(fa) == 2 and len(fb) == 3
    says(f"(ResNet-50 bf16: {fmt_num(a.summary().throughput)} -> "
         f"{fmt_num(b.summary().throughput)} img/s, "
         f"{b.summary().throughput / a.summary().throughput:.2f}x; both windows `throttled "
         "(power)`, the 2-GPU one `noisy (time cap)`, each one process)")
