"""docs/frameworks.md against its sources. The optimizers' rates of both frameworks, the window's
queue bound, the fidelity band, the dropout rates and the preallocation JAX takes are checked
against the code; the H100 comparison (every pair of the frameworks store as the comparison view
makes it: each side's figure with its interval, the ratio and the flags of both records), its
summary ranges, the JAX fidelity file, the records that predate the dropout rule and the time to
accuracy before and after the two warm-up fixes are recomputed from the committed files. The
two-H100 paragraph is checked by tests/test_2x_h100_page.py."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch
from fakes.cli import script
from fakes.pages import H, assert_says, store_fixture

from dlbench.frameworks import dropout
from dlbench.measure.window import IN_FLIGHT_S
from dlbench.reference import select, sources
from dlbench.report.cards import different_cards
from dlbench.report.frameworks import (PREALLOC_NOTE, _with_interval, pairs, rate,
                                       torch_setting, work_differs)
from dlbench.report.network import ps_cluster_table
from dlbench.store import Store
from dlbench.workloads.throughput import make_optimizer

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "frameworks.md").read_text()
FRAMEWORKS = f"{H.H100}/frameworks"
FOLDER = ROOT / "results" / FRAMEWORKS
NAMES = {"resnet50": "ResNet-50", "vgg16": "VGG-16", "vit_b_16": "ViT-B/16", "gpt2": "GPT-2",
         "cnn10": "cnn10"}
LARGE = ("resnet50", "vgg16", "vit_b_16", "gpt2")

store = store_fixture(FRAMEWORKS)


def says(text: str) -> None:
    assert_says(PAGE, text)


# -- what is the same ----------------------------------------------------------------------------
def test_pytorchs_optimizers():
    params = [torch.nn.Parameter(torch.zeros(2))]
    sgd, adamw = make_optimizer("sgd", params), make_optimizer("adamw", params)
    assert (sgd.defaults["lr"], sgd.defaults["momentum"]) == (1e-3, 0.9)
    assert adamw.defaults["lr"] == 1e-4
    says("| optimizers | SGD momentum 0.9 (lr 1e-3), AdamW (lr 1e-4) | Optax `sgd(momentum=0.9)`, "
         "`adamw`, the same rates |")


def test_jaxs_optimizers_take_the_same_rates():
    """The first update of a zero parameter by a gradient of one is minus the rate, for SGD with
    momentum and for AdamW (its bias-corrected moments make it exactly one step of the rate)."""
    pytest.importorskip("jax", reason="the jax extra is not installed")
    optax = pytest.importorskip("optax", reason="the jax extra is not installed")
    import jax.numpy as jnp

    from dlbench.frameworks.jax.step import make_optimizer as jax_optimizer
    for name, lr in (("sgd", 1e-3), ("adamw", 1e-4)):
        tx = jax_optimizer(name)
        params = jnp.zeros(1)
        updates, _ = tx.update(jnp.ones(1), tx.init(params), params)
        assert float(optax.apply_updates(params, updates)[0]) == pytest.approx(-lr, rel=1e-4)


def test_the_queue_the_timer_waits_on():
    assert IN_FLIGHT_S == 1.0
    says("after queuing step *i* the host waits for step *i-k* (about one second of work)")


def test_the_fidelity_band_and_the_h100_ratio():
    band = script("fidelity").BANDS["cuda"]
    assert band == (0.99, 1.01)
    says(f"the median ratio must sit within {band[0]}-{band[1]} on a GPU.")
    fid = json.loads((FOLDER / "fidelity-jax.json").read_text())
    c = fid["config"]
    assert (c["framework"], c["model"], c["batch_size"], c["precision"]) == \
        ("jax", "resnet50", 128, "bf16")
    assert tuple(fid["band"]) == band and fid["pass"]
    assert "H100" in fid["env"]["gpus"][0]["name"]
    says(f"dlbench's JAX path against a bare JAX loop, ResNet-50 b128 bf16, median ratio "
         f"{fid['median_ratio']:.4f} (band {band[0]}-{band[1]}: pass)")


def test_the_dropout_rates():
    r = dropout.RATES
    assert r["gpt2"] == {"embedding": 0.1, "residual": 0.1, "attention": 0.1}
    assert r["vgg16"] == {"classifier": 0.5}
    assert r["resnet50"] == r["vit_b_16"] == r["cnn10"] == {}
    says("GPT-2's embeddings, residual branches and attention probabilities (0.1 each), VGG-16's "
         "classifier (0.5); ResNet-50, ViT-B/16 (torchvision's rates are 0) and cnn10 drop "
         "nothing.")
    says(f"(GPT-2 in training, {r['gpt2']['attention']}, which PyTorch's SDPA does inside its "
         "kernel)")


def test_what_jax_takes_at_start():
    assert "by default JAX grabs 75% of the GPU when it starts" in PREALLOC_NOTE
    says("JAX grabs 75% of the GPU's memory when its backend starts.")
    says("PyTorch in the same process would find the GPU three quarters full.")


def test_three_articles_measured_tensorflow():
    tf_cnn = {r.framework for r in select(source="tf-cnn-benchmarks")}
    assert all("TensorFlow" in f for f in tf_cnn)
    assert "TensorFlow" in sources()["cifar10-frameworks"]["title"]
    assert "TensorFlow" in ps_cluster_table.__doc__       # the slow-networks study's cluster
    says("Three of the articles dlbench reproduces compared TensorFlow.")


# -- the H100 comparison ---------------------------------------------------------------------------
def side_flags(side) -> str:
    """A side's flags as the page words them: each once, ``one process`` left out (said once
    above the table), the step-time spread of a group's processes as one range."""
    seen: dict[str, None] = {}
    for r in side:
        for f in H.record_flags(r):
            if f != "one process":
                seen.setdefault(f, None)
    cvs = sorted(int(f[3:-1]) for f in seen if f.startswith("cv "))
    out = []
    for f in seen:
        if not f.startswith("cv "):
            out.append(f)
        elif not any(o.startswith("cv ") for o in out):
            out.append(f"cv {cvs[0]}%" if len(cvs) == 1 else f"cv {cvs[0]}-{cvs[-1]}%")
    return ", ".join(out)


