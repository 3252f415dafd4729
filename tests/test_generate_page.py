"""The generation campaign page's prose against its records: every figure the prose quotes is
recomputed here from the committed store and fidelity files (the page's tables are checked by
tests/test_readme_claims.py, which renders them from the same store)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, stored_runs

from dlbench.measure import generation as gen
from dlbench.models.lm import get_lm, meta_shape
from dlbench.report.generate_figures import bandwidth_roof, datasheet_roof
from dlbench.tuning.payback import payback

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.GENERATE_PAGE).read_text()
FOLDER = ROOT / "results" / H.H100_GENERATE


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return stored_runs(H.H100_GENERATE, H.GENERATE_RUNS, "generate",
                       tmp_path_factory.mktemp("gen"))


def one(recs, model, batch, path):
    [r] = [r for r in recs if (r.config.model, r.config.batch_size, r.config.path)
           == (model, batch, path)]
    return r


def auto_batch(log: Path, model: str) -> int:
    """The batch ``-b auto`` chose for ``model``, as the run's log printed it."""
    [batch] = re.findall(rf"-b auto: {re.escape(model)} \S+ \S+ -> batch (\d+)", log.read_text())
    return int(batch)


def says(text: str) -> None:
    assert_says(PAGE, text)


def test_decode_at_batch_one_against_the_roof(records):
    recs, peaks = records
    r = one(recs, "llama-3.1-8b", 1, "compile")
    roof = bandwidth_roof(r, peaks)
    assert roof.source == "measured"
    says(f"takes {r.tpot().mean_s * 1e3:.2f} ms a token")
    says(f"{r.decode_gbs():,.0f} GB/s, **{r.roofline_fraction(roof.gbs):.1%}** of the "
         f"{roof.gbs:,.0f} GB/s its card copies")
    ds = datasheet_roof(r)
    says(f"({r.roofline_fraction(ds.gbs):.1%} of the datasheet's {ds.gbs:,.0f} GB/s)")
    weights = gen.weight_bytes_per_step(meta_shape(get_lm("llama-3.1-8b")), "bf16", 1)
    says(f"the model's {weights / 1e9:.1f} GB of weights")
    small = one(recs, "llama-3.2-1b", 1, "compile")
    says(f"its {small.shape['layers']} layers launch half the kernels of the 8B model's "
         f"{r.shape['layers']}")
    says(f"the same path reaches {small.roofline_fraction(bandwidth_roof(small, peaks).gbs):.1%}")


def test_larger_batches(records):
    recs, peaks = records
    b1, b32 = one(recs, "llama-3.1-8b", 1, "compile"), one(recs, "llama-3.1-8b", 32, "compile")
    says(f"{b1.output_tokens_per_s():.1f} at batch 1, {b32.output_tokens_per_s():,.0f} at "
         "batch 32")
    says(f"({b32.roofline_fraction(bandwidth_roof(b32, peaks).gbs):.1%} at batch 32)")


def test_the_eager_caveat(records):
    recs, _ = records
    eager = [r for r in recs if r.config.path == "eager"]
    assert all(r.stop_reason == "time_cap" for r in eager)
    widths = sorted(r.summary().rel_halfwidth for r in eager)
    says(f"an interval of ±{widths[0]:.1%} to ±{widths[-1]:.1%}")
    tails = sorted(r.tpot().p99_s / r.tpot().median_s for r in eager)
    says(f"TPOT p99 is {tails[0]:.1f} to {tails[-1]:.1f} times their median")


def test_setup_and_pay_back(records):
    recs, _ = records
    compiled = [r for r in recs if r.config.path == "compile"]
    firsts = sorted(r.first_step_s for r in compiled)
    says(f"took {firsts[0]:.0f} to {firsts[-1]:.0f} s")
    small = payback(one(recs, "llama-3.2-1b", 1, "eager"), one(recs, "llama-3.2-1b", 1, "compile"))
    large = payback(one(recs, "llama-3.1-8b", 1, "eager"), one(recs, "llama-3.1-8b", 1, "compile"))
    says(f"within {small.samples:,.0f} (llama-3.2-1b) and {large.samples:,.0f} (llama-3.1-8b) "
         "output tokens")


