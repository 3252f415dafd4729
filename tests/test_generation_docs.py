"""docs/generation.md against its sources. Every figure the page gives is checked twice: the page
says it (in the words and rounding it uses), and the code or record it comes from gives it.

Defaults and rules (the request and window defaults, ``-b auto``'s headroom and cap, the bytes
and FLOPs conventions, fp8's requirements) come from the parser, the API and the constants of
dlbench.measure.generation and dlbench.workloads; model sizes from the shipped configs, counted
on the meta device; the spec table's fp8 peaks from src/dlbench/reference. Measured figures
(the fused and folded decode steps on an H100 and an H200) are recomputed from the committed
generation stores, with every flag of their records; the fidelity ratios from the committed
JSON files."""

from __future__ import annotations

import inspect
import json
import statistics
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, store_fixture

from dlbench import api
from dlbench.cli import build_parser
from dlbench.commands import generate as generate_command
from dlbench.measure import generation as gen
from dlbench.records.generate import FP8_LABELS, FP8_RECIPES, GENERATE_STOP, GenerateConfig
from dlbench.reference import gpu_specs, spec_by_id
from dlbench.report.generate_figures import bandwidth_roof
from dlbench.workloads import fp8

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "generation.md").read_text()
CPU_RESULTS = ROOT / "results" / H.CPU


def says(text: str) -> None:
    assert_says(PAGE, text)


def default(flag: str):
    """A flag's default as ``dlbench generate`` parses it."""
    return getattr(build_parser().parse_args(["generate"]), flag)


# -- the committed stores, each opened once -------------------------------------------------------
h100 = store_fixture(H.H100_GENERATE)
h200 = store_fixture(H.H200_GENERATE)


def records(store, runs):
    """The generate records of ``runs`` (run order, then stored order) and the store's roofs."""
    return ([r for run in runs for r in store.results(run_id=run, kind="generate")],
            store.results(kind="peak"))


def one(recs, model: str, batch: int, label: str):
    [r] = [r for r in recs if r.ok and (r.config.model, r.config.batch_size,
                                         r.config.path_label) == (model, batch, label)]
    return r


def ms(r, digits: int) -> str:
    return f"{r.tpot().mean_s * 1e3:.{digits}f}"


def roof(r, peaks) -> float:
    b = bandwidth_roof(r, peaks)
    assert b.source == "measured"
    return r.roofline_fraction(b.gbs)


@pytest.fixture(scope="module")
def shapes():
    """The shapes of the shipped architectures the page sizes, built on the meta device."""
    from dlbench.models.lm import get_lm, meta_shape
    return {name: meta_shape(get_lm(name)) for name in ("gpt2", "gpt2-xl", "llama-3.1-8b")}


# -- the commands and the defaults ----------------------------------------------------------------
def test_the_first_example_runs_the_defaults():
    # `dlbench generate -m llama-3.2-1b`: the command's own defaults, and the API's
    source = inspect.getsource(generate_command.cmd_generate)
    for default_list in ("flatten(args.batch_size, [1])", "flatten(args.prompt_len, [128])",
                         "flatten(args.output_len, [128])", 'else ["eager"])'):
        assert default_list in source
    params = inspect.signature(api.measure_generation).parameters
    assert (params["batch_size"].default, params["prompt_len"].default,
            params["output_len"].default, params["path"].default) == (1, 128, 128, "eager")
    says("dlbench generate -m llama-3.2-1b # batch 1, 128+128 tokens, generate()")


def test_the_shipped_models(shapes):
    from dlbench.models.lm import lm_names
    names = lm_names()
    assert names == ["gpt2", "gpt2-xl", "llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b",
                     "qwen2.5-7b", "mistral-7b"]
    small, xl = shapes["gpt2"].params, shapes["gpt2-xl"].params
    says(f"`gpt2` ({small / 1e6:.0f}M parameters), `gpt2-xl` ({xl / 1e9:.2f}B), "
         + ", ".join(f"`{n}`" for n in names[2:]) + ".")
    eight = shapes["llama-3.1-8b"]
    weights = gen.model_weight_bytes(eight, "bf16")
    assert weights == eight.params * 2
    says(f"(an 8B model's {weights / 1e9:.0f} GB never pass through the host)")


