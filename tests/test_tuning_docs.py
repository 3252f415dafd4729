"""docs/tuning.md against its sources. The levers' order, the padded vocabulary, the margin, the
capture's warm-up, fused SGD's momentum, the payback formula and the fidelity band are checked
against the code that implements them; every measured figure the prose quotes (the worth of
cuDNN's autotuning, max-autotune's gain and cost, the compiled loss, tuned mode against plain,
the kernel profiles, the pitfalls) is recomputed from the records of the H100 campaign's
committed store, with the flags and the interval those records carry. The generated lever table
is checked by tests/test_readme_claims.py."""

from __future__ import annotations

import inspect
import json
import math
import re
from datetime import datetime
from pathlib import Path

import pytest
import torch
from fakes.cli import script
from fakes.pages import H, assert_says, rate, store_fixture
from fakes.pages import flags_but_one_process as flags
from fakes.pages import halfwidth as hw

from dlbench.cli import build_parser
from dlbench.measure.kernels import summarise
from dlbench.measure.stopping import StopRule
from dlbench.models import get_model
from dlbench.models.zoo.text import VOCAB_MULTIPLE
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.report.tuned_tables import tuned_table
from dlbench.tuning import search as lever_search
from dlbench.tuning.levers import EXTRA_LEVERS, LEVERS
from dlbench.tuning.payback import payback, setup_s
from dlbench.workloads.throughput import graphed, make_optimizer

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "tuning.md").read_text()

# The records the page quotes, by id (the H100 store).
AUTOTUNE_BF16, HEURISTICS_BF16 = "c64440b926cd", "28c492ba4130"    # runs: ResNet-50 b256 bf16
AUTOTUNE_FP32, HEURISTICS_FP32 = "efcc1768c202", "9b07bfdb2796"    # runs: the same in fp32
TUNED_AUTOTUNE, TUNED_HEURISTICS = "b70a3c3f08c9", "fcfa20784ca2"  # the tuned config, b1024
DEFAULT_COMPILE, MAX_AUTOTUNE = "f315a66c6417", "5879c12c763d"     # one card; the first profiled
TUNED_RESNET50_PLAIN, TUNED_RESNET50 = "8b248dcfe99f", "1d65b62624ab"  # throughput --tuned
TUNED_GPT2_PLAIN, TUNED_GPT2 = "aae30843c2db", "de2870c46ef2"
EAGER_LOSS, COMPILED_LOSS = "1dc508558c9f", "a917c039122a"         # GPT-2 b32, padded, compiled
GPT2_PROFILED = "c4cf9e9b617a"
GPT2_B64, GPT2_B96, GPT2_B128 = "b5e8c00d4a24", "62c32bf94b6d", "486b657efec7"
MAX_AUTOTUNE_TRIES = ("aa9496ce190b", "bd7bd63c656d", "aa03df6a1c2f")  # runs: no result
NASNET_FIRST_COMPILE = "eb66ecbda508"
GPT2_SEARCH = "8b9f1a9d0b82"                                        # dlbench tune -m gpt2
SUITE_CNNS = {"inception_v3": ("cd5c3f48c91c", "3e30e96f2a92"),     # (plain, tuned)
              "vgg16": ("b52b88879dc0", "07cfbedad0ea"),
              "resnet152": ("5d5543fbf80c", "1c89b01c49b1"),
              "inception_v4": ("cb6bceea07e3", "5e366d6a16cb")}
SUITE_GAINERS = {"ResNet-50": ("cdaae0bb64a2", "c9aad42eb7e2"),
                 "BERT": ("06e58d035b45", "30cd275b3161"),
                 "GPT-2": ("aae30843c2db", "0cefa4bbe04b")}
SUITE_NASNET = ("4562d1c172e3", "3d4ee6c77ccc")


def says(text: str) -> None:
    assert_says(PAGE, text)


store = store_fixture(H.H100)


def gpu(r) -> dict:
    return r.telemetry["summary"]["gpus"][0]