def test_fidelity_figures_are_the_files():
    graph = json.loads((FOLDER / "fidelity-graph.json").read_text())
    assert graph["pass"] and graph["config"]["path"] == "graph"
    ratios = [r["ratio"] for r in graph["rounds"]]
    says(f"median ratio **{graph['median_ratio']:.4f}** over {len(ratios)} rounds "
         f"({min(ratios):.4f} to {max(ratios):.4f})")
    first, again = (json.loads((FOLDER / f).read_text())
                    for f in ("fidelity-compile.json", "fidelity-compile-again.json"))
    assert not first["pass"] and not again["pass"]
    says(f"(medians {first['median_ratio']:.4f} and {again['median_ratio']:.4f} over "
         f"{len(first['rounds'])} and {len(again['rounds'])} rounds")


def test_what_auto_chose(records):
    recs, _ = records
    # What the run's dlbench chose, as its log says: the estimate has grown since.
    chosen = auto_batch(FOLDER / "gpu0.log", "llama-3.2-1b")
    # the third campaign's first try chose the same, and ran out of memory (see below)
    assert chosen == auto_batch(FOLDER / "h100-third-1.log", "llama-3.2-1b")
    says(f"`-b auto` first chose {chosen:,} for llama-3.2-1b")
    measured = {(r.config.model, r.config.batch_size, r.config.path) for r in recs}
    assert ("llama-3.2-1b", 64, "compile") not in measured
    assert not any(r.config.batch_size == 64 for r in recs if r.config.model == "llama-3.1-8b")


def test_generation_doc_quotes_the_cpu_fidelity_files():
    doc = " ".join((ROOT / "docs" / "generation.md").read_text().split())
    cpu = ROOT / "results" / "pt2.14-cpu"

    def median(name: str) -> str:
        result = json.loads((cpu / name).read_text())
        assert result["mode"] == "generate" and result["config"]["model"] == "test-llama"
        return f"{result['median_ratio']:.4f}"
    old = median("fidelity-generate-eager-logits-processor.json")
    assert f"came out at a median ratio of {old}" in doc
    eager = [median(f"fidelity-generate-eager{s}.json") for s in ("", "-again")]
    assert f"two runs gave {eager[0]} and {eager[1]}" in doc
    static = [median(f"fidelity-generate-static{s}.json") for s in ("", "-again")]
    assert f"and the static loop {static[0]} and {static[1]}" in doc


def test_the_old_eager_paths_cost_is_its_fidelity_file():
    old = json.loads((ROOT / "results" / "pt2.14-cpu" /
                      "fidelity-generate-eager-logits-processor.json").read_text())
    says(f"on the CPU that version cost {1 - old['median_ratio']:.0%}")


def test_readme_says_what_the_records_measured(records):
    recs, _ = records
    readme = " ".join((ROOT / "README.md").read_text().split())
    batches = sorted({r.config.batch_size for r in recs})
    [(prompt, output)] = {(r.config.prompt_len, r.config.output_len) for r in recs}
    assert (f"generating {output} tokens from {prompt}-token prompts at batch {batches[0]} to "
            f"{batches[-1]}") in readme
    compiled = sorted({r.config.batch_size for r in recs if r.config.path == "compile"})
    assert f"graph-captured decode step (at batch {compiled[0]} to {compiled[-1]})" in readme
    assert sorted({r.config.model for r in recs}) == ["llama-3.1-8b", "llama-3.2-1b"]


# -- the second campaign: one H100 alone, fused projections ---------------------------------------
@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return stored_runs(H.H100_GENERATE, H.GENERATE_FUSED_RUNS, "generate",
                       tmp_path_factory.mktemp("fused"))


