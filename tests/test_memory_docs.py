"""docs/memory.md against its sources. The search's rules (the 95% fill of the guess, the
tolerance, the three steps of a probe, a right guess's probes, the fake limit the CPU tests
find, a strategy search's label) are checked against the code; the published study it opens with
against the reference data; every measured figure (the errors that bounded a search, fp32
against bf16, cuDNN's autotuning, the slow largest batches) is recomputed from the committed
stores of the H100 and four-H200 campaigns with the flags and the interval its records carry.
The generated example table is checked by tests/test_readme_claims.py."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from fakes.pages import H, assert_says, rate, store_fixture
from fakes.pages import flags_but_one_process as flags
from fakes.pages import halfwidth as hw

from dlbench.cli import build_parser
from dlbench.models import get_model
from dlbench.models.zoo.tiny import OOM_BATCH_LIMIT
from dlbench.records.maxbatch import MaxBatchConfig
from dlbench.records.scaling import ScalingConfig
from dlbench.records.throughput import ThroughputConfig
from dlbench.reference import spec_by_id
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.report.tables import _setup_key
from dlbench.workloads import maxbatch as mb

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "memory.md").read_text()

# The records the page quotes, by id.
INCEPTION_V4_BF16, NASNET_FP32 = "77ba5567b9e2", "921793283c15"   # H100 searches: their errors
AUTOTUNE_FP32, HEURISTICS_FP32 = "efcc1768c202", "9b07bfdb2796"    # H100 runs: ResNet-50 b256
VGG16_FP32_SEARCH, VGG16_FP32_THERE = "cb73c08a34b4", "abca1da88146"  # H100: the cliff
VGG16_FP32_B128 = "13e719d90af5"                                   # H100: classic-cnn, eager
RESNET152_AUTOTUNED, RESNET152_HEURISTICS = "364cf16c4d96", "cba0764f8fb2"  # four-H200 searches
RESNET50_H200_BOUNDARY, RESNET50_H200_1024 = "c3df19fbb34d", "fe07f5b0aeb4"  # four-H200


def says(text: str) -> None:
    assert_says(PAGE, text)


h100 = store_fixture(H.H100)
h200 = store_fixture(H.H200_4)


def test_the_study_it_opens_with():
    # the published PyTorch rows of the CIFAR-10 frameworks study reach batch 2048 on one card
    results = json.loads((ROOT / "src/dlbench/reference/results.json").read_text())
    (source,) = [k for k, s in results["sources"].items() if "CIFAR-10" in s["title"]]
    rows = [r for r in results["results"] if r["source"] == source]
    assert max(r["batch_size"] for r in rows if r["gpus"] == 1) == 2048
    assert {r["framework"] for r in rows if r["batch_size"] == 2048} <= {
        "PyTorch", "PyTorch (nn.DataParallel)"}
    assert_says((ROOT / "docs" / "articles.md").read_text(),
                "PyTorch fit batch 2048 where TensorFlow ran out of memory")
    says("The CIFAR-10 frameworks study ([articles](articles.md)) found one framework training "
         "batch 2048 where another ran out of memory on the same card")


# -- the search ---------------------------------------------------------------------------------
def test_the_search_and_its_probes():
    assert mb.PREDICT_FILL == 0.95
    says(f"a straight line predicts the batch that fills {mb.PREDICT_FILL:.0%} of the device")
    tolerance = build_parser().parse_args(["maxbatch", "-m", "resnet50"]).tolerance
    exact = mb.find_max_batch(lambda b: b <= 1000, start=16, tolerance=0.0)
    assert (exact.best, exact.first_fail) == (1000, 1001)
    says(f"is under `--tolerance` of the batch that fits ({tolerance:.0%} by default; 0 = exact)")
    # a right guess: the guess itself and, one bracket width above it, the probe that fails;
    # a guess at --max ends the search at once
    for limit, after in ((None, 2), (1000, 1)):
        found = mb.find_max_batch(lambda b: b <= 1000, start=512, limit=limit, tolerance=0.05,
                                  guess=lambda: 1000)
        batches = [b for b, _ in found.probed]
        assert found.best == 1000 and len(batches[batches.index(1000):]) == after
    says("A right guess ends the search in one or two probes")
    # three steps: the first (stored apart) and two measured, with no warm-up
    stop = mb.PROBE_STOP
    assert stop.min_steps == stop.max_steps == 2
    base = ThroughputConfig(model="resnet50", batch_size=1, device="cpu")
    probe = mb.probe_config(base, 64)
    assert (probe.warmup_steps, probe.warmup_seconds, probe.stop) == (0, 0.0, stop)
    says("**Each probe is three training steps in a fresh process**")
    job = mb.probe_run(MaxBatchConfig(base=base, parallel=ScalingConfig(
        base=base, gpus=2, strategy="fsdp")), 64)
    assert job.base == probe
    says("as `dlbench scale` runs it (three steps, no warm-up)")


def test_errors_above_a_batch_that_trained(h100, h200):
    searches = {m.id: m for m in h100.results(kind="maxbatch")}

    def error_above(m, code: str) -> None:
        (failed,) = [p for p in m.probes if p.batch == m.first_oom_batch]
        assert code in failed.error and failed.outcome not in ("ok", "oom")
        assert any(p.fits and p.batch < failed.batch for p in m.probes)
    error_above(searches[INCEPTION_V4_BF16], "CUDNN_STATUS_INTERNAL_ERROR")
    error_above(searches[NASNET_FP32], "CUBLAS_STATUS_ALLOC_FAILED")
    says("cuDNN has raised `CUDNN_STATUS_INTERNAL_ERROR` and cuBLAS `CUBLAS_STATUS_ALLOC_FAILED` "
         "near the boundary where a smaller batch trained")


# -- the largest batch per strategy ---------------------------------------------------------------
def test_a_strategy_search_and_the_cpu_tests():
    base = ThroughputConfig(model="llama-3.2-1b", batch_size=1, precision="bf16",
                            optimizer="adamw", input_size=2048, device="cuda")
    cfg = MaxBatchConfig(base=base, parallel=ScalingConfig(base=base, gpus=8, strategy="fsdp"))
    says(f"its label reads `{cfg.label}` (the first example's fsdp search)")
    says("dlbench maxbatch -m llama-3.2-1b --seq-len 2048 --precision bf16 --optimizer adamw "
         "--strategy ddp,fsdp --gpus 8")
    # the fake limit the distributed tests find: test_oom under fsdp on two gloo ranks
    assert OOM_BATCH_LIMIT == 32
    tests = (ROOT / "tests" / "test_maxbatch_strategy.py").read_text()
    assert '"test_oom", "--strategy", "fsdp", "--gpus", "2"' in tests
    says(f"raises torch's out-of-memory error above {OOM_BATCH_LIMIT} samples a forward, in every "
         "rank that builds it) under fsdp on two ranks")


# -- what moves the boundary --------------------------------------------------------------------
def test_precision_and_the_optimizer(h100):
    rows = {label.split()[0]: (h100.get(bf[0]), h100.get(fp[0]))
            for label, bf, fp in H._MAXBATCH_ROWS}
    share = {m: fp.best_batch / bf.best_batch for m, (bf, fp) in rows.items()}
    gpt2 = share.pop("gpt2")
    assert {bf.env["gpus"][0]["name"] for bf, _ in rows.values()} == {"NVIDIA H100 80GB HBM3"}
    says(f"fp32 fits about half the batch of bf16 for CNNs and ViT ({min(share.values()):.2f}-"
         f"{max(share.values()):.2f} of it on an H100); less of a difference for GPT-2 "
         f"({gpt2:.2f} of it there")
    says(f"the loss over the {get_model('gpt2').num_classes:,}-word logits in fp32")
    # optimizer state per parameter after one step: AdamW's two moments, SGD's momentum
    counts = {}
    for name, opt in (("adamw", torch.optim.AdamW), ("sgd", torch.optim.SGD)):
        p = torch.nn.Parameter(torch.ones(4))
        o = opt([p], lr=0.1, **({"momentum": 0.9} if name == "sgd" else {}))
        p.grad = torch.ones(4)
        o.step()
        counts[name] = sum(1 for v in o.state[p].values()
                           if torch.is_tensor(v) and v.shape == p.shape)
    assert counts == {"adamw": 2, "sgd": 1}
    says("| `--optimizer adamw` | two state tensors per parameter against SGD's one |")
    assert build_parser().parse_args(
        ["maxbatch", "-m", "gpt2", "--checkpointing"]).checkpointing == "full"
    says("`full` (the default) recomputes everything a block computed in the backward pass")


def test_cudnn_autotuning(h100, h200):
    # true fp32 autotuning against the heuristics: one model's probes on one kind of card
    slow, quick = h200.get(RESNET152_AUTOTUNED), h200.get(RESNET152_HEURISTICS)
    for m, autotune in ((slow, True), (quick, False)):
        b = m.config.base
        assert (b.model, b.precision, b.autotune) == ("resnet152", "fp32", autotune)
        assert m.env["gpus"][0]["name"] == "NVIDIA H200"
    (at512,) = [p for p in slow.probes if p.batch == 512]
    assert at512.fits and at512.wall_s > 120
    says("In true fp32 that timing takes minutes at large batches")
    walls = [p.wall_s for p in quick.probes]
    says(f"(a ResNet-152 probe at batch 512: {at512.wall_s:.0f} s on an H200); with the "
         f"heuristics its probes took {min(walls):.0f}-{max(walls):.0f} s there")
    a32, h32 = (h100.results(run_id=run, kind="throughput")[0]
                for run in (AUTOTUNE_FP32, HEURISTICS_FP32))
    for r, autotune in ((a32, True), (h32, False)):
        c = r.config
        assert (c.model, c.precision, c.batch_size, c.autotune) == ("resnet50", "fp32", 256,
                                                                    autotune)
    assert flags(a32) == ["time cap"] and flags(h32) == ["time cap", "19 of 20 steps"]
    says(f"on an H100 autotuning made fp32 ResNet-50 {rate(a32) / rate(h32) - 1:.1%} faster at "
         f"batch 256 ({fmt_num(rate(a32))} img/s {hw(a32)} against {fmt_num(rate(h32))} "
         f"{hw(h32)}, both windows stopped by the time cap, the second after 19 of its 20 steps; "
         "one process each) and bought nothing in bf16")


# -- the example ----------------------------------------------------------------------------------
def test_the_example_setup(h100):
    excerpt = [row for row in H._MAXBATCH_ROWS
               if row[0] in ("resnet50", "vit_b_16", "gpt2 (seq 1024)")]
    searches = [h100.get(ids[0]) for _, *sides in excerpt for ids in sides]
    for m in searches:
        b = m.config.base
        assert (b.optimizer, b.mode, b.compile, m.config.tolerance) == ("sgd", "train", None, 0.1)
        assert b.channels_last == (get_model(b.model).kind == "image")
        assert m.env["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    no_autotune = [m.config.base.model for m in searches if not m.config.base.autotune]
    assert no_autotune == ["resnet50"]
    says("Example (one H100 80GB; SGD, train, eager, channels_last for the image models, "
         "`--tolerance 0.1`; † `--no-autotune`: cuDNN's heuristics, not its autotuning):")


# -- the pitfalls ---------------------------------------------------------------------------------
def test_the_largest_batch_is_not_the_fastest(h200):
    at, below = h200.get(RESNET50_H200_BOUNDARY), h200.get(RESNET50_H200_1024)
    assert (at.config.batch_size, below.config.batch_size) == (3072, 1024)
    assert _setup_key(at) == _setup_key(below) and at.config.precision == "bf16"
    assert at.env["gpus"][0]["uuid"] != below.env["gpus"][0]["uuid"]
    assert flags(at) == ["noisy (time cap)", "4 of 20 steps", "throttled (power)"]
    assert flags(below) == ["throttled (power)"]
    mem = at.memory
    says(f"on an H200, bf16 ResNet-50 ran {1 - rate(at) / rate(below):.0%} slower at batch 3,072 "
         f"than at 1,024 ({fmt_num(rate(at))} img/s {hw(at)}, noisy (time cap), 4 of 20 steps, "
         f"against {fmt_num(rate(below))} {hw(below)} on another H200; both throttled (power), "
         f"one process each), with {mem['reserved_peak_bytes'] / 2**30:.1f} of the card's "
         f"{mem['device_total_bytes'] / 2**30:.1f} GiB reserved by the allocator")


def test_vgg16_falls_off_a_cliff(h100):
    search, there, b128 = (h100.get(i) for i in (VGG16_FP32_SEARCH, VGG16_FP32_THERE,
                                                 VGG16_FP32_B128))
    assert search.best_batch == there.config.batch_size == 1022
    assert not search.config.base.autotune and not there.config.autotune
    assert (b128.config.model, b128.config.precision, b128.config.batch_size,
            b128.config.autotune) == ("vgg16", "fp32", 128, True)
    assert flags(there) == ["time cap", "2 of 20 steps"] and flags(b128) == []
    wall = {p.batch: p.wall_s for p in search.probes if p.fits}
    says(f"on an H100, {fmt_num(rate(there))} img/s {hw(there)} at its largest batch, 1,022 "
         f"(`--no-autotune`; time cap, 2 of 20 steps), against {fmt_num(rate(b128))} {hw(b128)} "
         f"at batch 128 (autotuned), one process each; its probes took {wall[1022]:.0f} s at "
         f"1,022 and {wall[1076]:.0f} s at 1,076.")
    step = max(there.step_times_s)
    assert 10 <= step < 100
    says(f"**Steps of tens of seconds** near the boundary (VGG-16's at 1,022: {step:.1f} s)")


def test_the_search_is_per_kind_of_device():
    h100_gb, h200_gb = spec_by_id("h100-sxm").memory_gb, spec_by_id("h200").memory_gb
    says(f"A search on an {h100_gb:.0f} GB card says nothing about a {h200_gb:.0f} GB one.")