def row_flags(t, j) -> str:
    parts = [f"{who}: {fl}" for who, fl in (("PT", side_flags(t)), ("JAX", side_flags(j))) if fl]
    if any(different_cards(a, b) for a in t for b in j):
        parts.append("on different cards")
    differs = work_differs(t, j)
    if differs:
        parts.append(differs)
    return "; ".join(parts) or "–"


def comparison(store) -> list[tuple]:
    """(model, precision, PyTorch as, PyTorch side, JAX side, ratio) of every pair."""
    out = []
    for rep, by in pairs(store.results(kind="throughput")):
        t, j = by["torch"], by["jax"]
        c = rep.config
        assert c.mode == "train" and all(len(side) in (1, 3) for side in (t, j))
        out.append((c.model, c.precision, torch_setting(t[0]), t, j, rate(j)[0] / rate(t)[0]))
    return out


def test_every_pair_of_the_h100_store(store):
    rows = comparison(store)
    assert len(rows) == 19
    assert {len(j) for *_, j, _ in rows} == {1}                        # JAX: one process each
    groups = [(m, how) for m, _, how, t, _, _ in rows if len(t) == 3]
    assert groups == [("resnet50", "compiled NHWC"), ("vit_b_16", "eager NCHW")]
    says("± the 95% interval, within one process, or across three fresh processes where (3) "
         "follows it; every other figure is one process")
    for model, prec, how, t, j, ratio in rows:
        says(f"| {NAMES[model]} | {prec} | {t[0].config.batch_size} | {how} | "
             f"{_with_interval(t)} | {_with_interval(j)} | {ratio:.2f} | {row_flags(t, j)} |")


def test_the_summary_of_the_comparison(store):
    rows = comparison(store)

    def ratios(prec, compiled, models):
        return {m: r for m, p, how, _, _, r in rows
                if p == prec and how.startswith("compiled") == compiled and m in models}
    # PyTorch eager in its best layout: the lowest ratio over its layouts
    best_eager: dict[str, float] = {}
    for m, p, how, _, _, r in rows:
        if p == "bf16" and not how.startswith("compiled"):
            best_eager[m] = min(best_eager.get(m, r), r)
    large = [best_eager[m] for m in LARGE]
    compiled = ratios("bf16", True, LARGE + ("cnn10",))
    four = [compiled[m] for m in LARGE]
    says(f"In bf16, JAX's compiled step is {min(large):.1f}-{max(large):.1f}x PyTorch eager in "
         f"its best layout for the four large models and {best_eager['cnn10']:.1f}x for cnn10")
    says(f"against compiled PyTorch, {min(four):.2f}-{max(four):.2f}x for the four")
    assert compiled["resnet50"] > 1 and compiled["vit_b_16"] > 1
    assert compiled["vgg16"] < 1 and compiled["gpt2"] < 1
    noisy = {m: t for m, p, how, t, _, _ in rows if p == "bf16" and how.startswith("compiled")}
    assert all("noisy (time cap)" in H.record_flags(r) for m in ("resnet50", "vit_b_16")
               for r in noisy[m])
    says("(ahead on ResNet-50 and ViT-B/16, whose compiled PyTorch rows are noisy; behind on "
         f"VGG-16 and GPT-2) and {compiled['cnn10']:.1f}x for cnn10, both of whose sides are "
         "noisy there.")
    [(t, j)] = [(t, j) for m, p, how, t, j, _ in rows
                if (m, p, how) == ("cnn10", "bf16", "compiled NHWC")]
    assert all(H.record_flags(r)[0] == "noisy (time cap)" for r in (*t, *j))
    fp32 = [r for _, p, _, _, _, r in rows if p == "fp32"]
    spread = max(abs(r - 1) for r in fp32)
    assert round(spread, 2) == 0.11
    says(f"In fp32 the two are within {spread:.0%}.")