def test_the_fused_step_against_the_roof(fused, records):
    recs, peaks = fused
    assert len({r.env["gpus"][0]["uuid"] for r in recs}) == 1     # one card, as the page says
    assert all(r.env["gpu_count"] == 1 for r in recs)
    r = one(recs, "llama-3.1-8b", 1, "compile")
    assert r.config.fuse and r.config.path_label == "compile+fuse"
    roof = bandwidth_roof(r, peaks)
    assert roof.source == "measured"
    # the roof was measured on this very card, not on a card of the first campaign
    assert any(p.config.verb == "copy" and p.env["gpus"][0]["uuid"] == r.env["gpus"][0]["uuid"]
               for p in peaks)
    frac = r.roofline_fraction(roof.gbs)
    assert frac >= 0.80                       # the target, as the page claims
    says(f"takes {r.tpot().mean_s * 1e3:.2f} ms a token at batch 1: "
         f"{r.decode_gbs():,.0f} GB/s, **{frac:.1%}** of the {roof.gbs:,.0f} GB/s this card copies "
         f"({r.roofline_fraction(datasheet_roof(r).gbs):.1%} of the datasheet's "
         f"{datasheet_roof(r).gbs:,.0f} GB/s)")
    # the figure's flags, as its record has them
    assert H.record_flags(r) == ["noisy (time cap)", "one process"]
    t = r.tpot()
    says(f"from one process whose window carries `noisy (time cap)`: its output rate's interval "
         f"is ±{r.summary().rel_halfwidth:.2%}, above the 1% target, while its decode steps' p50 "
         f"and p99 are {t.median_s * 1e3:.2f} and {t.p99_s * 1e3:.2f} ms")
    old_recs, old_peaks = records
    old = one(old_recs, "llama-3.1-8b", 1, "compile")
    assert H.record_flags(old) == ["noisy", "one process"]
    says(f"the same step unfused took {old.tpot().mean_s * 1e3:.2f} ms "
         f"({old.roofline_fraction(bandwidth_roof(old, old_peaks).gbs):.1%} of its card's roof, "
         f"on another card of the same kind; flagged noisy, ±{old.summary().rel_halfwidth:.2%})")
    small = one(recs, "llama-3.2-1b", 1, "compile")
    old_small = one(old_recs, "llama-3.2-1b", 1, "compile")
    says(f"llama-3.2-1b's fused step reaches "
         f"{small.roofline_fraction(bandwidth_roof(small, peaks).gbs):.1%} "
         f"({old_small.roofline_fraction(bandwidth_roof(old_small, old_peaks).gbs):.1%} unfused")


def test_generate_alone_is_still_unsteady(fused):
    recs, _ = fused
    e = one(recs, "llama-3.1-8b", 1, "eager")
    assert e.stop_reason == "time_cap"
    t = e.tpot()
    says(f"gave {e.output_tokens_per_s():.2f} output tok/s ±{e.summary().rel_halfwidth:.1%}, its "
         f"TPOT p99 ({t.p99_s * 1e3:.1f} ms) {t.p99_s / t.median_s:.1f} times its median "
         f"({t.median_s * 1e3:.1f} ms)")
    f1 = one(recs, "llama-3.1-8b", 1, "compile").output_tokens_per_s() / e.output_tokens_per_s()
    e64 = one(recs, "llama-3.1-8b", 64, "eager")
    f64 = one(recs, "llama-3.1-8b", 64, "compile").output_tokens_per_s() / e64.output_tokens_per_s()
    says(f"{f1:.2f}x faster at batch 1 and {f64:.2f}x at batch 64")


def test_the_largest_batch_on_one_h100(fused):
    recs, _ = fused
    [big] = [r for r in recs if r.config.batch_size > 64]
    chosen = auto_batch(FOLDER / "h100-fused-2.log", "llama-3.1-8b")
    assert big.config.batch_size == chosen
    says(f"`-b auto` chose batch {chosen} for llama-3.1-8b")
    says(f"{big.output_tokens_per_s():,.0f} output tok/s, each decode step "
         f"{big.tpot().mean_s * 1e3:.1f} ms, its time to first token {big.ttft().mean_s:.1f} s")
    says(f"At llama-3.1-8b's largest batch ({chosen} sequences)")


def test_readme_quotes_the_fused_roof_fraction(fused):
    recs, peaks = fused
    r = one(recs, "llama-3.1-8b", 1, "compile")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"decode step at batch 1 reads its weights at "
            f"{r.roofline_fraction(bandwidth_roof(r, peaks).gbs):.1%} of the card's measured copy "
            f"bandwidth (one process, flagged noisy: ±{r.summary().rel_halfwidth:.2%})") in readme