# -- --fuse ---------------------------------------------------------------------------------------
def test_fused_projections_on_both_cards(h100, h200, shapes):
    eight = shapes["llama-3.1-8b"]
    assert eight.kv_heads / eight.heads == 1 / 4
    says("(under grouped-query attention k and v are a fraction of q: a quarter in llama-3.1-8b)")

    recs, _ = records(h200, H.H200_GENERATE_RUNS)
    plain, fused = one(recs, "llama-3.1-8b", 1, "compile"), one(recs, "llama-3.1-8b", 1,
                                                                 "compile+fuse")
    says(f"On an H200 it took llama-3.1-8b's compiled decode step from {ms(plain, 2)} to "
         f"{ms(fused, 2)} ms a token ([campaign](results/2026-11-h200-generate.md))")

    old_recs, old_peaks = records(h100, H.GENERATE_RUNS)
    new_recs, new_peaks = records(h100, H.GENERATE_FUSED_RUNS)
    old, new = one(old_recs, "llama-3.1-8b", 1, "compile"), one(new_recs, "llama-3.1-8b", 1,
                                                                 "compile+fuse")
    assert H.record_flags(old) == ["noisy", "one process"]
    assert H.record_flags(new) == ["noisy (time cap)", "one process"]
    says(f"on an H100, from {ms(old, 2)} ms ({roof(old, old_peaks):.1%} of the memory roof; noisy, "
         f"±{old.summary().rel_halfwidth:.2%}) to {ms(new, 2)} ms ({roof(new, new_peaks):.1%}; "
         f"noisy (time cap), ±{new.summary().rel_halfwidth:.2%}), measured on two cards of the "
         "same kind")
    assert old.env["gpus"][0]["uuid"] != new.env["gpus"][0]["uuid"]
    assert old.env["gpus"][0]["name"] == new.env["gpus"][0]["name"]
    # the H200 figures carry one flag, as the H100 ones carry it besides theirs
    assert H.record_flags(plain) == H.record_flags(fused) == ["one process"]
    says("Each figure is one process. A record says `compile+fuse`;")


# -- --fold-gqa -----------------------------------------------------------------------------------
def test_folded_attention_at_the_largest_batches(h100, shapes):
    eight = shapes["llama-3.1-8b"]
    assert (eight.heads, eight.kv_heads) == (32, 8)
    says(f"for llama-3.1-8b ({eight.heads} query heads over {eight.kv_heads} key/value heads) "
         "four copies of the whole cache per step")
    assert eight.heads // eight.kv_heads == 4

    unfolded, _ = records(h100, H.GENERATE_FUSED_RUNS)
    third, _ = records(h100, H.GENERATE_THIRD_RUNS)
    u711, u64 = (one(unfolded, "llama-3.1-8b", b, "compile+fuse") for b in (711, 64))
    f711, f64 = (one(third, "llama-3.1-8b", b, "compile+fuse+fold") for b in (711, 64))
    e711 = one(third, "llama-3.1-8b", 711, "eager")

    def factor(folded, plain) -> str:
        return f"{folded.output_tokens_per_s() / plain.output_tokens_per_s():.2f}x"
    says(f"at batch {f711.config.batch_size} went from {ms(u711, 1)} to {ms(f711, 1)} ms a token "
         f"with it ({factor(f711, u711)}; the folded window noisy, "
         f"±{f711.summary().rel_halfwidth:.2%}, and both throttled (power)), past `generate()`'s "
         f"{ms(e711, 1)} ms, and at batch 64 from {ms(u64, 1)} to {ms(f64, 2)} ms "
         f"({factor(f64, u64)}; folded noisy, ±{f64.summary().rel_halfwidth:.2%}, both throttled "
         "(power))")
    assert H.record_flags(f711) == H.record_flags(f64) == ["noisy", "throttled (power)",
                                                          "one process"]
    assert H.record_flags(u64) == ["throttled (power)", "one process"]
    # the flags said after the figures: generate()'s, the unfolded window's cap, one process
    assert H.record_flags(e711) == ["throttled (power)", "one process"]
    assert H.record_flags(u711) == ["time cap", "throttled (power)", "one process"]
    assert u711.stop_reason == "time_cap" and u711.converged()
    says("`generate()`'s window at batch 711 was throttled (power) too, the unfolded one there "
         "ended by its time cap (its interval within the target), and every figure here is one "
         "process. A record says `compile+fuse+fold`;")
    assert GenerateConfig(model="llama-3.1-8b", batch_size=1, path="compile", fuse=True,
                          fold_gqa=True).path_label == "compile+fuse+fold"


