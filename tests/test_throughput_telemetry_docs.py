"""docs/throughput.md and docs/telemetry.md against their sources: the suites' windows, batches
and times from dlbench.suites, the models table from the registry (sizes counted on the meta
device), the sweep's and the sampler's defaults from the parser and the code, the power check's
constants from dlbench.telemetry, and the measured figures (the example output line, the
ms-per-batch table, the first steps, the energy table, the counter against the samples and
against nvidia-smi's log, the idle baselines, the H200 energy) from the committed stores and
files, with the flags of the records behind them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from datetime import datetime
from pathlib import Path

import pytest
import torch
from fakes.pages import H, assert_says, resnet50_forward_flops, store_fixture

from dlbench.cli import build_parser
from dlbench.measure.flops import params_count
from dlbench.models import get_model, model_names
from dlbench.records.base import ErrorType
from dlbench.records.throughput import ThroughputConfig
from dlbench.report import flags
from dlbench.report.table import fmt_pct
from dlbench.suites import (CLASSIC_CNN_FP16_BATCH, CPU_LM_STOP, CPU_STOP, GPU_STOP,
                            REFERENCE_MEMORY_BYTES, REPEAT_STOP, SUITES, SWEEP_STOP, DeviceFacts,
                            canonical, suite_for)
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
#: the two tuned ResNet-50 windows whose clocks the page quotes (tuned mode, by hand)
THROTTLED_CLOCKS = ("1d65b62624ab", "5879c12c763d")
#: the 30-second ResNet-50 window beside nvidia-smi's power log
SMI_RUN = "c46049d2028e"
SMI_LOG = ROOT / "results" / H.H100 / "nvidia-smi-power.csv"
#: the default suite on an H200, stored before the sampler waited for the idle power to settle
IDLE_AT_ONCE_RUN = "eea04ab2c011"
#: data-parallel scaling at 1 and 8 GPUs on the eight-H200 host
H200_8_RUN = "cb8a0534e661"
WORDS = {5: "five", 9: "nine"}


def thr(text: str) -> None:
    assert_says(THROUGHPUT, text)


def tel(text: str) -> None:
    assert_says(TELEMETRY, text)


def gpu_summaries(r) -> list[dict]:
    """The per-GPU telemetry summaries of a record; none for a record without GPU telemetry,
    or of a kind that keeps none."""
    tele = getattr(r, "telemetry", None) or {}
    return (tele.get("summary") or {}).get("gpus") or []


def default(command: str, flag: str):
    """The parser's default of ``flag`` in ``dlbench COMMAND``."""
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    [action] = [a for a in sub._actions if flag in a.option_strings]
    return action.default


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


def test_the_note_column_words_the_flags_as_the_terminal_does(store):
    # the terminal's note names the stop reason as stored (time_cap), the pages as words
    noisy = H._get(store, "62f9f504766c")     # ms-per-batch: resnet152 fp32 train
    assert flags.flags(noisy)[0] == "noisy (time_cap)" and H.record_flags(noisy)[0] == \
        "noisy (time cap)"
    throttled = H._get(store, "5ba53d191b31")  # tune: resnet50 fp16 compiled
    assert "throttled (power)" in flags.flags(throttled)
    assert ErrorType.OOM == "oom"
    thr("| note | `noisy (time_cap)`, `throttled (power)`, an error type such as `oom` |")