def test_the_generation_guide_quotes_both_h100_campaigns(fused, records):
    recs, peaks = fused
    old_recs, old_peaks = records
    new, old = one(recs, "llama-3.1-8b", 1, "compile"), one(old_recs, "llama-3.1-8b", 1, "compile")
    assert new.config.fuse and not old.config.fuse
    doc = " ".join((ROOT / "docs" / "generation.md").read_text().split())
    # each figure with its record's flags (both one process)
    assert H.record_flags(old)[0] == "noisy" and H.record_flags(new)[0] == "noisy (time cap)"
    assert (f"on an H100, from {old.tpot().mean_s * 1e3:.2f} ms "
            f"({old.roofline_fraction(bandwidth_roof(old, old_peaks).gbs):.1%} of the memory roof; "
            f"noisy, ±{old.summary().rel_halfwidth:.2%}) to {new.tpot().mean_s * 1e3:.2f} ms "
            f"({new.roofline_fraction(bandwidth_roof(new, peaks).gbs):.1%}; noisy (time cap), "
            f"±{new.summary().rel_halfwidth:.2%}), measured on two cards of the same kind") in doc
    assert "Each figure is one process." in doc


# -- the third campaign: 3B, the largest batches, folded attention --------------------------------
@pytest.fixture(scope="module")
def third(tmp_path_factory):
    return stored_runs(H.H100_GENERATE, H.GENERATE_THIRD_RUNS, "generate",
                       tmp_path_factory.mktemp("third"))


def _roof(r, peaks) -> float:
    roof = bandwidth_roof(r, peaks)
    assert roof.source == "measured"  # each call measured its own card's copy bandwidth
    return r.roofline_fraction(roof.gbs)


def test_folding_at_large_batches(third, fused):
    recs, peaks = third
    old, old_peaks = fused
    folded = {r.config.batch_size: r for r in recs
              if r.ok and r.config.model == "llama-3.1-8b" and r.config.fold_gqa
              and r.config.precision == "bf16" and r.config.path == "compile"}
    assert sorted(folded) == [1, 64, 711]
    assert all(r.config.fuse and r.config.path == "compile" for r in folded.values())
    unfolded = {b: one(old, "llama-3.1-8b", b, "compile") for b in (1, 64, 711)}
    assert not any(r.config.fold_gqa for r in unfolded.values())
    eager = one(recs, "llama-3.1-8b", 711, "eager")
    u, f = unfolded[711], folded[711]
    says(f"made the compiled, fused step slower than `generate()`: {u.tpot().mean_s * 1e3:.1f} ms "
         f"a token against {eager.tpot().mean_s * 1e3:.1f} ms")
    says(f"the same step takes {f.tpot().mean_s * 1e3:.1f} ms: "
         f"{f.output_tokens_per_s() / u.output_tokens_per_s():.2f}x the unfolded step's output "
         f"rate and {f.output_tokens_per_s() / eager.output_tokens_per_s():.2f}x `generate()`'s")
    says(f"only after {payback(eager, f).samples:,.0f} output tokens")
    u, f = unfolded[64], folded[64]
    says(f"batch 64 folding gives {f.output_tokens_per_s() / u.output_tokens_per_s():.2f}x "
         f"({u.tpot().mean_s * 1e3:.1f} to {f.tpot().mean_s * 1e3:.2f} ms a token; the decode "
         f"step's share of the memory roof from {_roof(u, old_peaks):.1%} to {_roof(f, peaks):.1%})")
    # the flags said in the prose, as the records have them
    for b in (64, 711):
        assert H.record_flags(folded[b]) == ["noisy", "throttled (power)", "one process"]
        assert "throttled (power)" in H.record_flags(unfolded[b])
    says(f"flagged noisy (±{folded[64].summary().rel_halfwidth:.2%} at batch 64, "
         f"±{folded[711].summary().rel_halfwidth:.2%} at 711) and throttled (power)")
    u, f = unfolded[1], folded[1]
    assert abs(f.output_tokens_per_s() / u.output_tokens_per_s() - 1) <= 0.001
    assert H.record_flags(f) == ["one process"]  # met its interval target: no noisy flag
    assert f.summary().rel_halfwidth <= 0.01
    says(f"nothing ({u.output_tokens_per_s():.1f} and {f.output_tokens_per_s():.1f} output "
         f"tok/s), and there its window met the 1% target: **{_roof(f, peaks):.1%}** of the roof "
         f"at ±{f.summary().rel_halfwidth:.2%}")
    assert u.env["gpus"][0]["uuid"] != f.env["gpus"][0]["uuid"]  # two cards, as the page says


