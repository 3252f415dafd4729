"""docs/measurement.md and docs/ceilings.md against what they describe and what they quote.

Two kinds of figure live on these pages. Rules and method constants (a 95% interval, 20 steps, a
grid of 76 shapes, an exit code) are checked against the code constant or parser default they
state. Measured figures (a fidelity ratio, a ceiling, a step time, an MFU, a coverage from the
simulation of tests/test_coverage.py) are recomputed here from the committed store, JSON file or
seeded simulation they come from, with the flags their records carry. Datasheet and published
figures are checked against the reference data shipped in src/dlbench/reference, which names
their sources. One test per section of each page."""

from __future__ import annotations

import gzip
import inspect
import json
import random
import shutil
import statistics
from datetime import datetime
from pathlib import Path

import pytest
import test_coverage  # the simulation the coverage table comes from (tests/ is on the path)
import torch
from fakes.cli import script
from fakes.pages import H, assert_says

from dlbench.cli import build_parser
from dlbench.commands import common as exits
from dlbench.measure import stats, window
from dlbench.measure.flops import count_flops
from dlbench.measure.kernels import summarise
from dlbench.measure.mfu import measured_peaks, mfu
from dlbench.measure.regression import fit_through_origin, ms_per_batch_fit
from dlbench.measure.stopping import StopRule, StopRuleError
from dlbench.models import get_model
from dlbench.records.peak import ceilings
from dlbench.reference import (reference_points, select, sources, spec_by_id, spec_for_env,
                               today)
from dlbench.report.cards import own_card_peaks
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.store import Store
from dlbench.suites import REPEAT_STOP, DeviceFacts, suite_for
from dlbench.workloads import peak as peak_plan

ROOT = Path(__file__).resolve().parents[1]
MEASUREMENT = (ROOT / "docs/measurement.md").read_text()
CEILINGS = (ROOT / "docs/ceilings.md").read_text()
H100_DIR = ROOT / "results" / H.H100
CARD_SPREAD = json.loads((ROOT / "src/dlbench/reference/card_spread.json").read_text())

# The records the pages name, by id (runs of the H100 store unless said otherwise).
VGG_SLOW_STEPS = "abca1da88146"      # VGG-16 fp32 at batch 1,022: steps of tens of seconds
TUNED_RESNET50 = "1d65b62624ab"      # a tuned ResNet-50 window with a lag-1 correlation of 0.4
PROFILED = "8b248dcfe99f"            # ResNet-50 b1024 bf16 NCHW eager, --profile 10
VGG_FP32 = "13e719d90af5"            # true-fp32 VGG-16, eager: 103% of the measured ceiling
FIVE_SHAPES_RUN = "c52cfaa9d7a8"     # `dlbench peak` before the grid
GRID_RUN, GRID_BF16_RUN = "48fb2e0937d0", "452fecb385a9"   # peak-grid/, frameworks/
FORKED_RUN, SPAWNED_RUN = "a1e8c2029359", "6e445215fa9e"   # default-suite-repeat/
MFU_RUNS = {"H100": "4e75c79d22a2", "H200": "eea04ab2c011"}  # the default suite as it was


def measurement_says(text: str) -> None:
    assert_says(MEASUREMENT, text)


def ceilings_say(text: str) -> None:
    assert_says(CEILINGS, text)


def open_gz(path: Path, workdir: Path) -> Store:
    """A committed store whose file is not ``dlbench.db.gz`` (H.open_store's), unzipped."""
    target = workdir / (path.parent.name + "_" + path.name.removesuffix(".gz"))
    with gzip.open(path, "rb") as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return Store(target)


def wall_s(run) -> float:
    return (datetime.fromisoformat(run.finished_at)
            - datetime.fromisoformat(run.started_at)).total_seconds()


def rate(r) -> float:
    return r.summary().throughput * r.units_per_sample


def pct_span(values, fmt=fmt_pct) -> str:
    """``0.08-0.18%``: the range of relative widths as the pages write it."""
    return f"{fmt(min(values)).rstrip('%')}-{fmt(max(values))}"


def flags(r) -> str:
    """A record's flags as the pages quote them: ``time cap; 2 of 20 steps; one process``."""
    return "; ".join(H.record_flags(r))


def lag1(xs) -> float:
    """The sample lag-1 correlation of a window, around its own mean."""
    m = stats.mean(xs)
    d = [x - m for x in xs]
    return sum(a * b for a, b in zip(d, d[1:])) / sum(a * a for a in d)


def default(command: str, flag: str):
    """A flag's default as ``dlbench COMMAND`` parses it."""
    argv = [command, "-m", "resnet50"] if command == "throughput" else [command]
    return getattr(build_parser().parse_args(argv), flag)