def test_fp16_is_slower_than_fp32_at_batch_16(store):
    """The launch-bound pitfall: the ms-per-batch run's fp16 steps against its fp32 ones."""
    recs = [r for r in store.results(run_id=MS_PER_BATCH_RUN, kind="throughput") if r.ok]
    mean = {(r.config.model, r.config.mode, r.config.precision): r.summary().mean_s for r in recs}
    for model in ("resnet152", "densenet161"):
        for mode in ("eval", "train"):
            assert mean[(model, mode, "fp16")] > mean[(model, mode, "fp32")], (model, mode)
    assert mean[("vgg16", "train", "fp16")] < mean[("vgg16", "train", "fp32")]
    slow = [r for r in recs if r.config.precision == "fp16"
            and r.config.model in ("resnet152", "densenet161")]
    assert len(slow) == 4 and all(H.record_flags(r)[0] == "noisy (time cap)" for r in slow)
    thr("At batch 16, eager fp16 autocast was *slower* than fp32 for ResNet-152 and "
        "DenseNet-161 on an H100 (the ms-per-batch table above, where each of their fp16 "
        "figures is flagged noisy (time cap))")


# -- docs/throughput.md: first steps, the suites' times -------------------------------------------

def classic_cnn_records(store) -> list:
    """The classic-cnn suite's records in the H100 store (runs stored under its old name too),
    in stored order."""
    runs = {r.run_id for r in store.runs() if canonical(r.suite) == "classic-cnn"}
    return [r for r in store.results(kind="throughput") if r.run_id in runs and r.ok]


def test_the_classic_cnn_first_steps(store):
    recs = classic_cnn_records(store)
    nasnet = [r for r in recs if r.config.model == "nasnet" and r.config.compile]
    fresh = {}                     # each precision's first compile, before Inductor's cache
    for r in nasnet:
        fresh.setdefault(r.config.precision, r)
    later = [r for r in nasnet if r not in fresh.values()]
    assert sorted(fresh) == ["fp16", "fp32"] and len(later) == 1
    first = [r.first_step_s for r in fresh.values()]
    thr(f"compiling NASNet took {min(first):.0f}-{max(first):.0f} s before its first step on an "
        f"H100 ({later[0].first_step_s:.0f} s in a later process that found Inductor's cache)")
    eager_fp32 = [r for r in recs if r.config.compile is None and r.config.precision == "fp32"]
    slowest = max(eager_fp32, key=lambda r: r.first_step_s)
    assert slowest.config.model == "vgg16" and len(eager_fp32) == 6
    thr(f"cuDNN's autotuning of the first fp32 step up to {slowest.first_step_s:.0f} s (VGG-16), "
        "each from one process")
    quoted = [*fresh.values(), *later, slowest]
    assert all(r.repeat_group is None and H.record_flags(r)[-1] == "one process" for r in quoted)


def test_nasnets_autotuning_in_a_fresh_process(store):
    recs = classic_cnn_records(store)
    [r] = [r for r in recs if r.config.model == "nasnet" and r.config.compile is None
           and r.config.precision == "fp16"]
    assert H.record_flags(r)[-1] == "one process"
    thr(f"(NASNet's first eager fp16 step, autotuning included, took {r.first_step_s:.0f} s in one "
        "process on an H100)")


def test_the_default_suites_wall_time(tmp_path):
    st = H.open_store(ROOT / "results", f"{H.H100}/default-suite-repeat", tmp_path)
    [run] = st.runs()
    recs = st.results(run_id=run.run_id, kind="throughput")
    st.close()
    assert (run.status, run.suite, len(recs)) == ("done", "default", 15)
    assert {r.env["gpus"][0]["name"] for r in recs} == {"NVIDIA H100 80GB HBM3"}
    took = (datetime.fromisoformat(run.finished_at)
            - datetime.fromisoformat(run.started_at)).total_seconds()
    thr(f"every figure comes with the spread across processes; {took:.0f} s on an H100 "
        "([record](../results/pt2.11-cu130-h100-80gb-hbm3/default-suite-repeat/README.md))")