def test_the_3b_model(third):
    recs, peaks = third
    c1, e1 = one(recs, "llama-3.2-3b", 1, "compile"), one(recs, "llama-3.2-3b", 1, "eager")
    c64, e64 = one(recs, "llama-3.2-3b", 64, "compile"), one(recs, "llama-3.2-3b", 64, "eager")
    assert c1.config.fuse and not c1.config.fold_gqa
    assert H.record_flags(c1) == ["noisy", "one process"]
    says(f"decodes at batch 1 in {c1.tpot().mean_s * 1e3:.2f} ms a token compiled and fused, "
         f"{_roof(c1, peaks):.1%} of the roof (noisy, ±{c1.summary().rel_halfwidth:.2%})")
    for e in (e1, e64):
        assert H.record_flags(e)[0] == "noisy (time cap)"
    says(f"`generate()` is {c1.output_tokens_per_s() / e1.output_tokens_per_s():.2f}x slower there "
         f"and {c64.output_tokens_per_s() / e64.output_tokens_per_s():.2f}x at batch 64, from "
         f"windows that are themselves unsteady (noisy (time cap), "
         f"±{e1.summary().rel_halfwidth:.1%} and ±{e64.summary().rel_halfwidth:.1%})")


def test_the_largest_1b_batch(third):
    recs, _ = third
    [oom] = [r for r in recs if not r.ok]
    assert oom.error_type == "oom" and "5.41 GiB" in oom.error
    first = auto_batch(FOLDER / "h100-third-1.log", "llama-3.2-1b")
    second = auto_batch(FOLDER / "h100-third-2.log", "llama-3.2-1b")
    assert oom.config.batch_size == first
    says(f"`-b auto` first chose {first:,} for llama-3.2-1b")
    # today's estimate chooses what the second call printed, on that call's card
    [big] = [r for r in recs if r.ok and r.config.model == "llama-3.2-1b"
             and r.config.path == "compile"]
    spec = get_lm("llama-3.2-1b")
    memory = big.env["gpus"][0]["memory_total_bytes"]
    assert gen.largest_batch(meta_shape(spec), "bf16", 128, 128, memory,
                             spec.config.intermediate_size) == second == big.config.batch_size
    assert H.record_flags(big) == ["throttled (power)", "one process"]
    says(f"chose {second:,} in the second call")
    says(f"{big.output_tokens_per_s():,.0f} output tok/s (throttled (power)), a decode step of "
         f"{big.tpot().mean_s * 1e3:.1f} ms, {big.ttft().mean_s:.1f} s to the first token")


def test_the_fused_and_folded_fidelity_file():
    f = json.loads((FOLDER / "fidelity-graph-fuse-fold.json").read_text())
    cfg = f["config"]
    assert (cfg["model"], cfg["path"], cfg["fuse"], cfg["fold_gqa"], cfg["batch_size"]) == (
        "llama-3.2-1b", "graph", True, True, 1)
    ratios = [r["ratio"] for r in f["rounds"]]
    assert f["pass"] and 0.99 <= f["median_ratio"] <= 1.01
    says(f"median ratio **{f['median_ratio']:.4f}** over {len(ratios)} rounds "
         f"({min(ratios):.4f} to {max(ratios):.4f})")


