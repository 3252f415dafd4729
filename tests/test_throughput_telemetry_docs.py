"""docs/throughput.md and docs/telemetry.md against their sources: the suites' windows and
batches from dlbench.suites, the sampler's and the power check's constants from
dlbench.telemetry, and the measured figures (the example output line, the ms-per-batch table,
the energy table, the counter-against-samples counts) from the committed stores."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, store_fixture

from dlbench.report.table import fmt_pct
from dlbench.suites import (CLASSIC_CNN_FP16_BATCH, CPU_LM_STOP, CPU_STOP, GPU_STOP,
                            REPEAT_STOP, SUITES, SWEEP_STOP, DeviceFacts, suite_for)
from dlbench.telemetry.energy import (POWER_AGREEMENT_BASE, POWER_AVERAGING_S, POWER_DRIFT,
                                      power_agreement_tolerance)
from dlbench.telemetry.sampler import DEFAULT_INTERVAL_S
from dlbench.telemetry.summary import power_check, window

ROOT = Path(__file__).resolve().parents[1]
THROUGHPUT = (ROOT / "docs" / "throughput.md").read_text()
TELEMETRY = (ROOT / "docs" / "telemetry.md").read_text()
GPU = DeviceFacts(cuda=True, bf16=True)
MS_PER_BATCH_RUN = "e991c923eb3f"
ENERGY_RUN = "21dab0cda4ef"
#: the stores whose GPU windows the telemetry page counts
COUNTED = (H.H100, H.H200_4, H.H200_8)


def thr(text: str) -> None:
    assert_says(THROUGHPUT, text)


def tel(text: str) -> None:
    assert_says(TELEMETRY, text)


store = store_fixture(H.H100)


# -- docs/throughput.md: the suites table ---------------------------------------------------------

def test_the_default_suite_window():
    _, configs = suite_for("default", GPU)
    assert SUITES["default"].repeat == 3
    thr("Each config in 3 fresh processes (`--repeat 3`)")
    assert {(c.warmup_steps, c.warmup_seconds, c.stop) for c in configs} == {(5, 1.0, REPEAT_STOP)}
    thr(f"| {5} warm-up steps and {1.0:.0f} s; {REPEAT_STOP.min_steps} steps and "
        f"{REPEAT_STOP.min_seconds} s at least, {REPEAT_STOP.max_seconds:.0f} s at most |")
    assert [c.model for c in configs] == ["resnet50", "vgg16", "vit_b_16", "gpt2", "resnet50"]
    assert {c.precision for c in configs} == {"bf16"} and configs[-1].mode == "eval"


def test_the_cpu_suite():
    _, configs = suite_for("cpu", DeviceFacts(cuda=False, bf16=True))
    got = {(c.model, c.mode): (c.batch_size, c.input_size, c.precision) for c in configs}
    assert got == {("resnet50", "train"): (8, 112, "fp32"), ("resnet50", "eval"): (16, 112, "fp32"),
                   ("vit_b_16", "eval"): (4, 112, "fp32"), ("bert-base", "train"): (1, 64, "fp32"),
                   ("gpt2", "train"): (1, 64, "fp32")}
    thr("ResNet-50 train (batch 8) and eval (16) and ViT-B/16 eval (4) at 112 px, BERT and GPT-2 "
        "train (batch 1, sequence 64), fp32")
    assert {(c.warmup_steps, c.warmup_seconds) for c in configs} == {(2, 1.0)}
    assert CPU_STOP.min_steps == CPU_LM_STOP.min_steps
    assert CPU_STOP.target_rel_ci == CPU_LM_STOP.target_rel_ci
    thr(f"| 2 warm-up steps and 1 s; {CPU_STOP.min_seconds:.0f} s at least (BERT, GPT-2: "
        f"{CPU_LM_STOP.min_seconds:.0f} s), {CPU_STOP.max_seconds:.0f} s at most "
        f"({CPU_LM_STOP.max_seconds:.0f} s), {CPU_STOP.target_rel_ci:.0%} interval; at least "
        f"{CPU_STOP.min_steps} steps |")


def test_the_classic_cnn_suite():
    _, configs = suite_for("classic-cnn", GPU)
    assert len(configs) == 24
    thr("eager and compiled (`torch.compile`, the counterpart of XLA): 24 configs")
    assert CLASSIC_CNN_FP16_BATCH["resnet50"] == 512 and CLASSIC_CNN_FP16_BATCH["nasnet"] == 32
    assert {b for m, b in CLASSIC_CNN_FP16_BATCH.items() if m not in ("resnet50", "nasnet")} == {256}
    thr("fp16 batches: ResNet-50 512, NASNet 32, the rest 256; fp32 half of those")
    for c in configs:
        fp16 = CLASSIC_CNN_FP16_BATCH[c.model]
        assert c.batch_size == (fp16 if c.precision == "fp16" else fp16 // 2)
        assert c.optimizer == "sgd" and c.channels_last and c.stop == SWEEP_STOP
    assert [c.compile is not None for c in configs] == sorted(c.compile is not None for c in configs)
    assert configs[-1].model == "nasnet"
    thr(f"| {SWEEP_STOP.min_steps} steps and {SWEEP_STOP.min_seconds} s at least, "
        f"{SWEEP_STOP.max_seconds:.0f} s at most |")


def test_the_ms_per_batch_suite():
    _, configs = suite_for("ms-per-batch", GPU)
    assert {c.model for c in configs} == {"vgg16", "resnet152", "densenet161"}
    assert {(c.batch_size, c.method) for c in configs} == {(16, "fwd-bwd")}
    assert {(c.precision, c.mode) for c in configs} == {
        (p, m) for p in ("fp32", "fp16") for m in ("eval", "train")}
    assert {c.stop for c in configs} == {GPU_STOP}
    thr(f"| {GPU_STOP.min_steps} steps and {GPU_STOP.min_seconds:.0f} s at least, "
        f"{GPU_STOP.max_seconds:.0f} s at most |")


def test_the_default_telemetry_interval_in_the_options():
    assert DEFAULT_INTERVAL_S == 0.1
    thr(f"| `--telemetry-interval` | seconds | NVML sampling interval ({DEFAULT_INTERVAL_S}; 0 = off)")


# -- docs/throughput.md: measured figures ---------------------------------------------------------

def test_the_example_output_line(store):
    recs = store.results(run_id=H.DEFAULT_SUITE_RUN, kind="throughput")
    r = next(r for r in recs if r.config.model == "resnet50" and r.config.mode == "train")
    c = r.config
    assert (c.batch_size, c.precision, c.channels_last) == (1024, "bf16", True)
    thr(f"(`✓ resnet50 b{c.batch_size} {c.precision} train cl: {H._rate(r)} "
        f"±{fmt_pct(r.summary().rel_halfwidth)}`")
    thr(f"run {H.DEFAULT_SUITE_RUN} on an H100, {', '.join(H.record_flags(r))}")


def test_the_ms_per_batch_table(store):
    rows = {}
    every = []
    for setup, ids in (("FP32", ("688e5a5feb08", "b5c7020049f1", "41cb734903f0", "62f9f504766c",
                                 "7a99f1685d27", "ae1b02bba69c")),
                       ("FP16", ("10b12fc6745a", "b41ac2e3bc2e", "ed409ab09f50", "31ed3adf945a",
                                 "9a2fcebda815", "fd334e714567"))):
        recs = [H._get(store, i) for i in ids]
        assert {r.run_id for r in recs} == {MS_PER_BATCH_RUN}
        assert [(r.config.model, r.config.mode) for r in recs] == [
            (m, mode) for m in ("vgg16", "resnet152", "densenet161") for mode in ("eval", "train")]
        assert {(r.config.batch_size, r.config.precision) for r in recs} == {(16, setup.lower())}
        flags = [H.record_flags(r) for r in recs]
        every += flags
        rows[setup] = [(H._value(r, "ms"), fl) for r, fl in zip(recs, flags)]
    common = H._common(every)
    assert common == ["no telemetry", "one process"]
    thr(f"run {MS_PER_BATCH_RUN} on an H100 80GB HBM3, ms per batch of 16 (mean step); every "
        f"figure: {', '.join(common)}")
    for setup, cells in rows.items():
        text = " | ".join(v + ("" if H._rest(fl, common) == "–" else f" ({H._rest(fl, common)})")
                          for v, fl in cells)
        thr(f"| {setup} | {text} |")


# -- docs/telemetry.md ------------------------------------------------------------------------------

def test_the_sampling_interval_and_the_idle_wait():
    import inspect

    from dlbench.telemetry.sampler import Sampler
    assert DEFAULT_INTERVAL_S == 0.1
    tel(f"every `--telemetry-interval` seconds ({DEFAULT_INTERVAL_S} by default; 0 turns it off)")
    settle = inspect.signature(Sampler.idle).parameters["settle_max_s"].default
    tel(f"dlbench waits for the reading to settle, up to {settle:.0f} s")
    tel("a 2-second window has about 20")
    assert 2 / DEFAULT_INTERVAL_S == 20


def test_the_tolerance():
    assert (POWER_AGREEMENT_BASE, POWER_DRIFT, POWER_AVERAGING_S) == (0.03, 0.05, 1.0)
    tel(f"tolerance = {POWER_AGREEMENT_BASE:.0%} + {POWER_DRIFT:.0%} x "
        f"({POWER_AVERAGING_S:.0f} s + sample interval) / window")
    a, b, c = (f"{power_agreement_tolerance(w, DEFAULT_INTERVAL_S):.1%}" for w in (1.2, 4, 30))
    tel(f"At the default {DEFAULT_INTERVAL_S} s: a 1.2-second window may differ by {a}, a "
        f"4-second one by {b}, a 30-second one by {c}.")


@pytest.fixture(scope="module")
def windows():
    """Every GPU window with a counter in the counted stores: (record, window_s, check,
    the largest power sample inside the window)."""
    out = []
    work = Path(tempfile.mkdtemp())
    for folder in COUNTED:
        st = H.open_store(ROOT / "results", folder, work)
        for r in st.results():
            t = getattr(r, "telemetry", None) or {}
            w = window(t) if t else None
            if w is None:
                continue
            for g in t.get("gpus") or []:
                c = power_check(g, *w)
                if c is None:
                    continue
                s = g["series"]
                inside = [p for ts, p in zip(s["t_s"], s["power_w"])
                          if w[0] <= ts <= w[1] and p is not None]
                out.append((r, w[1] - w[0], c, max(inside)))
        st.close()
    return out


def test_the_counter_against_the_samples_counts(windows):
    n = len(windows)
    bad = [(r, w) for r, w, c, _ in windows if not c["agree"]]
    spans = [w for _, w in bad]
    tel("in the stores of the H100, four-H200 and eight-H200 campaigns")
    tel(f"Of the {n} GPU windows with a counter in those stores, {len(bad)} (in "
        f"{len({r.id for r, _ in bad})} results) are beyond it, all in windows of "
        f"{min(spans):.1f}-{max(spans):.1f} s")
    above_max = sum(1 for _, _, c, top in windows if c["counter_w"] > top)
    tel(f"the counter's mean power above the largest power sample ({above_max} of the {n} windows")
    over = [c["counter_w"] for _, _, c, _ in windows if c["counter_w"] > 700]
    tel(f"above the card's 700 W cap ({len(over)} windows, up to {max(over):.0f} W)")
    long = [abs(c["rel_diff"]) for _, w, c, _ in windows if w >= 8]
    assert max(long) < 0.009
    tel("windows of 8 s or more agree within 0.9%")


def test_the_energy_table(store):
    recs = {(r.config.model, r.config.mode): r
            for r in store.results(run_id=ENERGY_RUN, kind="throughput") if r.ok}
    flags = [H.record_flags(r) for r in recs.values()]
    common = H._common(flags)
    assert common == ["one process"]
    tel(f"Example, run {ENERGY_RUN} of the default suite on an H100 80GB HBM3 (every figure: "
        f"{', '.join(common)};")
    for model, batch in (("resnet50", "1024"), ("vgg16", "512"), ("gpt2", "32 (x1024 tokens)")):
        r = recs[(model, "train")]
        summ = r.telemetry["summary"]
        tot, clock = summ["total"], summ["gpus"][0]["mean_sm_clock_mhz"]
        rest = H._rest(H.record_flags(r), common)
        tel(f"| {model} | {batch} | {tot['mean_power_w']:.0f} | {H.fmt_num(tot['j_per_sample'], 3)} "
            f"| {H.fmt_num(tot['samples_per_j'], 3)} | {H.fmt_num(clock)} | {rest} |")
    idle = {round(r.telemetry["summary"]["total"]["idle_power_w"]) for r in recs.values()}
    assert all(r.telemetry["summary"]["idle_settled"] for r in recs.values())
    tel(f"idle {min(idle)}-{max(idle)} W")


def test_the_articles_rtx_3060_figures():
    from dlbench.reference import reference_results
    got = {r.mode: r.value for r in reference_results()
           if (r.source, r.gpu_id, r.model, r.precision, r.batch_size, r.metric)
           == ("seed002", "rtx-3060", "vgg16", "fp32", 16, "ms_per_batch")}
    thr(f"(the article's RTX 3060 in FP32: VGG-16 {got['eval']} / {got['train']} ms)")