def test_the_default_suites_batches_scale_down():
    big = DeviceFacts(cuda=True, bf16=True, memory_bytes=80 * 10**9)
    small = DeviceFacts(cuda=True, bf16=True, memory_bytes=24 * 2**30)
    full = {c.model: c.batch_size for c in suite_for("default", big)[1]}
    part = {c.model: c.batch_size for c in suite_for("default", small)[1]}
    assert full == {m: get_model(m).default_batch for m in full}
    for model, b in part.items():
        assert b < full[model] and b & (b - 1) == 0, (model, b)
    assert REFERENCE_MEMORY_BYTES == 81_559 * 2**20   # the H100 80GB the batches were sized on
    thr("batches that fill an 80 GB card (scaled down to a power of two on a smaller one)")


# -- docs/throughput.md: the models table, the sweep's defaults -----------------------------------

#: the models table's first cell, and the models that row names (one source and input each)
MODEL_ROWS = {"`resnet50`, `resnet152`": ("resnet50", "resnet152"),
              "`inception_v3`": ("inception_v3",), "`inception_v4`": ("inception_v4",),
              "`vgg16`": ("vgg16",), "`densenet161`": ("densenet161",), "`cnn10`": ("cnn10",),
              "`vit_b_16`": ("vit_b_16",), "`bert-base`": ("bert-base",), "`gpt2`": ("gpt2",),
              "`llama-3.2-1b`, `llama-3.2-3b`, `llama-3.1-8b`": ("llama-3.2-1b", "llama-3.2-3b",
                                                                  "llama-3.1-8b")}


def millions(n: int) -> str:
    return f"{n / 1e6:.1f}M"


def test_the_models_table_sources_and_inputs():
    # every model `dlbench models` lists has its row
    assert {n for names in MODEL_ROWS.values() for n in names} | {"nasnet"} == set(model_names())
    for cell, names in MODEL_ROWS.items():
        [(source, kind, size)] = {(s.source, s.kind, s.input_size) for s in map(get_model, names)}
        thr(f"| {cell} | {source} | {size} px |" if kind == "image" else
            f"| {cell} | {source} | sequence {size} |")
    nasnet = get_model("nasnet")
    assert nasnet.source == "timm" and "nasnetalarge" in nasnet.factory.args
    thr(f"| `nasnet` | timm `nasnetalarge` | {nasnet.input_size} px |")
    units = {n: get_model(n).unit for n in ("bert-base", "gpt2", "llama-3.2-1b")}
    assert units == {"bert-base": "sequences", "gpt2": "tokens", "llama-3.2-1b": "tokens"}
    thr("loss at every position, SDPA attention; unit: sequences |")
    thr("causal SDPA attention, no KV cache; unit: tokens.")


def test_the_models_table_sizes():
    with torch.device("meta"):
        inception = get_model("inception_v3").build()
        cnn10 = get_model("cnn10").build()
    assert inception.AuxLogits is None
    thr("| `inception_v3` | torchvision | 299 px | no auxiliary head |")
    thr(f"no batch norm; {millions(params_count(get_model('vgg16')))} parameters |")
    thr(f"NASNet-A *large*, {millions(params_count(get_model('nasnet')))} parameters")
    # tf_cnn_benchmarks' NASNet-A mobile: the published figure the registry's note carries
    notes = get_model("nasnet").notes
    assert "NASNet-A mobile at 224 px (5.3M params" in notes
    thr("tf_cnn_benchmarks' \"nasnet\" was NASNet-A *mobile* at 224 px (5.3M)")
    convs = sum(isinstance(m, torch.nn.Conv2d) for m in cnn10.modules())
    dense = sum(isinstance(m, torch.nn.Linear) for m in cnn10.modules())
    spec = get_model("cnn10")
    thr(f"10-layer CNN ({convs} convolutions + {dense} dense, "
        f"{millions(params_count(spec))} parameters, {spec.num_classes} classes)")
    assert convs + dense == 10
    thr(f"GPT-2 small, {params_count(get_model('gpt2')) / 1e6:.0f}M parameters")
    # AdamW in bf16 autocast keeps fp32 weights, gradients and two moments: 16 bytes a parameter
    assert params_count(get_model("llama-3.1-8b")) * 16 > 80e9
    thr("The 8B model's AdamW state does not fit one 80 GB GPU")