# -- how it is timed ------------------------------------------------------------------------------
def test_the_window_defaults():
    assert default("warmup") == 1
    says(f"`--warmup` requests apart ({default('warmup')} by default)")
    assert GENERATE_STOP.confidence == 0.95
    assert (default("target_ci"), default("min_requests"), default("min_time"),
            default("max_time")) == (GENERATE_STOP.target_rel_ci, GENERATE_STOP.min_steps,
                                     GENERATE_STOP.min_seconds, GENERATE_STOP.max_seconds)
    says(f"then requests until the {GENERATE_STOP.confidence:.0%} interval of the request time is "
         f"under `--target-ci` ({default('target_ci'):.0%}), with at least `--min-requests` "
         f"({default('min_requests')}) and `--min-time` ({default('min_time'):.0f} s), and at most "
         f"`--max-time` ({default('max_time'):.0f} s, once `--min-requests` are measured;")


def test_the_bytes_and_flops_conventions(shapes):
    # the KV cache a step attends to: the prompt and, on average, half the output
    for prompt, output in ((128, 128), (2048, 256), (16, 16)):
        assert gen.mean_context(prompt, output) == prompt + output / 2
    says("on average `prompt + (output_len)/2`), plus the position it writes")
    # 2 FLOPs per multiply-add: a decode step at batch 1 with no context is 2 per weight passed
    s = shapes["gpt2"]
    head = s.vocab * s.hidden
    assert gen.decode_flops_per_step(s, 1, 0, 1) == 2 * (s.params - s.embedding_params) + 2 * head
    says("**FLOPs** are matmul FLOPs, 2 per multiply-add")


def test_the_largest_batch_rule(shapes):
    params = inspect.signature(gen.largest_batch).parameters
    headroom, cap, copies = (params[k].default for k in ("headroom", "cap", "kv_copies"))
    assert (headroom, cap, copies) == (0.9, 4096, 2)
    says(f"KV cache (counted twice: the dynamic cache grows by concatenation) and prefill "
         f"activations fit {headroom:.0%} of the GPU's memory, at most {cap:,}")
    s = shapes["gpt2"]
    assert gen.largest_batch(s, "bf16", 128, 128, 10**15) == cap           # the cap binds
    # fp8 sizes its weights at a byte each, the embedding and the head at two
    kept = s.embedding_params + s.lm_head_params
    assert gen.model_weight_bytes(s, "fp8") == (s.params - kept) * 1 + kept * 2
    says("`-b auto` sizes an fp8 batch with its weights at one byte (the embedding and head at "
         "two)")


# -- precision ------------------------------------------------------------------------------------
def test_what_fp8_needs():
    assert fp8.MIN_CAPABILITY == (8, 9)
    with_fp8 = {s.name for s in gpu_specs() if s.vendor == "NVIDIA" and s.fp8_tflops}
    assert with_fp8 == {"L4", "L40S", "GeForce RTX 4090", "H100 SXM", "H100 PCIe", "H200 SXM",
                        "B200 (HGX, 1000 W)"}
    says("(a GPU with fp8 tensor cores, compute capability 8.9 or newer: L4, L40S, RTX 4090, "
         "H100, H200, B200;")
    assert fp8.DIM_MULTIPLE == 16
    says("any linear layer whose dimensions do not divide by 16 (`_scaled_mm`'s requirement)")


def test_the_fp8_recipes():
    assert FP8_RECIPES[0] == "dynamic" and FP8_LABELS["weight-only"] == "fp8-wo"
    says("`--fp8-recipe weight-only` (default `dynamic`, the recipe above)")
    c = GenerateConfig(model="llama-3.1-8b", batch_size=1, precision="fp8",
                       fp8_recipe="weight-only", path="compile")
    says(f"Its rows read `fp8-wo` (`{c.label}`;")
    from dlbench.workloads import fp8_inference
    source = inspect.getsource(fp8_inference)
    assert "float8_weight_only as make" in source and "torchao < 0.9" in source
    says("(`float8_weight_only` before torchao 0.9)")