def number(x) -> str:
    """``100,000``, ``15``, ``0.01``: a default as the flag tables write it."""
    return f"{int(x):,}" if x == int(x) else f"{x:g}"


def datasheet(x: float) -> str:
    """``989.5``, ``67.0``, ``1,979``: a datasheet peak as the pages write it."""
    return f"{x:,.0f}" if x >= 1000 else f"{x:.1f}"


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    s = H.open_store(ROOT / "results", H.H100, tmp_path_factory.mktemp("h100"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def by_id(h100):
    return {r.id: r for kind in ("throughput", "maxbatch") for r in h100.results(kind=kind)}


@pytest.fixture(scope="module")
def coverage():
    return test_coverage


# -- docs/measurement.md ------------------------------------------------------------------------
def test_the_phases_and_the_timer(h100, by_id):
    steps, seconds = default("throughput", "warmup"), default("throughput", "warmup_time")
    measurement_says(f"| warm-up | `--warmup` steps ({steps}) and at least `--warmup-time` "
                     f"seconds ({number(seconds)})")
    # the first step: minutes for a compiled large network, or for cuDNN's fp32 autotuning
    nasnet, vgg = by_id["eb66ecbda508"], by_id[VGG_FP32]
    assert (nasnet.config.model, nasnet.config.compile) == ("nasnet", "default")
    assert (vgg.config.precision, vgg.config.compile, vgg.config.batch_size) == ("fp32", None, 128)
    assert min(nasnet.first_step_s, vgg.first_step_s) > 120
    measurement_says("minutes for a compiled large network, or for cuDNN autotuning true-fp32 "
                     "convolutions at a large batch")
    # the host's lead over the GPU, and a window of slow steps it bounds
    assert window.IN_FLIGHT_S == 1.0
    measurement_says("The host queues at most about a second of steps ahead of the GPU")
    r = by_id[VGG_SLOW_STEPS]
    searches = [m for m in h100.results(kind="maxbatch")
                if (m.config.base.model, m.config.base.precision) == ("vgg16", "fp32")]
    largest = max(m.best_batch for m in searches)
    assert r.config.batch_size in {m.best_batch for m in searches}
    assert (r.config.model, r.config.precision) == ("vgg16", "fp32")
    assert r.config.batch_size > 0.9 * largest and max(r.step_times_s) > 20
    assert r.env["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    measurement_says(f"(VGG-16 in fp32 at batch {r.config.batch_size:,}, near its largest: "
                     f"{max(r.step_times_s):.0f} s a step on an H100, record {r.id}, flagged "
                     f"`{flags(r)}`)")


def test_how_the_interval_is_made(by_id, coverage):
    assert StopRule().confidence == 0.95
    measurement_says("**A 95% interval** on the mean step time")
    assert (stats.MIN_BATCHES, stats.MIN_BATCH_STEPS, stats.BATCH_TAUS) == (10, 20, 10)
    assert stats.MIN_BATCHES * stats.MIN_BATCH_STEPS == 200 and stats.MAX_BLOCKS == 20
    measurement_says(f"room for at least {stats.MIN_BATCHES} batches, each at least "
                     f"{stats.MIN_BATCH_STEPS} steps and {stats.BATCH_TAUS} integrated "
                     f"autocorrelation times (tau) long (so at least 200 steps): "
                     f"{stats.MIN_BATCHES} to {stats.MAX_BLOCKS} contiguous batches")
    assert "who advise 10 to 30 batches" in stats.__doc__.replace("\n", " ")
    measurement_says("Law & Kelton advise 10 to 30 batches")
    assert coverage.tau_of(0.9) == pytest.approx(19)
    measurement_says("at a lag-1 correlation of 0.9, tau 19, batches of 20 steps covered")
    assert stats.MIN_AR_STEPS == 20 and stats.MAX_AR_FRACTION == 0.5
    measurement_says("from 20 steps on tau is at least the AR(1) time (1 + phi) / (1 - phi)")
    measurement_says("a window shorter than two correlation times (a level shift, a slow "
                     "swing) counts as one effective step")
    assert stats.MAX_TAU_POINTS == 1000
    measurement_says("Above 1,000 steps tau is estimated on the means of at most 1,000 groups")

    # what tests/test_coverage.py simulates and requires
    assert coverage.PHIS[0] == 0 and coverage.PHIS[-1] == 0.9
    assert coverage.NOISE_S / coverage.MEAN_S == pytest.approx(0.01)
    assert (coverage.LENGTHS[0], coverage.LENGTHS[-1]) == (8, 1000) and coverage.MIN_TAUS == 3
    assert all(coverage.required(n, 0.6) for n in coverage.LENGTHS)
    assert "c >= 0.93" in inspect.getsource(coverage.test_interval_covers_the_true_mean)
    measurement_says("(AR(1), lag-1 correlation 0 to 0.9, 1% noise, windows of 8 to 1,000 "
                     "steps): it must cover the true mean in at least 93% of windows for every "
                     "lag-1 correlation up to 0.6, and up to 0.9 wherever the window holds at "
                     "least 3 tau steps")
    assert '["mean_ratio"] <= 1.10' in inspect.getsource(
        coverage.test_uncorrelated_windows_keep_their_width)
    measurement_says("the test holds the mean at lag-1 0 within 10% of the previous method's")

    # how often a short window's own lag-1 correlation reads under 0.4 (20,000 windows each)
    under = {}
    for phi in (0.75, 0.0):
        rng = random.Random(f"lag1-15-{phi}")
        under[phi] = sum(lag1(coverage.ar1_window(15, phi, rng)) < 0.4
                         for _ in range(20_000)) / 20_000
    assert abs(under[0.75] - 1 / 3) < 0.02
    measurement_says(f"a third of the windows show a sample lag-1 correlation under 0.4, as "
                     f"{under[0.0]:.0%} of uncorrelated 15-step windows do (20,000 simulated "
                     "windows each)")

    # the method before both, at the lag-1 correlation of a tuned ResNet-50 window
    assert 2 * stats.MAX_BLOCKS == 40
    old = coverage.coverage(15, 0.4, stats.mean_interval_batch_means, 4000)
    r = by_id[TUNED_RESNET50]
    assert (r.config.model, r.config.autotune, r.config.compile) == (
        "resnet50", True, "max-autotune-no-cudagraphs") and "tuned" in r.config.label
    measurement_says(f"so a plain t over single steps below 40 steps) covered {old:.0%} of "
                     f"4,000 simulated 15-step windows at a lag-1 correlation of 0.4, about the "
                     f"value measured in a tuned ResNet-50 record on an H100 "
                     f"({lag1(r.step_times_s):.2f} over its {len(r.step_times_s)} steps: record "
                     f"{r.id}, flagged `{flags(r)}`)")
    assert f"{lag1(r.step_times_s):.1f}" == "0.4"


def test_the_coverage_table(coverage):
    # `python3 tests/test_coverage.py 4000`, every row, from the committed cells (checked
    # against the simulation below)
    committed = coverage.committed_cells()
    assert committed["reps"] == 4000

    def cell(n: int, phi: float) -> dict:
        return committed["cells"][f"{n} {phi}"]
    for row in coverage.coverage_table(4000, cell).splitlines():
        measurement_says(row)
    measurement_says("Coverage of 4,000 simulated windows a cell")
    # the figures the prose takes from it
    measurement_says(f"batches of 20 steps covered "
                     f"{cell(250, 0.9)['previous']:.0%} of 250-step windows")
    wider = [cell(n, 0.4)["median_ratio"] - 1 for n in (30, 100, 250)]
    measurement_says(f"at a lag-1 correlation of 0.4 the median interval of a 30- to 250-step "
                     f"window is {min(wider) * 100:.0f}-{max(wider):.0%} wider")


@test_coverage.CELLS
def test_the_committed_cells_are_the_simulation(coverage):
    """The committed cells are this simulation's: every cell's first 1,000 windows (which the
    cell tests draw anyway, on this worker) and two whole cells at 4,000 windows, recomputed."""
    committed = coverage.committed_cells()
    assert committed["prefix_reps"] == coverage.REPS
    assert committed["prefix"] == coverage.simulated_cells(coverage.REPS)
    for n, phi in ((8, 0.9), (15, 0.4)):
        assert committed["cells"][f"{n} {phi}"] == coverage.cell(n, phi, 4000)


def test_the_stopping_rule():
    rows = (("--warmup", "warmup"), ("--warmup-time", "warmup_time"),
            ("--min-steps", "min_steps"), ("--min-time", "min_time"),
            ("--max-time", "max_time"), ("--max-steps", "max_steps"),
            ("--target-ci", "target_ci"))
    for flag, dest in rows:
        measurement_says(f"| `{flag}` | {number(default('throughput', dest))} |")
    with pytest.raises(StopRuleError, match="^min_steps"):
        StopRule(min_steps=1)
    measurement_says("never stop before this many measured steps (at least 2)")
    with pytest.raises(StopRuleError, match="^max_seconds"):
        StopRule(min_seconds=5, max_seconds=2)
    for bad in (0, 1):
        with pytest.raises(StopRuleError, match="^target_rel_ci"):
            StopRule(target_rel_ci=bad)
    measurement_says("a `--target-ci` outside (0, 1)) is refused before anything runs")
    assert stats.NOISY_CV == 0.10
    measurement_says("A window whose steps vary by 10% or more is flagged too (`cv`")
    assert window.CHECK_INTERVAL_S == 0.1
    measurement_says("the steps between two checks (about 0.1 s of steps)")


def test_run_to_run_variance(by_id):
    h100_cards = CARD_SPREAD["throughput"]["NVIDIA H100 80GB HBM3"]["configs"]
    configs = {c["config"]: c for c in h100_cards}
    parts, flagged = [], {}
    for name in ("vit_b_16 b512 bf16 train cl", "gpt2 b64 bf16 train compiled+loss pad-vocab"):
        recs = [by_id[rid] for rid in configs[name]["records"]]
        assert len({r.env["gpus"][0]["uuid"] for r in recs}) == len(recs) == configs[name]["cards"]
        flagged.update({(name, r.id): flags(r) for r in recs})
        figures = [rate(r) for r in recs]
        assert (min(figures), max(figures)) == pytest.approx((configs[name]["min"],
                                                              configs[name]["max"]))
        parts.append((len(recs), max(figures) / min(figures) - 1,
                      pct_span([r.summary().rel_halfwidth for r in recs])))
    (n_vit, vit, vit_hw), (n_gpt2, gpt2, gpt2_hw) = parts
    unthrottled = [(name, f) for (name, _), f in flagged.items()
                   if f != "throttled (power); one process"]
    assert unthrottled == [("vit_b_16 b512 bf16 train cl", "no telemetry; one process")]
    words = {3: "three", 4: "four"}
    measurement_says(f"Across {words[n_vit]} H100s the same ViT-B/16 config (batch 512, bf16) was "
                     f"{vit:.1%} faster on the fastest card than on the slowest while each record "
                     f"stated ±{vit_hw}; across {words[n_gpt2]}, the same compiled GPT-2 config "
                     f"{gpt2:.1%} against ±{gpt2_hw} (every one of these records flagged `one "
                     "process`, all but one ViT-B/16 record `throttled (power)`, that one `no "
                     "telemetry`; `src/dlbench/reference/card_spread.json` names them)")


def test_how_a_fresh_process_starts_and_the_default_suite(tmp_path):
    folder = H100_DIR / "default-suite-repeat"
    forked = H.open_store(ROOT / "results", f"{H.H100}/default-suite-repeat", tmp_path)
    spawned = open_gz(folder / "dlbench-spawned.db.gz", tmp_path)
    (f_run,), (s_run,) = forked.runs(), spawned.runs()
    assert (f_run.run_id, s_run.run_id) == (FORKED_RUN, SPAWNED_RUN)
    f_recs, s_recs = forked.results(kind="throughput"), spawned.results(kind="throughput")
    assert len(f_recs) == len(s_recs) == 15 and all(r.ok for r in f_recs + s_recs)
    f_s, s_s = wall_s(f_run), wall_s(s_run)
    forked.close()
    spawned.close()
    per_process = (s_s - f_s) / 15
    assert per_process / (s_s / 15) > 0.5       # "more than half of what each ... took"
    measurement_says(f"on an H100 host that cost about {per_process:.0f} s a process, more than "
                     "half of what each default-suite process took that way (below)")
    measurement_says(f"the default suite's 15 processes took {f_s:.0f} s this way (run "
                     f"{FORKED_RUN}) and {s_s:.0f} s with a new interpreter per process (run "
                     f"{SPAWNED_RUN}, on another card)")
    cards = [{r.env["gpus"][0]["uuid"] for r in recs} for recs in (f_recs, s_recs)]
    assert len(cards[0]) == len(cards[1]) == 1 and cards[0] != cards[1]

    # the two runs' figures: each config's mean of three processes and the interval across them
    def groups(recs):
        out = {}
        for r in recs:
            out.setdefault(r.config.label, []).append(r)
        return {label: (*stats.across_processes([rate(r) for r in rs]),
                        sorted({f for r in rs for f in H.record_flags(r) if f != "one process"}))
                for label, rs in out.items()}
    f_g, s_g = groups(f_recs), groups(s_recs)
    assert set(f_g) == set(s_g) and len(f_g) == 5
    diff = {k: max(f_g[k][0], s_g[k][0]) / min(f_g[k][0], s_g[k][0]) - 1 for k in f_g}
    outside = [k for k in f_g if abs(f_g[k][0] - s_g[k][0]) > f_g[k][1] + s_g[k][1]]
    assert outside == ["resnet50 b1024 bf16 train cl"] and diff[outside[0]] == max(diff.values())
    (k,) = outside
    measurement_says(f"differ by {max(diff.values()):.2%} at most, within the sum of their "
                     f"across-process intervals for four of the five configs; ResNet-50 train "
                     f"differs by {diff[k]:.2%} against ±{fmt_pct(f_g[k][1] / f_g[k][0])} "
                     f"(forked) and ±{fmt_pct(s_g[k][1] / s_g[k][0])} (spawned)")
    throttled = [sorted(k.split()[0] + (" train" if k.startswith("resnet50") else "")
                        for k, g in gs.items() if g[2] == ["throttled (power)"])
                 for gs in (f_g, s_g)]
    assert throttled == [["resnet50 train", "vgg16", "vit_b_16"], ["vgg16", "vit_b_16"]]
    assert all(g[2] in ([], ["throttled (power)"]) for gs in (f_g, s_g) for g in gs.values())
    measurement_says("Flags: `throttled (power)` on ResNet-50 train, VGG-16 and ViT-B/16 in the "
                     "forked run, on VGG-16 and ViT-B/16 in the spawned one.")

    # the default suite as it is built today: the same windows the records above ran
    suite, configs = suite_for("default", DeviceFacts(cuda=True, bf16=True,
                                                      memory_bytes=80 * 2**30))
    assert {(c.stop, c.warmup_steps, c.warmup_seconds) for c in configs} == {(REPEAT_STOP, 5, 1.0)}
    assert {(r.config.stop, r.config.warmup_steps, r.config.warmup_seconds)
            for r in f_recs + s_recs} == {(REPEAT_STOP, 5, 1.0)}
    s = REPEAT_STOP
    measurement_says(f"The `default` GPU suite runs every config in {suite.repeat} processes with "
                     f"shorter windows (at least {s.min_steps} steps and {s.min_seconds:g} s, at "
                     f"most {s.max_seconds:g} s; warm-up 5 steps and at least 1 s)")


def test_exit_codes():
    rows = {exits.EXIT_OK: "every result is ok", exits.EXIT_INTERNAL: "internal error",
            exits.EXIT_USAGE: "usage error; nothing ran",
            exits.EXIT_FAILED_RESULTS: "some results are failures (stored as rows)",
            exits.EXIT_FATAL: "a fatal device error stopped the sweep",
            exits.EXIT_REGRESSION: "`dlbench compare` found a regression",
            exits.EXIT_NO_MATCH: "`dlbench compare` found nothing to compare",
            exits.EXIT_INTERRUPTED: "interrupted; what was measured is kept"}
    listed = [int(line.split()[0]) for line in exits.EXIT_CODES.splitlines()[1:]
              if line.strip()[:1].isdigit()]
    assert sorted(rows) == listed            # every code the CLI documents, no other
    for code, meaning in rows.items():
        measurement_says(f"| {code} | {meaning}")
    measurement_says(f"is refused before anything runs (exit code {exits.EXIT_USAGE})")
    measurement_says(f"stops an in-process sweep with exit code {exits.EXIT_FATAL}")


def test_fidelity():
    fidelity = script("fidelity")
    (lo, hi), (cpu_lo, cpu_hi) = fidelity.BANDS["cuda"], fidelity.BANDS["cpu"]
    measurement_says(f"must sit within {lo}–{hi} on a GPU ({cpu_lo}–{cpu_hi} on a CPU")
    load = lambda path: json.loads(path.read_text())  # noqa: E731
    plain, tele, tuned = (load(H100_DIR / f) for f in (
        "fidelity.json", "fidelity-telemetry.json", "fidelity-tuned.json"))
    cpu = load(ROOT / "results" / H.CPU / "fidelity.json")
    # the commands' defaults, as the committed runs of them used them
    c = plain["config"]
    assert (c["model"], c["batch_size"], c["precision"], c["channels_last"], c["mode"],
            len(plain["rounds"])) == ("resnet50", 256, "bf16", True, "train", 4)
    measurement_says("# GPU: ResNet-50, batch 256, bf16, NHWC, train, 4 rounds")
    c = cpu["config"]
    assert (c["model"], c["batch_size"], c["precision"], cpu["env"]["torch_threads"],
            len(cpu["rounds"])) == ("tiny_cnn", 64, "fp32", 1, 10)
    measurement_says("# CPU: tiny_cnn, batch 64, fp32, one thread, 10 rounds")
    source = inspect.getsource(fidelity)
    assert '"llama-3.2-1b" if gpu else "tiny_llama"' in source
    assert 'ap.add_argument("--gpus", type=int, default=2' in source
    llama = get_model("llama-3.2-1b")
    measurement_says(f"By default llama-3.2-1b, batch {llama.default_batch} per GPU, "
                     f"{llama.input_size} tokens, bf16, 4 rounds")
    measurement_says("`--device cpu` runs tiny_llama on 2 gloo processes")
    # the measured ratios
    assert all(d["env"]["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3" for d in (plain, tele, tuned))
    assert (tuned["config"]["compile"], tuned["config"]["cuda_graph"]) == ("default", True)
    measurement_says(
        f"On an H100 the median ratio was {plain['median_ratio']:.4f} over "
        f"{len(plain['rounds'])} rounds ({plain['min_ratio']:.4f}–{plain['max_ratio']:.4f}), "
        f"{tele['median_ratio']:.4f} over {len(tele['rounds'])} rounds with telemetry sampling "
        f"beside the loop, and {tuned['median_ratio']:.4f} over {len(tuned['rounds'])} rounds "
        "for the compiled, CUDA-graph path")
    assert cpu["env"]["cpu_logical_cores"] == 2
    measurement_says(f"On a shared 2-core CPU single rounds ranged from {cpu['min_ratio']:.2f} to "
                     f"{cpu['max_ratio']:.2f} over {len(cpu['rounds'])} rounds "
                     "(`results/pt2.14-cpu/fidelity.json`)")


def test_the_profile_example(by_id):
    r = by_id[PROFILED]
    c = r.config
    assert (c.model, c.batch_size, c.precision, c.channels_last, c.compile, c.mode) == (
        "resnet50", 1024, "bf16", False, None, "train")
    assert r.env["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    s = summarise(r.profile, r.summary().median_s)
    assert s["steps"] == c.profile_steps == 10
    share = {k["category"]: k["share"] for k in s["categories"]}
    measurement_says(
        f"record {r.id}, flagged `{flags(r)}`): a {r.summary().median_s * 1e3:.0f} ms step of "
        f"which batch norm took {share['batch norm']:.0%}, convolutions "
        f"{share['convolution']:.0%}, other elementwise "
        f"{share['elementwise, reduction (PyTorch)']:.0%}, GEMMs {share['GEMM']:.0%}")
    measurement_says("Example (ResNet-50, batch 1024, bf16, NCHW, eager, on an H100;")


# -- docs/ceilings.md ---------------------------------------------------------------------------
def test_the_matmul_sweep(tmp_path):
    grid = peak_plan.mamf_grid()
    assert len(grid) == 76 and grid[-1] == peak_plan.PUBLISHED_BEST[0] == (6144, 17920, 2816)
    assert peak_plan.GRID_PRECISIONS == ("bf16", "fp16", "fp8")
    mn, k = peak_plan.GRID_MN, peak_plan.GRID_K
    ceilings_say(f"**bf16, fp16 and fp8** sweep a grid of {len(grid)} shapes: M and N each of "
                 f"{', '.join(map(str, mn[:-1]))} and {mn[-1]}, K each of "
                 f"{', '.join(map(str, k[:-1]))} and {k[-1]}, plus "
                 f"{'x'.join(map(str, peak_plan.PUBLISHED_BEST[0]))}")
    # the published search's figure is cited with its source, as the code's constant is
    assert "(792.1 TFLOP/s,\n#: github.com/mag-/gpu_benchmark" in inspect.getsource(peak_plan)
    ceilings_say("(792.1 TFLOP/s, github.com/mag-/gpu_benchmark)")
    plan = peak_plan.default_plan(torch.device("cuda"))
    assert len(plan.shapes) == 5
    ceilings_say(f"Each shape is measured for about {plan.grid_target_s} s ({plan.min_iters} to "
                 f"{plan.max_iters} iterations, after {plan.warmup} warm-up ones). fp32 and "
                 "tf32 keep five large shapes")
    supported = peak_plan.supported_precisions(torch.device("cpu"))
    assert [p for p, why in supported.items() if why is None] == ["fp32", "bf16"]
    ceilings_say("On a machine without a GPU the same verbs measure the CPU (fp32 and bf16)")

    # the grid on two H100s: the full `dlbench peak`, and the bf16 grid alone
    full = H.open_store(ROOT / "results", f"{H.H100}/peak-grid", tmp_path)
    bf16 = open_gz(H100_DIR / "frameworks" / "first-measurements.db.gz", tmp_path)
    runs = {}
    for store, run_id, command in ((full, GRID_RUN, "dlbench peak --db"),
                                   (bf16, GRID_BF16_RUN,
                                    "dlbench peak --precision bf16 --verbs matmul --db")):
        run = {r.run_id: r for r in store.runs()}[run_id]
        assert run.command.startswith(command)
        recs = [r for r in store.results(run_id=run_id, kind="peak") if r.ok]
        runs[run_id] = (run, recs)
    full.close()
    bf16.close()
    (full_run, full_recs), (bf16_run, bf16_recs) = runs[GRID_RUN], runs[GRID_BF16_RUN]
    ceilings_say(f"# every verb, every precision the device has ({wall_s(full_run):.0f} s on an "
                 "H100)")
    ceilings_say(f"# the bf16 grid alone ({wall_s(bf16_run):.0f} s on an H100)")
    ceilings_say(f"the two commands above took {wall_s(full_run):.0f} s and "
                 f"{wall_s(bf16_run):.0f} s there")
    ms = {p: [statistics.median(r.times_s) * 1e3 for r in full_recs
              if r.config.verb == "matmul" and r.config.precision == p] for p in ("fp32", "tf32")}
    assert len(ms["fp32"]) == len(ms["tf32"]) == 5
    two = {p: pct_span(v, lambda x: fmt_num(x, 2)) for p, v in ms.items()}   # 2.7-42
    ceilings_say(f"(on an H100 one product of them takes {two['fp32']} ms in fp32, "
                 f"{two['tf32']} ms in tf32)")
    published = next(f for f in today.figures_for("matmul")
                     if (f.gpu_id, f.precision) == ("h100-sxm", "bf16")).value
    tops = []
    for recs in (full_recs, bf16_recs):
        top = ceilings(recs)["bf16"]
        setter = next(r for r in recs if r.config.label == top["label"]
                      and r.median() == top["median"])
        assert top["points"] == len(grid) and H._peak_flags(setter) == ["one process"]
        assert setter.env["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
        tops.append((top["median"], setter.env["gpus"][0]["uuid"][:12]))
    (a, card_a), (b, card_b) = tops
    assert abs(b / published - 1) < 0.001
    ceilings_say(f"The grid reached {a:.1f} on one H100 ({card_a}), {a / published - 1:.1%} above "
                 f"it, and {b:.1f} on another ({card_b}), within 0.1% of it: cards of one model "
                 f"differ. Both are medians of {len(grid)} shapes, one process each (runs "
                 f"{GRID_RUN} and {GRID_BF16_RUN}")


def test_the_published_figure_and_the_five_shapes(h100):
    published = next(f for f in today.figures_for("matmul")
                     if (f.gpu_id, f.precision) == ("h100-sxm", "bf16"))
    sheet = spec_by_id("h100-sxm")
    assert "mamf-finder" in published.conditions
    ceilings_say(f"held to on an H100 SXM is {published.value} TFLOP/s bf16, the maximum "
                 f"achievable bf16 matmul rate published for that GPU with mamf-finder "
                 f"({published.value / sheet.tflops('bf16'):.0%} of the datasheet's dense "
                 f"{datasheet(sheet.tflops('bf16'))})")
    recs = [r for r in h100.results(run_id=FIVE_SHAPES_RUN, kind="peak") if r.ok]
    tops = ceilings(recs)
    order = ("bf16", "fp16", "tf32", "fp32", "fp8")
    assert {tops[p]["points"] for p in order} == {5}
    for key, c in tops.items():    # every figure quoted: one process, no other flag
        if key in order or key == "copy":
            setter = next(r for r in recs if r.config.label == c["label"]
                          and r.median() == c["median"])
            assert H._peak_flags(setter) == ["one process"], key
    ceilings_say(f"The five shapes dlbench swept before this grid reached "
                 f"{fmt_num(tops['bf16']['median'], 3)} (the median of the best shape), "
                 f"{1 - tops['bf16']['median'] / published.value:.1%} below it.")
    spec, _ = spec_for_env(recs[0].env)
    assert recs[0].env["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"
    m = {p: fmt_num(tops[p]["median"], 3) for p in order}
    ceilings_say(f"an H100 80GB HBM3 reached {m['bf16']} TFLOP/s bf16, {m['fp16']} fp16, "
                 f"{m['tf32']} tf32, {m['fp32']} fp32 and {m['fp8']} fp8 in matmul (medians of "
                 f"the best of five shapes; datasheet dense "
                 f"{' / '.join(datasheet(spec.tflops(p)) for p in order)}) and "
                 f"{fmt_num(tops['copy']['median'], 3)} GB/s device copy (run "
                 f"{FIVE_SHAPES_RUN}, one process;")


def test_mfu_and_roofline(h100, by_id, tmp_path):
    h200 = H.open_store(ROOT / "results", H.H200_4, tmp_path)
    rows = {}
    notes = {}
    for gpu, store in (("H100", h100), ("H200", h200)):
        recs = [r for r in store.results(run_id=MFU_RUNS[gpu], kind="throughput") if r.ok]
        peaks = store.results(kind="peak")
        assert len(recs) == 10 and all(r.repeat_group is None for r in recs)
        assert {(r.config.precision, r.config.compile) for r in recs} == {("bf16", None)}
        own = {p.env["gpus"][0]["uuid"] for p in peaks} == {r.env["gpus"][0]["uuid"] for r in recs}
        notes[gpu] = (own, {r.config.model: H.record_flags(r) for r in recs
                            if r.config.mode == "train"})
        for r in recs:
            if r.config.mode == "train" and r.config.model in ("resnet50", "vgg16", "gpt2"):
                m = mfu(r, own_card_peaks(r, peaks))
                rows.setdefault(r.config.model, []).append(
                    f"{fmt_num(r.achieved_tflops(), 3)} | {m.datasheet:.1%} / {m.measured:.1%}")
    h200.close()
    for model, (a, b) in rows.items():
        ceilings_say(f"| {model} | {a} | {b} |")
    ceilings_say(f"on an H100 (run {MFU_RUNS['H100']}) and an H200 (run {MFU_RUNS['H200']})")
    (own100, f100), (own200, f200) = notes["H100"], notes["H200"]
    assert not own100 and own200
    shown = ("resnet50", "vgg16", "gpt2")
    assert {tuple(f100[m]) for m in shown} == {("no telemetry", "one process")}
    assert [m for m in shown if "throttled (power)" in f200[m]] == ["resnet50", "vgg16"]
    assert all(set(f200[m]) <= {"throttled (power)", "one process"} for m in shown)
    ceilings_say("Every figure here comes from one process (`one process`); the H100's also carry "
                 "`no telemetry`, the H200's ResNet-50 and VGG-16 `throttled (power)`. The "
                 "H100's measured MFU is against the ceiling of another H100 (the store's one "
                 "`dlbench peak` ran on another card), the H200's against its own card's.")
    # true-fp32 VGG-16 past the measured fp32 ceiling
    r = by_id[VGG_FP32]
    (ceiling,) = measured_peaks(h100.results(kind="peak")).values()
    assert (r.config.model, r.config.precision, r.config.compile) == ("vgg16", "fp32", None)
    ceilings_say(f"True-fp32 VGG-16 reached {r.achieved_tflops() / ceiling['fp32']:.0%} of an "
                 f"H100's measured fp32 matmul ceiling (record {r.id}, {flags(r)})")


def test_published_results_and_the_fit():
    assert len(sources()) == 3
    ceilings_say("dlbench ships the published tables of three reference articles")
    args = build_parser().parse_args(["gpus"])
    assert (args.model, args.mode, args.x_precision) == ("vgg16", "eval", "fp32")
    ceilings_say("| `-m`, `--mode` | the model and mode of the fit (default `vgg16`, `eval`) |")
    ceilings_say("(`fp32` by default, as the article;")
    llama = today.figures_for("llama-3.1-8b")
    assert sorted({f.gpus for f in llama}) == [8, 128] and all("H100" in f.device for f in llama)
    ceilings_say("torchtitan's Llama 3.1 8B tokens/s per GPU on 8 and 128 H100s")
    left_out = " ".join(today.left_out())
    assert all(k in left_out for k in ("llm.c GPT-2 124M", "MLPerf", "inference"))

    assert "gpt2" not in today.models()
    ceilings_say("a model with no published figure (GPT-2 today) is refused")

    assert {r.batch_size for r in select(source="ms-per-batch", model="vgg16")} == {16}
    ceilings_say("VGG-16 at batch 16, 1/time of the six FP32 rows")
    fits = {mode: ms_per_batch_fit("vgg16", mode) for mode in ("eval", "train")}
    points = reference_points("vgg16", "eval")
    assert [f.n for f in fits.values()] == [6, 6] and len(points) == 6
    labels = [p.label.split(" (")[0] for p in points]
    assert labels == ["Titan V", "1080 Ti", "V100", "2080 Ti", "Tesla T4", "RTX 3060"]
    assert {f"{f.r2:.3f}" for f in fits.values()} == {"0.984"}
    ceilings_say("R² = 0.984 for eval and for train, the article's figure")
    ceilings_say(f"the centred R² is {fits['eval'].r2_centered:.2f} (eval) and "
                 f"{fits['train'].r2_centered:.2f} (train)")
    sxm2, pcie = spec_by_id("v100-sxm2").tflops("fp32"), spec_by_id("v100-pcie").tflops("fp32")
    assert [p.x_tflops for p in points if p.label.startswith("V100")] == [sxm2]
    pcie_r2 = {}
    for mode in ("eval", "train"):
        pts = reference_points("vgg16", mode)
        xs = [pcie if p.label.startswith("V100") else p.x_tflops for p in pts]
        pcie_r2[mode] = fit_through_origin(xs, [p.y_speed for p in pts]).r2
    ceilings_say(f"It holds with the V100 SXM2's {sxm2} TFLOPS; the PCIe figure ({pcie}) gives "
                 f"{pcie_r2['eval']:.3f} (eval) and {pcie_r2['train']:.3f} (train)")


@pytest.mark.slow
def test_the_flop_counts_differ():
    gpt2 = get_model("gpt2")
    counted = count_flops(gpt2, "train") / gpt2.input_size     # per token
    formula = H.GPT2_FLOP_PER_TOKEN                            # 6N + 12LHT at 1,024 tokens
    assert gpt2.input_size == 1024 and formula > counted
    ceilings_say(f"differ by {formula / counted - 1:.1%} for GPT-2 at 1,024 tokens (the formula "
                 "counts more)")