def test_resnet_v1_has_about_6_percent_fewer_flops():
    """tf_cnn_benchmarks' ResNet-50 v1 strides the first 1x1 convolution of a downsampling
    block, torchvision's v1.5 the 3x3: counted here by moving the stride on the v1.5 model."""
    fewer = 1 - resnet50_forward_flops(True) / resnet50_forward_flops(False)
    assert f"{fewer:.0%}" == "6%"
    thr(f"tf_cnn_benchmarks' ResNets were v1, about {fewer:.0%} fewer FLOPs |")


def test_the_sweeps_defaults():
    assert ThroughputConfig.__dataclass_fields__["precision"].default == "fp32"
    assert default("throughput", "--precision") is None     # the config's default applies
    thr("`bf16` with autocast. Default: fp32 |")
    assert default("throughput", "--optimizer") == "sgd"
    src = (ROOT / "src/dlbench/workloads/throughput.py").read_text()
    assert "torch.optim.SGD(groups, lr=1e-3, momentum=0.9" in src
    thr("| `--optimizer` | `sgd`, `adamw` | SGD with momentum 0.9 (as tf_cnn_benchmarks) by "
        "default |")
    assert default("throughput", "--db") == "dlbench.db"
    thr("in the SQLite store (`--db`, default `./dlbench.db`)")
    assert default("models", "--all") is False
    thr("(`--all` adds the tiny test models)")


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
def windows(tmp_path_factory):
    """Every GPU window with a counter in the counted stores: (record, window_s, check,
    the largest power sample inside the window)."""
    out = []
    work = tmp_path_factory.mktemp("counted-stores")
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


def test_above_the_cap_the_counter_reads_high(windows):
    over = [(w, c) for _, w, c, _ in windows if c["counter_w"] > 700]
    assert all(c["rel_diff"] > 0 for _, c in over)
    longer = [c["rel_diff"] for w, c in over if w >= 2]
    span = f"{min(longer) * 100:.1f}-{max(longer):.1%}"
    tel(f"the windows of 2 s or more whose counter read above the 700 W cap read {span} apart")
    tel(f"the counter reads above that reading near the cap ({span} in those of the "
        f"{len(over)} that last 2 s or more)")


def test_the_sampler_does_not_change_the_figure():
    fid = json.loads((ROOT / "results" / H.H100 / "fidelity-telemetry.json").read_text())
    assert fid["config"]["telemetry_interval_s"] == DEFAULT_INTERVAL_S and fid["pass"]
    tel(f"the fidelity check with sampling on gave {fid['median_ratio']:.4f}")


def test_the_throttled_clocks(store):
    recs = [store.get(i) for i in THROTTLED_CLOCKS]
    for r in recs:
        c = r.config
        assert (c.model, c.precision) == ("resnet50", "fp16")
        assert c.compile == "max-autotune-no-cudagraphs"
        assert H.record_flags(r) == ["throttled (power)", "one process"]
        assert r.telemetry["summary"]["gpus"][0]["power_limit_w"] == 700
    clocks = [r.telemetry["summary"]["gpus"][0]["mean_sm_clock_mhz"] for r in recs]
    (top,) = {r.env["gpus"][0]["max_sm_clock_mhz"] for r in recs}
    tel(f"(an H100 at its 700 W limit ran {min(clocks):,.0f}-{max(clocks):,.0f} of {top:,} MHz in "
        f"two windows of a compiled fp16 ResNet-50, each flagged throttled (power), one process)")


