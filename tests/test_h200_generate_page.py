"""The H200 generation page's prose against its records: every figure the prose quotes is
recomputed here from the committed store (its tables are checked by tests/test_readme_claims.py,
which renders them from the same store)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes.pages import H, assert_says, stored_runs

from dlbench.report.generate_figures import bandwidth_roof, datasheet_roof

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.H200_GENERATE_PAGE).read_text()


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    return stored_runs(H.H200_GENERATE, H.H200_GENERATE_RUNS, "generate",
                       tmp_path_factory.mktemp("gen"))


def one(recs, model, batch, label):
    [r] = [r for r in recs if (r.config.model, r.config.batch_size, r.config.path_label)
           == (model, batch, label)]
    return r


def says(text: str) -> None:
    assert_says(PAGE, text)


def _ms(r) -> str:
    return f"{r.tpot().mean_s * 1e3:.2f} ms"


def test_fused_projections(records):
    recs, _ = records
    plain, fused = (one(recs, "llama-3.1-8b", 1, p) for p in ("compile", "compile+fuse"))
    assert fused.tpot().mean_s < plain.tpot().mean_s
    says(f"took {_ms(plain)} a token; with `--fuse` it takes {_ms(fused)} "
         f"({plain.output_tokens_per_s():.1f} to {fused.output_tokens_per_s():.1f} output "
         "tokens/s)")
    small = [one(recs, "llama-3.2-1b", 1, p) for p in ("compile", "compile+fuse")]
    says(f"gains less ({_ms(small[0])[:-3]} to {_ms(small[1])})")


def test_against_the_memory_roofline(records):
    recs, peaks = records
    fused, plain = one(recs, "llama-3.1-8b", 1, "compile+fuse"), one(recs, "llama-3.1-8b", 1,
                                                                      "compile")
    roof, ds = bandwidth_roof(fused, peaks), datasheet_roof(fused)
    assert roof.source == "measured"
    says(f"reads {fused.decode_gbs():,.0f} GB/s, **{fused.roofline_fraction(roof.gbs):.1%}** of "
         f"the {roof.gbs:,.0f} GB/s its card copies ({fused.roofline_fraction(ds.gbs):.1%} of the "
         f"datasheet's {ds.gbs:,.0f} GB/s); without fusion, "
         f"{plain.roofline_fraction(bandwidth_roof(plain, peaks).gbs):.1%}")


def test_larger_batches(records):
    recs, _ = records
    rates = [one(recs, "llama-3.1-8b", b, "compile+fuse").output_tokens_per_s()
             for b in (1, 8, 32, 64)]
    assert rates == sorted(rates)
    says(f"from {rates[0]:.1f} at batch 1 to {rates[1]:,.0f} at batch 8, {rates[2]:,.0f} at 32 "
         f"and {rates[3]:,.0f} at 64")


def test_the_largest_batch(records):
    recs, _ = records
    biggest = max(r.config.batch_size for r in recs if r.config.model == "llama-3.2-1b")
    fused, eager = (one(recs, "llama-3.2-1b", biggest, p) for p in ("compile+fuse", "eager"))
    assert fused.output_tokens_per_s() < eager.output_tokens_per_s()
    says(f"at batch {biggest:,} (what `-b auto` chose), `compile+fuse` makes "
         f"{fused.output_tokens_per_s():,.0f} output tokens/s against eager's "
         f"{eager.output_tokens_per_s():,.0f}: its decode step takes "
         f"{fused.tpot().mean_s * 1e3:.0f} ms against eager's {eager.tpot().mean_s * 1e3:.1f} ms")


def eager_widths(recs) -> list[float]:
    """The eager windows' intervals, narrowest first; every one was cut by its time cap."""
    eager = [r for r in recs if r.config.path == "eager"]
    assert eager and all(r.stop_reason == "time_cap" for r in eager)
    return sorted(r.summary().rel_halfwidth for r in eager)


def test_the_eager_caveat(records):
    widths = eager_widths(records[0])
    says(f"an interval of ±{widths[0]:.1%} to ±{widths[-1]:.1%}")


def test_the_generation_guide_quotes_the_same_records(records):
    recs, _ = records
    plain, fused = (one(recs, "llama-3.1-8b", 1, p) for p in ("compile", "compile+fuse"))
    quote = (f"llama-3.1-8b's compiled decode step from {plain.tpot().mean_s * 1e3:.2f} to "
             f"{fused.tpot().mean_s * 1e3:.2f} ms a token")
    assert quote in " ".join((ROOT / "docs/generation.md").read_text().split())


# -- the third session: --tuned --fuse side by side ------------------------------------------------
@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    return stored_runs(H.H200_GENERATE, H.H200_GENERATE_TUNED_RUNS, "generate",
                       tmp_path_factory.mktemp("tuned"))


def test_the_fused_step_on_another_card(tuned, records):
    recs, peaks = tuned
    r = one(recs, "llama-3.1-8b", 1, "compile+fuse")
    first_recs, first_peaks = records
    first = one(first_recs, "llama-3.1-8b", 1, "compile+fuse")
    assert r.env["gpus"][0]["uuid"] != first.env["gpus"][0]["uuid"]     # "on another card"
    roof = bandwidth_roof(r, peaks)
    assert roof.source == "measured"
    frac = r.roofline_fraction(roof.gbs)
    first_frac = first.roofline_fraction(bandwidth_roof(first, first_peaks).gbs)
    assert abs(frac - first_frac) < 0.005                                # "within half a point"
    says(f"took {_ms(r)} a token, {frac:.1%} of the {roof.gbs:,.0f} GB/s that card copies")
    says(f"first session's {first_frac:.1%}")


def test_generate_with_cores_of_its_own(tuned):
    recs, _ = tuned
    widths = eager_widths(recs)
    says(f"intervals run from ±{widths[0]:.1%} to ±{widths[-1]:.1%}")

    def factor(model):
        e, f = one(recs, model, 1, "eager"), one(recs, model, 1, "compile+fuse")
        return f.output_tokens_per_s() / e.output_tokens_per_s()
    says(f"{factor('llama-3.1-8b'):.2f}x faster for llama-3.1-8b at batch 1 and "
         f"{factor('llama-3.2-1b'):.2f}x for llama-3.2-1b")