def test_an_fp8_weight_counts_a_byte_and_its_row_scale():
    """torchao's per-row fp8 weight, as generation.md quotes the recipe: one byte per parameter
    and a 4-byte (fp32) scale per row, as dlbench.models.lm.tensor_bytes counts it."""
    torch = pytest.importorskip("torch")
    quantization = pytest.importorskip("torchao.quantization")
    from dlbench.models.lm import tensor_bytes
    layer = torch.nn.Sequential(torch.nn.Linear(64, 32, bias=False)).to(torch.bfloat16)
    quantization.quantize_(layer, quantization.Float8WeightOnlyConfig(
        weight_dtype=torch.float8_e4m3fn, granularity=quantization.PerRow()))
    rows, cols = 32, 64
    assert tensor_bytes(layer[0].weight) == rows * cols * 1 + rows * 4
    says("fp8 weights count one byte per parameter plus 4 bytes per row, the layers left in "
         "bf16 two; the KV cache counts at bf16")
    assert gen.CACHE_BYTES["fp8"] == gen.CACHE_BYTES["bf16"] == 2


def test_the_fp8_peaks_of_the_spec_table():
    sxm, h200 = spec_by_id("h100-sxm"), spec_by_id("h200")
    assert sxm.fp8_tflops == h200.fp8_tflops == 3958 / 2
    assert "3,958" in sxm.note and "halved" in sxm.note
    says(f"`fp8_tflops`: {sxm.fp8_tflops:,.0f} TFLOP/s for an H100 SXM or an H200, the "
         "datasheet's sparse 3,958 halved)")


# -- fidelity -------------------------------------------------------------------------------------
def fidelity(name: str) -> dict:
    return json.loads((CPU_RESULTS / f"{name}.json").read_text())


def bands() -> dict[str, tuple[float, float]]:
    """benchmarks/fidelity.py's bands, per device type."""
    from fakes.cli import script
    return {k: tuple(v) for k, v in script("fidelity").BANDS.items()}


def test_the_fidelity_band():
    assert bands()["cuda"] == (0.99, 1.01)
    says("requires the median ratio of output tokens/s within 0.99-1.01 on a GPU")


def test_the_cpu_fidelity_files():
    names = ("fidelity-generate-eager-logits-processor", "fidelity-generate-eager",
             "fidelity-generate-eager-again", "fidelity-generate-static",
             "fidelity-generate-static-again")
    files = {n: fidelity(n) for n in names}
    for f in files.values():
        c = f["config"]
        assert (f["mode"], c["model"], c["prompt_len"], c["output_len"], c["device"]) == (
            "generate", "test-llama", 16, 16, "cpu")
    # the bare eager loop's time per output token (prefill included), over every round
    eager = [n for n in names if "eager" in n]
    bare_ms = statistics.median(1e3 / r["bare"] for n in eager for r in files[n]["rounds"])
    says(f"(test-llama, 16+16 tokens, about {bare_ms:.2f} ms an output token in the bare loop)")

    def median(name: str) -> str:
        return f"{files[name]['median_ratio']:.4f}"
    says(f"came out at a median ratio of {median(names[0])}")
    says(f"two runs gave {median(names[1])} and {median(names[2])}")
    says(f"and the static loop {median(names[3])} and {median(names[4])}")
    # "at the edge of the CPU's band": of the four later runs, two in it and two just below
    band = tuple(files[names[1]]["band"])
    assert band == bands()["cpu"]
    assert [files[n]["pass"] for n in names[1:]] == [True, False, False, True]
    assert all(band[0] - 0.01 < files[n]["median_ratio"] < band[0] for n in names[2:4])


def test_the_gpu_fidelity_files_ran_no_eager_path():
    gpu_files = sorted((ROOT / "results").glob("pt2.11-*/**/fidelity*.json"))
    generate = [json.loads(p.read_text()) for p in gpu_files]
    generate = [d for d in generate if d.get("mode") == "generate"]
    assert generate and all(d["env"]["accelerator"] == "cuda" for d in generate)
    assert "eager" not in {d["config"]["path"] for d in generate}
    graph = json.loads((ROOT / "results" / H.H100_GENERATE / "fidelity-graph.json").read_text())
    assert graph["config"]["path"] == "graph"
    says("the eager check there has not been run yet (the H100 campaign ran `--path graph`)")
    shared = json.loads((ROOT / "results" / H.H100_4_GENERATE
                         / "fidelity-compile-shared.json").read_text())
    says(f'(the JSON says `"compile": "{shared["compile"]}"`)')