def test_an_idle_baseline_read_at_once(tmp_path):
    st = H.open_store(ROOT / "results", H.H200_4, tmp_path)
    recs = [r for r in st.results() if gpu_summaries(r)]
    st.close()
    at_once = [r for r in recs if r.run_id == IDLE_AT_ONCE_RUN]
    assert {r.config.model for r in at_once} >= {"resnet50", "gpt2"} and len(at_once) == 10
    assert all("idle_settled" not in r.telemetry["summary"] for r in at_once)
    assert {g["name"] for r in at_once for g in r.env["gpus"]} == {"NVIDIA H200"}
    idle = [r.telemetry["summary"]["gpus"][0]["idle_power_w"] for r in at_once]
    between = idle[1:]
    later = [r for r in recs if r.telemetry["summary"].get("idle_settled")]
    assert len(later) + len(at_once) == len(recs)      # every other baseline waited and settled
    settled = [g["idle_power_w"] for r in later for g in gpu_summaries(r)]
    tel(f"between two benchmarks, an H200's baseline read {min(between):.0f}-{max(between):.0f} W "
        f"(run {IDLE_AT_ONCE_RUN} of the four-H200 store, the default suite before dlbench waited: "
        f"{WORDS[sum(w > 350 for w in between)]} of {WORDS[len(between)]} above 350 W; "
        f"{idle[0]:.0f} W before its first benchmark), where the settled baselines of that store "
        f"read {min(settled):.0f}-{max(settled):.0f} W")


def test_the_counter_against_nvidia_smi(store, tmp_path):
    (r,) = store.results(run_id=SMI_RUN, kind="throughput")
    c, summ = r.config, r.telemetry["summary"]
    assert (c.model, c.batch_size, c.precision) == ("resnet50", 256, "bf16")
    assert H.record_flags(r) == ["one process"] and summ["total"]["methods"] == ["counter"]
    check = power_check(r.telemetry["gpus"][0], *window(r.telemetry))
    counter, sampled = check["counter_w"], check["sampled_w"]
    # benchmarks/compare_power.py against the committed log (nvidia-smi's local time was UTC)
    rec = tmp_path / "rn50.json"
    rec.write_text(json.dumps([{"created_at": r.created_at, "telemetry": r.telemetry}]))
    line = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "compare_power.py"), str(rec),
                           str(SMI_LOG)], env={**os.environ, "TZ": "UTC"}, capture_output=True,
                          text=True, check=True).stdout
    m = re.fullmatch(r"dlbench: ([\d.]+) J/img \(([\d.]+) W mean, \['counter'\]\); nvidia-smi: "
                     r"([\d.]+) J/img \(([\d.]+) W mean of (\d+) samples over the window\)\n", line)
    j, w, smi_j, smi_w, n = m.groups()
    assert abs(counter - sampled) / counter < 0.001
    assert abs(float(smi_w) - counter) / counter < 0.001
    assert j == smi_j == f"{summ['total']['j_per_sample']:.4f}" and w == f"{counter:.1f}"
    tel(f"Over {summ['window_s']:.0f} s on an H100 they agreed within 0.1% (counter {w} W, "
        f"samples {sampled:.1f} W, nvidia-smi's {smi_w} W; one process)")
    tel(f"On an H100 (ResNet-50, batch {c.batch_size}, {c.precision}, a "
        f"{summ['window_s']:.0f}-second window; run {SMI_RUN}, one process) both gave {j} J per "
        f"image ({w} W mean from dlbench's energy counter, {smi_w} W from {n} nvidia-smi samples)")