def wall_s(run) -> float:
    return (datetime.fromisoformat(run.finished_at)
            - datetime.fromisoformat(run.started_at)).total_seconds()


def first(store, run_id: str):
    return store.results(run_id=run_id, kind="throughput")[0]


# -- the levers -----------------------------------------------------------------------------------
def test_the_lever_table_is_the_order_tried():
    rows = re.findall(r"^\| ([\w-]+) \| `", PAGE, re.M)
    assert rows == [lever.name for lever in LEVERS + EXTRA_LEVERS]
    says("only when named in `--levers`")
    says("pulls each lever, in the order of the table above, on the best config so far")


def test_the_padded_vocabulary():
    assert VOCAB_MULTIPLE == 64
    cells = []
    for model in ("gpt2", "bert-base"):
        n = get_model(model).num_classes
        cells.append(f"{model} {n:,} -> {math.ceil(n / VOCAB_MULTIPLE) * VOCAB_MULTIPLE:,}")
    says(f"pads the vocabulary to a multiple of {VOCAB_MULTIPLE} ({', '.join(cells)}, as nanoGPT "
         "does)")
    says(f"language models whose vocabulary is not a multiple of {VOCAB_MULTIPLE} |")


def test_the_compiled_loss(store):
    # gpt2's logits at batch 32: batch x sequence x padded vocabulary
    spec = get_model("gpt2")
    padded = math.ceil(spec.num_classes / VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    says(f"gpt2's logits at batch 32 are {32 * spec.input_size * padded / 1e9:.1f} G values")
    eager, compiled = store.get(EAGER_LOSS), store.get(COMPILED_LOSS)
    assert eager.run_id == compiled.run_id
    for r in (eager, compiled):
        c = r.config
        assert (c.model, c.batch_size, c.pad_vocab, c.compile) == ("gpt2", 32, True, "default")
    assert (eager.config.compile_loss, compiled.config.compile_loss) == (False, True)
    assert flags(eager) == ["throttled (power)"]
    assert flags(compiled) == ["noisy", "throttled (power)"]
    gib = lambda r: r.memory["allocated_peak_bytes"] / 2**30  # noqa: E731
    assert round(gib(compiled) / gib(eager), 1) == 0.5
    says(f"(an H100: {rate(compiled) / rate(eager) - 1:+.0%} at batch 32, the peak memory halved, "
         f"{gib(eager):.1f} to {gib(compiled):.1f} GiB; the compiled window noisy, both throttled "
         "(power))")


def test_the_worth_of_cudnn_autotuning(store):
    a16, h16, a32, h32 = (first(store, run) for run in (AUTOTUNE_BF16, HEURISTICS_BF16,
                                                        AUTOTUNE_FP32, HEURISTICS_FP32))
    for r, precision, autotune in ((a16, "bf16", True), (h16, "bf16", False),
                                   (a32, "fp32", True), (h32, "fp32", False)):
        c = r.config
        assert (c.model, c.batch_size, c.channels_last, c.compile, c.precision, c.autotune) == (
            "resnet50", 256, True, None, precision, autotune)
    assert flags(a16) == flags(h16) == []
    assert flags(a32) == ["time cap"] and flags(h32) == ["time cap", "19 of 20 steps"]
    ta, th = store.get(TUNED_AUTOTUNE), store.get(TUNED_HEURISTICS)
    for r in (ta, th):
        c = r.config
        assert (c.model, c.precision, c.compile, c.cuda_graph, c.batch_size) == (
            "resnet50", "fp16", "default", True, 1024)
        assert flags(r) == ["throttled (power)"]
    assert (ta.config.autotune, th.config.autotune) == (True, False)
    says(f"bf16 {fmt_num(rate(a16))} img/s {hw(a16)} autotuned against {fmt_num(rate(h16))} "
         f"{hw(h16)} with cuDNN's heuristics, fp32 {fmt_num(rate(a32))} {hw(a32)} against "
         f"{fmt_num(rate(h32))} {hw(h32)} (autotuning {rate(a32) / rate(h32) - 1:+.1%}; both fp32 "
         "windows stopped by the time cap, the second after 19 of its 20 steps); in the tuned "
         f"ResNet-50 config (fp16, compiled, CUDA graph, batch 1024) {fmt_num(rate(ta))} {hw(ta)} "
         f"against {fmt_num(rate(th))} {hw(th)}, both throttled (power); each window from one "
         "process.")
    says(f"({a16.first_step_s:.1f} s against {h16.first_step_s:.1f} s of first step in bf16)")
    losses = [1 - rate(a) / rate(h) for a, h in ((a16, h16), (ta, th))]
    assert min(losses) > 0
    says(f"it wins in fp32 and never lost more than {max(losses):.1%}.")


def test_max_autotune_and_its_recipe(store):
    runs = {r.run_id: r for r in store.runs()}
    tries = [runs[i] for i in MAX_AUTOTUNE_TRIES]
    assert all(not store.results(run_id=r.run_id) for r in tries)
    assert all(r.command.startswith("dlbench throughput -m resnet50 --precision fp16")
               and "--compile max-autotune-no-cudagraphs" in r.command for r in tries)
    ended = [wall_s(r) for r in tries if r.finished_at]
    assert len(ended) == 2 and tries[-1].status == "running"
    says(f"outlasted {'three' if len(tries) == 3 else len(tries)} tries (the longest whose end "
         f"the store records: {max(ended):.0f} s)")
    default, autotuned = store.get(DEFAULT_COMPILE), store.get(MAX_AUTOTUNE)
    assert (default.config.compile, autotuned.config.compile) == (
        "default", "max-autotune-no-cudagraphs")
    assert gpu(default)["uuid"] == gpu(autotuned)["uuid"]
    assert flags(default) == flags(autotuned) == ["throttled (power)"]
    says(f"There it bought {rate(autotuned) / rate(default) - 1:.1%} ({fmt_num(rate(autotuned))} "
         f"img/s {hw(autotuned)} against {fmt_num(rate(default))} {hw(default)} on the same card, "
         "both throttled (power)), so the H100 recipe for ResNet-50 carries it")
    recipes = json.loads((ROOT / "src/dlbench/tuning/recipes.json").read_text())["recipes"]
    (r50,) = [r for r in recipes if r["model"] == "resnet50"]
    assert r50["device"] == "NVIDIA H100 80GB HBM3"
    assert r50["settings"]["compile"] == "max-autotune-no-cudagraphs"
    assert MAX_AUTOTUNE in r50["source_records"]
    # its setup, the compile with Inductor's timing records given: minutes
    tuned = store.get(TUNED_RESNET50)
    assert tuned.config.tuned and tuned.config.compile == "max-autotune-no-cudagraphs"
    assert setup_s(tuned) > 120
    says(f"`throughput --tuned` took {setup_s(tuned):.0f} s of setup so)")


def test_where_the_time_went(store):
    # the default compile's profile, and tuned mode's under max-autotune (another card)
    default, autotuned = store.get(DEFAULT_COMPILE), store.get(TUNED_RESNET50)
    share = {c["category"]: c["share"]
             for c in summarise(default.profile, default.summary().median_s)["categories"]}
    inductor = share["pointwise (Inductor)"] + share["reduction (Inductor)"]
    says(f"tuned step compiled in the default mode is {inductor:.0%} Inductor's pointwise and "
         f"reduction kernels (batch norm, ReLU, adds) and {share['convolution']:.0%} convolutions, "
         "and max-autotune's gain sits mostly in those reductions")
    ms = lambda r: {c["category"]: c["per_step_s"]  # noqa: E731
                    for c in summarise(r.profile)["categories"]}
    a, b = ms(default), ms(autotuned)
    assert autotuned.config.compile == "max-autotune-no-cudagraphs"
    assert autotuned.config.batch_size == default.config.batch_size == 1024
    step_gain = default.summary().median_s - autotuned.summary().median_s
    saved = {k: a[k] - b.get(k, 0.0) for k in a}
    assert max(saved, key=saved.get) == "reduction (Inductor)"
    assert saved["reduction (Inductor)"] > step_gain / 2 > 0


def test_the_cuda_graph_and_fused_sgd(store):
    assert inspect.signature(graphed).parameters["warmup"].default == 3
    says("three eager steps on a side stream")
    p = torch.nn.Parameter(torch.ones(3))
    assert make_optimizer("adamw", [p], capturable=True).defaults["capturable"] is True
    says("AdamW is built with `capturable=True`")
    sgd = make_optimizer("sgd", [p], impl="fused")
    assert sgd.defaults["momentum"] == 0.9
    assert torch.equal(sgd.state[p]["momentum_buffer"], torch.zeros(3))
    says(f"which gives stock SGD's first step exactly (`b = {sgd.defaults['momentum']} * 0 + g`)")
    nan = store.results(run_id="f0d5e7971cbd", kind="throughput")
    assert nan and all(r.error_type == "nan" for r in nan)
    assert {r.env["gpus"][0]["name"] for r in nan} == {"NVIDIA H100 80GB HBM3"}
    says("(NaN losses on an H100 within steps)")


# -- dlbench tune and --tuned -------------------------------------------------------------------
def test_the_margin_and_the_decisions(store):
    assert build_parser().parse_args(["tune", "-m", "resnet50"]).margin is None
    assert lever_search.MARGIN == 0.01 == StopRule().target_rel_ci
    assert build_parser().parse_args(["tune", "-m", "resnet50"]).target_ci == 0.01
    says(f"A lever is kept only if it gains more than `--margin` ({lever_search.MARGIN:.0%}, the "
         "interval dlbench's windows stop at)")
    trials = lever_search.replay(store.results(run_id=GPT2_SEARCH, kind="throughput"))[1:]
    kept = [t.why for t in trials if t.kept]
    within = [t.why for t in trials if not t.kept and t.why.endswith(", within 1%")]
    lost = [t.why for t in trials if not t.kept and t.why.startswith("-") and "within" not in t.why]
    assert kept and within and lost and len(kept) + len(within) + len(lost) == len(trials)
    assert any(w.startswith("-") for w in within) and any(w.startswith("+") for w in within)
    source = inspect.getsource(lever_search)
    assert 'f"n/a: {why_not}"' in source and '"failed: ' in source
    says("the decision (`kept` with the gain, a gain or loss `within 1%`, a larger loss, `n/a` and "
         "why where the lever does not apply, or `failed` and the error)")


def test_payback_and_the_pick(store):
    plain, tuned = store.get(TUNED_RESNET50_PLAIN), store.get(TUNED_RESNET50)
    extra = setup_s(tuned) - setup_s(plain)
    saved_per_sample = 1 / plain.summary().throughput - 1 / tuned.summary().throughput
    assert payback(plain, tuned).steps == pytest.approx(
        extra / saved_per_sample / tuned.config.batch_size)
    assert payback(tuned, plain).never
    says("`steps = extra_setup / saved_per_sample / batch`. A tuned config that is not faster "
         "never pays back.")
    # a tuned config that measured slower: the pick keeps the plain figure
    table = tuned_table(store.results(run_id="b235ab913c19", kind="throughput"))
    picks = [dict(zip(table.columns, row))["pick"] for row in table.rows]
    assert "plain (tuned lost)" in picks and "tuned" in picks
    says('where the tuned config measured slower, the pick says "plain (tuned lost)"')


def test_throughput_tuned_on_an_h100(store):
    plain, tuned = store.get(TUNED_RESNET50_PLAIN), store.get(TUNED_RESNET50)
    c = plain.config
    assert (c.batch_size, c.precision, c.channels_last, c.compile) == (1024, "bf16", False, None)
    assert tuned.config.tuned_from == c.key()
    t = tuned.config
    assert (t.precision, t.channels_last, t.compile, t.optimizer, t.optimizer_impl, t.cuda_graph,
            t.batch_size) == ("fp16", True, "max-autotune-no-cudagraphs", "sgd", "fused", True,
                              1024)
    assert flags(plain) == ["time cap", "13 of 20 steps"]
    assert flags(tuned) == ["throttled (power)"]
    says(f"`dlbench throughput -m resnet50 --tuned` measured plain {fmt_num(rate(plain))} img/s "
         f"{hw(plain)} (batch 1024, bf16, NCHW, eager; time cap, 13 of 20 steps; one process) and "
         f"tuned {fmt_num(rate(tuned))} img/s {hw(tuned)} ({rate(tuned) / rate(plain):.2f}x: fp16, "
         "channels_last, compiled under max-autotune-no-cudagraphs, fused SGD, CUDA graph; "
         f"throttled (power), {gpu(tuned)['mean_power_w']:.0f} W mean at the card's "
         f"{gpu(tuned)['power_limit_w']:.0f} W limit; one process)")
    gplain, gtuned = store.get(TUNED_GPT2_PLAIN), store.get(TUNED_GPT2)
    g = gtuned.config
    assert g.tuned and g.tuned_from == gplain.config.key()
    assert (g.pad_vocab, g.compile, g.compile_loss, g.batch_size) == (True, "default", True, 64)
    assert flags(gplain) == [] and flags(gtuned) == ["noisy", "throttled (power)"]
    assert gtuned.summary().rel_halfwidth > gtuned.config.stop.target_rel_ci == 0.01
    says(f"`dlbench throughput -m gpt2 --tuned` {fmt_num(rate(gplain))} tok/s {hw(gplain)} (one "
         f"process) against {fmt_num(rate(gtuned))} tok/s {hw(gtuned)} "
         f"({rate(gtuned) / rate(gplain):.2f}x: padded vocabulary, compiled with its loss, batch "
         "64; throttled (power), noisy: the interval missed its 1% target; one process)")


def test_the_default_suite_plain_and_tuned(store):
    def factor(pair) -> float:
        plain, tuned = map(store.get, pair)
        assert tuned.config.tuned and tuned.config.tuned_from == plain.config.key()
        return rate(tuned) / rate(plain)
    cnns = [factor(pair) - 1 for pair in SUITE_CNNS.values()]
    nasnet_plain = store.get(SUITE_NASNET[0])
    assert "noisy" in flags(nasnet_plain)
    says(f"the other CNNs gain {min(cnns) * 100:.1f}-{max(cnns):.1%} (NASNet "
         f"{factor(SUITE_NASNET) - 1:.0%}, over a plain window flagged noisy)")
    gainers = {name: factor(pair) for name, pair in SUITE_GAINERS.items()}
    assert min(gainers.values()) > max(factor(p) for p in (*SUITE_CNNS.values(), SUITE_NASNET))
    for _, tuned in SUITE_GAINERS.values():
        assert "throttled (power)" in flags(store.get(tuned))
    says(", ".join(f"{n} ({f:.2f}x)" for n, f in list(gainers.items())[:-1])
         + f" and GPT-2 ({gainers['GPT-2']:.2f}x) gain most, each tuned window throttled (power); "
           "every figure of the suite from one process.")


# -- where the time goes ------------------------------------------------------------------------
def test_the_kernel_profiles(store):
    rows = (("ResNet-50 b1024 bf16 NCHW eager", TUNED_RESNET50_PLAIN),
            ("ResNet-50 b1024 fp16 tuned, compiled", DEFAULT_COMPILE),
            ("GPT-2 b64 bf16 tuned (cuDNN attention 19%)", GPT2_PROFILED))
    columns = ("convolution", "GEMM", "pointwise (Inductor)", "reduction (Inductor)",
               "batch norm", "elementwise, reduction (PyTorch)")
    shares = {}
    for label, rid in rows:
        r = store.get(rid)
        cats = {c["category"]: c for c in summarise(r.profile, r.summary().median_s)["categories"]}
        shares[rid] = {k: c["share"] for k, c in cats.items()}
        cells = [f"{cats[k]['share']:.0%}" if k in cats and cats[k]["per_step_s"] > 1e-3 else "-"
                 for k in columns]
        says(f"| {label} | {r.summary().median_s * 1e3:.1f} ms | {' | '.join(cells)} | "
             f"{'; '.join(flags(r))} |")
    says("the step is the window's median; every window from one process")
    gpt = shares[GPT2_PROFILED]
    assert f"{gpt['attention']:.0%}" == "19%"
    assert round(gpt["GEMM"], 1) == 0.5 and round(gpt["attention"], 1) == 0.2
    says("For GPT-2 half the step is cuBLAS GEMMs and a fifth flash attention.")
    eager = shares[TUNED_RESNET50_PLAIN]
    compiled = shares[DEFAULT_COMPILE]
    says(f"take {eager['batch norm'] + eager['elementwise, reduction (PyTorch)']:.0%} of the eager "
         f"step and {compiled['pointwise (Inductor)'] + compiled['reduction (Inductor)']:.0%} of "
         "the compiled one.")
    nchw = store.get(TUNED_RESNET50_PLAIN).profile
    layout = sum(s for name, _, s in nchw["kernels"]
                 if "nchwToNhwc" in name or "nhwcToNchw" in name) / nchw["steps"]
    says(f"NCHW eager also spends {layout * 1e3:.1f} ms per step converting layouts")


# -- the pitfalls and the fidelity band -----------------------------------------------------------
def test_the_pitfalls(store):
    cards = [store.get(rid) for rid, _ in H.GPT2_CARD_RECORDS]
    assert all("throttled (power)" in flags(r) for r in cards)
    uuids = {gpu(r)["uuid"] for r in cards}
    says(f"differs by about {max(map(rate, cards)) / min(map(rate, cards)) - 1:.0%} between cards "
         f"of one model (GPT-2's tuned config on {'five' if len(uuids) == 5 else len(uuids)} "
         "H100s)")
    b64, b96, b128 = map(store.get, (GPT2_B64, GPT2_B96, GPT2_B128))
    assert [r.config.batch_size for r in (b64, b96, b128)] == [64, 96, 128]
    assert len({r.config.key() for r in (b64, b96, b128)}) == 3
    assert {r.run_id for r in (b64, b96, b128)} == {b64.run_id}
    assert flags(b64) == ["throttled (power)"]
    assert flags(b96) == ["time cap", "throttled (power)"]
    assert flags(b128) == ["time cap", "17 of 20 steps", "throttled (power)"]
    says(f"GPT-2's tuned config ran {1 - rate(b96) / rate(b64):.0%} and "
         f"{1 - rate(b128) / rate(b64):.0%} slower at batch 96 and 128 than at 64 on an H100 "
         f"({fmt_num(rate(b96))} {hw(b96)} and {fmt_num(rate(b128))} {hw(b128)} against "
         f"{fmt_num(rate(b64))} tok/s {hw(b64)}; both larger batches stopped by the time cap, 128 "
         "after 17 of its 20 steps; all three throttled (power), one process each).")


def test_the_generic_recipe_leaves_compile_out(store):
    nasnet = store.get(NASNET_FIRST_COMPILE)
    assert (nasnet.config.model, nasnet.config.compile) == ("nasnet", "default")
    compiled = [r for r in store.results(kind="throughput") if r.ok and r.config.compile]
    assert max(compiled, key=setup_s).id == NASNET_FIRST_COMPILE
    says(f"it costs up to minutes of setup per model (NASNet's first compile on an H100: "
         f"{setup_s(nasnet):.0f} s)")


def test_the_fidelity_band():
    bands = script("fidelity").BANDS
    fmt = lambda band: "-".join(f"{x:.2f}" for x in band)  # noqa: E731
    says(f"median of the ratios within {fmt(bands['cuda'])} on a GPU, {fmt(bands['cpu'])} on the "
         "CPU)")
    tuned = json.loads((ROOT / "results" / H.H100 / "fidelity-tuned.json").read_text())
    assert tuned["band"] == list(bands["cuda"]) and tuned["pass"]