def test_readme_and_guide_quote_the_fold(third, fused):
    recs, _ = third
    old, _ = fused
    f711 = one([r for r in recs if r.config.fold_gqa], "llama-3.1-8b", 711, "compile")
    u711 = one(old, "llama-3.1-8b", 711, "compile")
    e711 = one(recs, "llama-3.1-8b", 711, "eager")
    f64 = one([r for r in recs if r.config.fold_gqa], "llama-3.1-8b", 64, "compile")
    u64 = one(old, "llama-3.1-8b", 64, "compile")
    factor = f711.output_tokens_per_s() / u711.output_tokens_per_s()
    assert H.record_flags(f711)[0] == "noisy"
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"at llama-3.1-8b's largest batch made the compiled step {factor:.2f}x faster "
            f"(flagged noisy, ±{f711.summary().rel_halfwidth:.2%})") in readme
    guide = " ".join((ROOT / "docs" / "generation.md").read_text().split())
    assert (f"at batch {f711.config.batch_size} went from {u711.tpot().mean_s * 1e3:.1f} to "
            f"{f711.tpot().mean_s * 1e3:.1f} ms a token with it ({factor:.2f}x; the folded window "
            f"noisy, ±{f711.summary().rel_halfwidth:.2%}, and both throttled (power)), past "
            f"`generate()`'s {e711.tpot().mean_s * 1e3:.1f} ms, and at batch 64 from "
            f"{u64.tpot().mean_s * 1e3:.1f} to {f64.tpot().mean_s * 1e3:.2f} ms "
            f"({f64.output_tokens_per_s() / u64.output_tokens_per_s():.2f}x; folded noisy, "
            f"±{f64.summary().rel_halfwidth:.2%}, both throttled (power))") in guide
    assert all("throttled (power)" in H.record_flags(r) for r in (f711, u711, f64, u64))
    assert H.record_flags(f64)[0] == "noisy"


def test_fp16_and_generate_at_the_largest_1b_batch(third):
    recs, peaks = third
    graph = {r.config.precision: r for r in recs if r.ok and r.config.path == "graph"}
    assert sorted(graph) == ["bf16", "fp16"]
    assert graph["bf16"].env["gpus"][0]["uuid"] == graph["fp16"].env["gpus"][0]["uuid"]
    assert all(H.record_flags(r) == ["one process"] for r in graph.values())
    says(f"took {graph['bf16'].tpot().mean_s * 1e3:.2f} ms a token in bf16 and "
         f"{graph['fp16'].tpot().mean_s * 1e3:.2f} in fp16 on the same card")
    [c16] = [r for r in recs if r.config.precision == "fp16" and r.config.path == "compile"]
    assert c16.config.fuse and c16.config.fold_gqa and H.record_flags(c16) == ["one process"]
    bf = one([r for r in recs if r.config.fold_gqa and r.config.precision == "bf16"],
             "llama-3.1-8b", 1, "compile")
    says(f"the compiled fp16 step {c16.tpot().mean_s * 1e3:.2f} ms "
         f"({c16.output_tokens_per_s():.1f} output tok/s, {_roof(c16, peaks):.1%} of its card's "
         f"roof at ±{c16.summary().rel_halfwidth:.2%}, a window that met its target; compiled "
         f"bf16 on other cards: {bf.tpot().mean_s * 1e3:.2f} ms)")
    assert bf.env["gpus"][0]["uuid"] != c16.env["gpus"][0]["uuid"]
    e = one(recs, "llama-3.2-1b", 2568, "eager")
    c = one(recs, "llama-3.2-1b", 2568, "compile")
    assert c.config.fold_gqa and payback(e, c).never
    assert H.record_flags(e) == H.record_flags(c) == ["throttled (power)", "one process"]
    assert e.env["gpus"][0]["uuid"] != c.env["gpus"][0]["uuid"]
    says(f"At batch 2,568 `generate()` gave {e.output_tokens_per_s():,.0f} output tok/s (a decode "
         f"step of {e.tpot().mean_s * 1e3:.1f} ms; throttled (power)) against "
         f"{c.output_tokens_per_s():,.0f} for the compiled, fused and folded step "
         f"({c.tpot().mean_s * 1e3:.1f} ms)")
    says(f"({c.config.prompt_len + c.config.output_len + 3} positions here, against "
         f"{gen.mean_context(c.config.prompt_len, c.config.output_len):.0f} on average")


def test_the_compiled_steps_fidelity_since_one_compile_per_process():
    shared = json.loads((ROOT / "results" / H.H100_4_GENERATE
                         / "fidelity-compile-shared.json").read_text())
    assert shared["compile"] == "shared, once per process" and len(shared["rounds"]) == 3
    assert_says(PAGE, f"on another H100 it gave a median of {shared['median_ratio']:.4f} over "
                "three rounds")