def test_what_limits_the_nvidia_smi_comparison(store):
    (r,) = store.results(run_id=SMI_RUN, kind="throughput")
    # nvidia-smi stamps its samples to the millisecond, every 100 ms (-lms 100); the record's
    # end time, which places the window among them, to the second
    rows = SMI_LOG.read_text().splitlines()
    assert rows[0] == "timestamp, power.draw [W]"
    stamps = [datetime.strptime(x.split(",")[0], "%Y/%m/%d %H:%M:%S.%f") for x in rows[1:]]
    assert all(len(x.split(",")[0].split(".")[1]) == 3 for x in rows[1:])
    gaps = sorted((b - a).total_seconds() for a, b in zip(stamps, stamps[1:]))
    assert gaps[len(gaps) // 2] == pytest.approx(0.1, abs=0.005)
    assert datetime.fromisoformat(r.created_at).microsecond == 0
    tel("`nvidia-smi --query-gpu=timestamp,power.draw --format=csv -lms 100`")
    tel("the record's end time, which places the window among nvidia-smi's wall-clock timestamps, "
        "has 1 s resolution, so 1-2 s are trimmed at the window's edges")
    src = (ROOT / "benchmarks" / "compare_power.py").read_text()
    assert "window - 2" in src and "seconds=1)" in src     # 2 s off the start, 1 s off the end


def test_the_data_parallel_energy_on_h200s(tmp_path):
    st = H.open_store(ROOT / "results", H.H200_8, tmp_path)
    scaled = {r.config.gpus: r for r in st.results(run_id=H200_8_RUN, kind="scaling")
              if r.config.model == "resnet50"}
    st.close()
    one, eight = scaled[1], scaled[8]
    for r in (one, eight):
        assert (r.config.strategy, r.config.base.batch_size) == ("ddp", 1024)
    j = {n: r.telemetry["summary"]["total"]["j_per_sample"] for n, r in scaled.items()}
    assert f"{j[1]:.3f}" == f"{j[8]:.3f}"
    assert H.record_flags(one) == ["throttled (power)", "one process"]
    fl = H.record_flags(eight)
    assert fl[0] == "throttled (power)" and fl[1].startswith("energy-mismatch") and \
        fl[2:] == ["one process"]
    tel(f"Energy per image of ResNet-50 read {j[8]:.3f} J at 1 and at 8 H200s (GPUs summed; run "
        f"{H200_8_RUN}, each flagged throttled (power), one process), the 8-GPU figure flagged "
        "`energy-mismatch` too")
    summ = eight.telemetry["summary"]
    w = window(eight.telemetry)
    sampled = sum(power_check(g, *w)["sampled_w"] for g in eight.telemetry["gpus"])
    tel(f"(its power samples give {sampled * summ['window_s'] / summ['samples']:.3f} J)")


def test_the_data_parallel_results_without_telemetry(tmp_path):
    st = H.open_store(ROOT / "results", H.H200_4, tmp_path)
    ok = [r for r in st.results(kind="scaling") if r.ok]
    st.close()
    assert {r.config.strategy for r in ok} == {"ddp", "dp", "ps"}    # all data-parallel
    bare = [r for r in ok if not gpu_summaries(r)]
    assert all("no telemetry" in H.record_flags(r) for r in bare)
    tel(f"Runs stored without GPU telemetry ({len(bare)} of the four-H200 store's {len(ok)} "
        "data-parallel results) have no energy.")


def test_monitor_and_the_gpu_extra():
    assert default("monitor", "--interval") == 1.0
    tel("| `--interval S` | seconds between samples (1); `--interval 5` is the CIFAR-10 frameworks "
        "study's GPU log |")
    articles = " ".join((ROOT / "docs" / "articles.md").read_text().split())
    assert "a GPU log every 5 s" in articles
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert any(d.startswith("nvidia-ml-py") for d in
               pyproject["project"]["optional-dependencies"]["gpu"])
    tel("NVML comes from `pip install 'dlbench[gpu]'` (nvidia-ml-py)")


def test_the_articles_rtx_3060_figures():
    from dlbench.reference import reference_results
    got = {r.mode: r.value for r in reference_results()
           if (r.source, r.gpu_id, r.model, r.precision, r.batch_size, r.metric)
           == ("ms-per-batch", "rtx-3060", "vgg16", "fp32", 16, "ms_per_batch")}
    thr(f"(the article's RTX 3060 in FP32: VGG-16 {got['eval']} / {got['train']} ms)")