# -- the records from before the dropout rule ------------------------------------------------------
def test_the_jax_records_that_predate_the_dropout_rule(store, tmp_path):
    jax_records = [r for r in store.results(kind="throughput") if r.config.framework == "jax"]
    assert jax_records and all(dropout.predates_rule(r) for r in jax_records)
    [gpt2] = [r for r in jax_records if r.config.model == "gpt2"]
    assert (gpt2.config.precision, gpt2.config.batch_size, gpt2.config.mode) == ("bf16", 8,
                                                                                "train")
    first = tmp_path / "first.db"
    with gzip.open(FOLDER / "first-measurements.db.gz", "rb") as src, open(first, "wb") as dst:
        shutil.copyfileobj(src, dst)
    with Store(first) as old:
        [early] = [r for r in old.results(kind="throughput")
                   if r.config.framework == "jax" and r.config.model == "gpt2"]
    assert (early.config.precision, early.config.batch_size) == ("bf16", 16)
    assert dropout.predates_rule(early)
    says("its JAX GPT-2 training records (bf16, b8 in `dlbench.db.gz`, b16 in "
         "`first-measurements.db.gz`)")
    # the other twins already dropped what PyTorch drops
    others = {r.config.model for r in jax_records if r.config.model != "gpt2"}
    assert others == {"resnet50", "vgg16", "vit_b_16", "cnn10"}
    assert all(dropout.of_jax(r) == dropout.applied(r.config.model, r.config.mode)
               for r in jax_records if r.config.model != "gpt2")
    says("The other JAX records there (ResNet-50, VGG-16, ViT-B/16, cnn10) already dropped what "
         "PyTorch dropped")
    ratio = {how: (t, r) for m, _, how, t, _, r in comparison(store) if m == "gpt2"}
    compiled_pt, compiled = ratio["compiled"]
    assert any(f.startswith("energy-mismatch") for f in H.record_flags(compiled_pt[0]))
    says(f"so their ratios ({compiled:.2f} against compiled, whose PyTorch record is flagged "
         f"energy-mismatch, and {ratio['eager'][1]:.2f} against eager, in the table above and "
         "the README's) flatter JAX.")


# -- the time to accuracy before and after the warm-up fixes --------------------------------------
def _runs(store, framework: str) -> dict[str, object]:
    return {r.config.precision: r for r in store.results(kind="train")
            if r.config.framework == framework}


def _epochs(r) -> str:
    times = [f"{t:.2f} s" for t in r.epoch_times_s]
    return ", ".join(times[:-1]) + " and " + times[-1]


def test_the_time_to_accuracy_runs_from_before_the_warm_up_fixes_and_their_rerun(store,
                                                                                  tmp_path):
    old_jax, old_torch = _runs(store, "jax"), _runs(store, "torch")
    assert set(old_jax) == {"bf16", "fp32"}
    assert all(r.compile_in_first_epoch for r in old_jax.values())
    for prec, r in old_jax.items():
        first, rest = r.epoch_times_s[0], r.epoch_times_s[1:]
        assert first > 2 * max(rest)  # the compile is in it
        says(f"{prec} {r.time_to_train_s:.2f} s, its first epoch {first:.2f} s against "
             + " and ".join(f"{t:.2f} s" for t in rest))
    bf16 = old_torch["bf16"]
    rest = [f"{t:.2f} s" for t in bf16.epoch_times_s[1:]]
    assert bf16.epoch_times_s[0] > 2 * max(bf16.epoch_times_s[1:])  # the autotuning is in it
    assert all(r.autotune_in_first_epoch for r in old_torch.values())  # and the view says so
    says('the JAX ones "compile in 1st epoch", the PyTorch ones on a GPU whose epoch ends on a '
         'partial batch "autotune in 1st epoch"')
    says(f"PyTorch: bf16 {bf16.time_to_train_s:.2f} s, its first epoch "
         f"{bf16.epoch_times_s[0]:.2f} s against {', '.join(rest[:-1])} and {rest[-1]})")
    with H.open_store(ROOT / "results", f"{FRAMEWORKS}/train-2026-11-27", tmp_path) as again:
        new_jax, new_torch = _runs(again, "jax"), _runs(again, "torch")
    assert not any(r.compile_in_first_epoch for r in new_jax.values())
    assert not any(r.autotune_in_first_epoch for r in new_torch.values())
    # with every shape warmed up in init, no first epoch stands out
    assert all(r.epoch_times_s[0] < 1.2 * min(r.epoch_times_s[1:])
               for r in (*new_jax.values(), *new_torch.values()))
    says(f"JAX bf16 {new_jax['bf16'].time_to_train_s:.2f} s (epochs of "
         f"{_epochs(new_jax['bf16'])}), fp32 {new_jax['fp32'].time_to_train_s:.2f} s "
         f"({_epochs(new_jax['fp32'])}); PyTorch bf16 {new_torch['bf16'].time_to_train_s:.2f} s "
         f"({_epochs(new_torch['bf16'])}), fp32 {new_torch['fp32'].time_to_train_s:.2f} s "
         f"({_epochs(new_torch['fp32'])}).")
