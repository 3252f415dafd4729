"""docs/scaling.md against its sources. Every figure the page gives is checked twice: the page
says it (in the words and rounding it uses), and the code or record it comes from gives it.

Defaults and rules (timeouts, DDP's bucket, the TP degree, the profiled steps, comm's samples,
timing modes, busbw factors and exact inputs, the safety variables) come from the parser and the
constants of dlbench; the published busbw table from src/dlbench/reference/comm_busbw.json; the
measured figures (the four-H200 scaling and interconnect examples, the collectives, FSDP2 on two
H200s, the sharded runs on four H100s, eager timing beside nccl-tests on two H100s) from the
committed stores, with every flag of their records. The generated interconnect table is checked
by tests/test_readme_claims.py."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from fakes.cli import script
from fakes.pages import H, assert_says, store_fixture

from dlbench.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "scaling.md").read_text()
#: The four-H200 campaign's batch per GPU in bf16, by model (its scaling tables').
BF16_BATCH = {"resnet50": 1024, "inception_v3": 512, "vgg16": 512, "resnet152": 512,
              "inception_v4": 512, "nasnet": 64}


def says(text: str) -> None:
    assert_says(PAGE, text)


def default(command: str, flag: str):
    """A flag's default as ``dlbench COMMAND`` parses it."""
    argv = [command, "-m", "resnet50"] if command == "scale" else [command]
    return getattr(build_parser().parse_args(argv), flag)


def span(values, fmt: str = ".2f", unit: str = "") -> str:
    """``0.99–1.03``: the range of ``values`` as the page writes it (an en dash)."""
    return f"{min(values):{fmt}}–{max(values):{fmt}}{unit}"


def rate(r) -> float:
    return r.summary().throughput


def hw(r) -> str:
    from dlbench.report.table import fmt_pct
    return fmt_pct(r.summary().rel_halfwidth)


# -- the committed stores, each opened once -------------------------------------------------------
h200_4 = store_fixture(H.H200_4)
h200_8 = store_fixture(H.H200_8)
h200_2 = store_fixture(H.H200_2)
h100_4 = store_fixture(H.H100_4)
h100_4_comm = store_fixture(H.H100_4_COMM)


@pytest.fixture(scope="module")
def scaling(h200_4):
    return h200_4.results(kind="scaling")


def ddp(scaling, model: str, gpus: int):
    """The four-H200 bf16 scaling tables' record: the latest ok ddp one, default interconnect."""
    return H.latest(scaling, model=model, batch_size=BF16_BATCH[model], precision="bf16",
                    gpus=gpus, strategy="ddp", interconnect="default")


# -- how a scaling run works ----------------------------------------------------------------------
def test_the_progress_line():
    from dlbench.launch import progress, torchrun
    from dlbench.workloads import scaling as scaling_workload
    assert progress.WRITE_EVERY_S == torchrun.STATUS_EVERY_S == 1.0
    says("rewrites a small file in the job's folder about once a second")
    phase = "first step (compile, communicators)"
    assert f'progress.phase("{phase}")' in inspect.getsource(scaling_workload)
    line = progress.describe({"phase": phase, "steps": 0, "phase_s": 41.0})
    says(f"`{line}`")
    assert line == "rank 0: first step (compile, communicators), 0:41 in it"


def test_the_runs_without_telemetry(h200_4):
    ok = [r for r in h200_4.results(kind="scaling") if r.ok]
    none = [r for r in ok if "no telemetry" in H.record_flags(r)]
    four, four_none = ([r for r in rs if r.config.gpus == 4] for rs in (ok, none))
    runs = sorted({r.run_id for r in none})
    # every record of those runs stored none
    assert all("no telemetry" in H.record_flags(r) for r in ok if r.run_id in runs)
    says(f"in the four-H200 store, {len(none)} of its {len(ok)} data-parallel results, "
         f"{len(four_none)} of the {len(four)} at four GPUs: runs {', '.join(runs[:-1])} and "
         f"{runs[-1]} stored none")


def test_a_repeat_group_and_compare():
    from dlbench.commands.common import EXIT_REGRESSION
    from dlbench.report.groups import GroupFigure
    cell = GroupFigure(mean=100.0, halfwidth=1.2, ok=3, ran=3).cell
    says(f"with the 95% t-interval across them and their count (`{cell}`;")
    assert cell == "±1.20% (3)"
    says(f"dlbench compare tag:before tag:after # exit {EXIT_REGRESSION} on a regression")


# -- strategies -----------------------------------------------------------------------------------
def test_the_strategy_defaults():
    from dlbench.records.scaling import DEFAULT_TP, ScalingConfig
    from dlbench.records.throughput import ThroughputConfig
    says(f"`--bucket-mb` ({default('scale', 'bucket_mb'):.0f}) sets the gradient bucket size")
    base = ThroughputConfig(model="tiny_llama", batch_size=2, device="cpu")
    assert DEFAULT_TP == 2
    assert ScalingConfig(base=base, gpus=4, strategy="fsdp+tp").tp == 2
    assert ScalingConfig(base=base, gpus=3, strategy="fsdp+tp").tp == 1
    assert ScalingConfig(base=base, gpus=4, strategy="fsdp+tp").label.endswith("fsdp+tp tp=2")
    says("fsdp+tp shows its degree (`fsdp+tp tp=2`)")
    says("inside groups of `--tp` GPUs of one host (default 2 where it divides the GPUs per "
         "host, else 1)")


def test_the_rank_counts_of_the_checks():
    """The page's "a test checks it" on N gloo ranks: the jobs of those tests."""
    distributed = (ROOT / "tests" / "test_distributed.py").read_text()
    tp = (ROOT / "tests" / "test_tp.py").read_text()
    levers = (ROOT / "tests" / "test_sharded_levers.py").read_text()
    assert 'llama_job(strategy, 2,' in distributed and "for strategy in (\"ddp\", \"fsdp\")" \
        in distributed
    says("(a test checks it, AdamW, 2 gloo ranks)")
    assert 'llama_job("tp", 2)' in tp
    says("After k steps it gives one process's parameters (a test checks it, 2 gloo ranks)")
    assert 'llama_job("fsdp+tp", 4)' in tp and 'llama_job("ddp", 2)' in tp
    says("On 4 gloo ranks (dp 2, tp 2) it gives DDP's parameters at 2 ranks (a test checks it)")
    assert 'llama_job("fsdp+tp", 2)' in tp
    says("`fsdp+tp` is tested on the CPU (gloo, 2 and 4 ranks)")
    assert 'llama_job("fsdp", 2, offload=offload)' in levers
    says("On the CPU, on 2 gloo processes, `fsdp --offload` trains tiny_llama")
    exposed = (ROOT / "tests" / "test_exposed_comm.py").read_text()
    assert '_, rec = llama_job(strategy, 2)' in exposed and '[("fsdp", "gloo:all_gather"),' \
        in exposed and '("ddp", "gloo:all_reduce")]' in exposed
    says("the names above on real 2-rank gloo jobs of tiny_llama (ddp and fsdp: every profiled "
         "step has some communication exposed, less than the step)")


def test_fsdp_on_two_h200s(h200_2):
    from dlbench.measure.mfu import datasheet_mfu
    from dlbench.report.strategy_tables import per_gpu_tflops
    recs = [r for run in H.SHARDED_RUNS for r in h200_2.results(run_id=run, kind="scaling")]
    [fsdp2] = [r for r in recs if r.ok and (r.config.model, r.config.strategy, r.config.gpus,
                                            r.config.base.batch_size,
                                            r.config.base.checkpointing)
               == ("llama-3.2-1b", "fsdp", 2, 4, False)]
    mfu = datasheet_mfu(per_gpu_tflops(fsdp2), fsdp2.env, "bf16")[0]
    fidelity = json.loads((ROOT / "results" / H.H200_2 / "fidelity-fsdp.json").read_text())
    assert fidelity["mode"] == "fsdp" and len(fidelity["rounds"]) == 1
    says(f"the 1B model at {mfu:.1%} MFU on two GPUs, the 8B model with checkpointing, the bare "
         f"loop's ratio {fidelity['median_ratio']:.4f} (the {mfu:.1%} from a window flagged noisy "
         "and throttled (power), one process; the ratio from one round)")
    assert H.record_flags(fsdp2) == ["noisy", "throttled (power)", "one process"]
    assert any(r.ok and r.config.model == "llama-3.1-8b" and r.config.base.checkpointing
               for r in recs)


def test_the_fsdp_fidelity_band():
    fidelity = script("fidelity")
    assert fidelity.BANDS["cuda"] == (0.99, 1.01) and callable(fidelity.bare_fsdp)
    says("beside a bare FSDP2 loop written by hand (`bare_fsdp` in the script) with the same "
         "model and settings, both through torchrun: the median ratio of their tokens/s must sit "
         "within 0.99–1.01")


def test_the_sharded_runs_on_four_h100s(h100_4):
    ok = [r for r in h100_4.results(kind="scaling") if r.ok]
    assert all(r.env["accelerator"] == "cuda" for r in ok)

    def ran(model, strategy, gpus, **levers):
        return [r for r in ok if (r.config.model, r.config.strategy, r.config.gpus)
                == (model, strategy, gpus)
                and all(getattr(r.config, k, None) == v or getattr(r.config.base, k, None) == v
                        for k, v in levers.items())]
    assert [r.config.tp_degree for r in ran("llama-3.2-1b", "fsdp+tp", 4)] == [2]
    says("`fsdp+tp` is tested on the CPU (gloo, 2 and 4 ranks) and measured on four H100s (TP "
         "degree 2, [campaign](results/2026-11-4x-h100-sharded.md)).")
    assert ran("llama-3.2-1b", "fsdp", 2, fp8=True) and ran("llama-3.2-1b", "fsdp", 2, offload=True)
    assert ran("llama-3.1-8b", "fsdp", 2, offload=True, checkpointing=True)
    says("**What is proven.** On four H100s both levers trained llama-3.2-1b under `fsdp` on two "
         "GPUs, and `--offload` the 8B model with checkpointing")

    multi = [r for r in ok if r.config.gpus > 1]
    profiled = [r for r in multi if all(p.get("source") == "cuda kernels"
                                        for p in r.rank_comm_profile)]
    rest = [r for r in multi if r not in profiled]
    assert [p["reason"] for r in rest for p in r.rank_comm_profile] == \
        ["turned off (--no-profile-comm)"] * rest[0].config.gpus
    kernel = "ncclDevKernel_AllGather_RING_LL"
    assert all(any(n.startswith("ncclDevKernel_") for p in r.rank_comm_profile
                   for n in p["comm_names"]) for r in profiled)
    assert any(n.startswith(kernel + "(") for r in profiled for p in r.rank_comm_profile
               for n in p["comm_names"])
    assert all(p["cost_s"] > 0 for r in profiled for p in r.rank_comm_profile)
    says(f"On four H100s: the ranks of {len(profiled)} of the {len(multi)} multi-GPU records of "
         "the [campaign](results/2026-11-4x-h100-sharded.md) profiled their CUDA kernels, NCCL's "
         f"among them under names as above (`{kernel}(...)`); the other, run with "
         "`--no-profile-comm`, keeps `None` and that reason.")


def test_the_dp_autocast_note(h200_4):
    # "Its fp32 one-GPU figure is therefore lower than DDP's": every fp32 row of the table
    rows = [[h200_4.get(i) for i in ids.split()] for _, p, ids in H._STRATEGY_IDS if p == "fp32"]
    assert rows and all(rate(dp1) < rate(ddp1) for ddp1, _, dp1, *_ in rows)
    says("Its fp32 one-GPU figure is therefore lower than DDP's.")


def test_the_four_h200_example(h200_4, scaling):
    one, two, four = (ddp(scaling, "resnet50", n) for n in (1, 2, 4))
    env = four.env
    matrix = [line.split("\t")[1:5] for line in env["topology"].splitlines()[1:5]]
    assert all(cell.strip() == ("X" if i == j else "NV18") for i, row in enumerate(matrix)
               for j, cell in enumerate(row))
    assert {r.config.base.channels_last for r in (one, two, four)} == {True}
    says("Example (one host of four H200, NV18 between every pair; bf16, channels_last; img/s, "
         "factor over 1 GPU)")
    says(f"DDP scales ResNet-50 {H._rate_bare(one)} → {H._rate_bare(two)} "
         f"({rate(two) / rate(one):.2f}) → {H._rate_bare(four)} ({rate(four) / rate(one):.2f}) at "
         "1/2/4 GPUs")
    assert {r.config.base.stop.max_seconds for r in (one, two, four)} == {3.0}
    assert H.record_flags(one) == H.record_flags(two) == ["no telemetry", "one process"]
    assert H.record_flags(four) == ["noisy", "no telemetry", "one process"]
    says(f"(windows of at most 3 s, one process each, no GPU telemetry; the 4-GPU one flagged "
         f"noisy at ±{four.summary().rel_halfwidth:.1%})")

    # DataParallel and the parameter server at 2 GPUs, each over its own 1 GPU (bf16 rows)
    rows = [[h200_4.get(i) for i in ids.split()] for _, p, ids in H._STRATEGY_IDS if p == "bf16"]
    assert len(rows) == 4
    dp = [rate(r[3]) / rate(r[2]) for r in rows]
    ps = [rate(r[5]) / rate(r[4]) for r in rows]
    windows = [H.record_flags(r) for row in rows for r in row[2:]]

    def count(test) -> int:
        return sum(any(test(f) for f in flags) for flags in windows)
    cv = [flags for flags in windows if any(f.startswith("cv ") for f in flags)]
    assert len(cv) == 1 and cv[0][0].startswith("noisy")
    assert all(flags[-1] == "one process" for flags in windows)
    says(f"at 2 GPUs DataParallel reaches {span(dp)}x and the parameter server {span(ps)}x on "
         f"four CNNs, each a factor over the same strategy's 1-GPU window (those {len(windows)} "
         f"windows, one process each: {count(lambda f: f.startswith('noisy'))} noisy, "
         f"{count(lambda f: f == 'noisy (time cap)')} of them `noisy (time cap)` and one with "
         f"{next(f for f in cv[0] if f.startswith('cv '))}; "
         f"{count(lambda f: f == 'throttled (power)')} `throttled (power)`; "
         f"{count(lambda f: f.startswith('energy-mismatch'))} `energy-mismatch`).")


# -- tensor parallelism and the levers ------------------------------------------------------------
def test_llama_3_heads_and_vocabulary():
    from dlbench.models.lm import shipped
    llamas = [shipped()[n].config for n in ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b")]
    assert {c["num_key_value_heads"] for c in llamas} == {8}
    says("(Llama 3's 8 KV heads: up to 8)")
    assert {c["vocab_size"] for c in llamas} == {128_256}
    says(f"(the head's {128_256 / 1000:.0f}k-vocabulary matmul too)")


def test_the_levers_rules_and_labels():
    from dlbench.records.scaling import ScalingConfig, ScalingRecord
    from dlbench.records.throughput import ThroughputConfig
    from dlbench.report.strategy_tables import strategy_table
    from dlbench.workloads import fp8
    assert fp8.MIN_CAPABILITY == (8, 9) and fp8.DIM_MULTIPLE == 16
    says("the LM head and every layer whose features do not divide by 16 stay in `--precision`")
    says("It needs an H100/Ada-class GPU (sm_89 or newer)")
    base = ThroughputConfig(model="llama-3.2-1b", batch_size=2, input_size=2048,
                            precision="bf16", optimizer="adamw", compile="default")
    label = ScalingConfig(base=base, gpus=8, strategy="fsdp", offload=True, fp8=True).label
    assert label.endswith("x8 fsdp offload fp8")
    says("Each lever is in the result's label (`x8 fsdp offload fp8`)")

    def rec(gpus, step_s, **levers):
        return ScalingRecord(config=ScalingConfig(base=base, gpus=gpus, strategy="fsdp",
                                                  **levers),
                             env={}, rank_step_times_s=((step_s,) * 10,) * gpus,
                             rank_samples_per_step=(2,) * gpus, unit="tokens",
                             units_per_sample=2048)
    # an offload step twice as long as plain fsdp's, at the same GPUs: its factor, named
    t = strategy_table([rec(1, 0.25), rec(2, 0.5), rec(2, 1.0, offload=True)])
    assert t.rows[-1][-1] == "0.50 (fsdp)"
    says("names the one it took (`0.50 (fsdp)`)")


def test_the_profiled_steps():
    from dlbench.measure import comm_profile
    from dlbench.records.scaling import COMM_PROFILE_STEPS
    assert comm_profile.WARMUP_STEPS == 1 and comm_profile.DEFAULT_STEPS == COMM_PROFILE_STEPS == 3
    says(f"runs {comm_profile.WARMUP_STEPS} + {COMM_PROFILE_STEPS} more steps under "
         f"`torch.profiler`: the first takes the profiler's own start, each of the other "
         f"{COMM_PROFILE_STEPS} runs in a `{comm_profile.MARK}` range")
    says(f"Cost: the {comm_profile.WARMUP_STEPS + COMM_PROFILE_STEPS} steps, a synchronize after "
         "each")
    # the CPU names: the torch the project's CPU machines run (constraints.txt)
    torch_pin = re.search(r"^torch==(\d+\.\d+)\.", (ROOT / "constraints.txt").read_text(), re.M)
    says(f"ddp, ps, fsdp and tp (torch {torch_pin[1]};")


# -- the interconnect A/B -------------------------------------------------------------------------
def test_the_profiles():
    from dlbench.launch.interconnect import PROFILE_ENV
    for name in ("no-p2p", "no-shm", "no-ib"):
        ((var, value),) = PROFILE_ENV[name].items()
        says(f"| `{name}` | `{var}={value}` |")
    assert PROFILE_ENV["no-p2p+no-shm"] == {**PROFILE_ENV["no-p2p"], **PROFILE_ENV["no-shm"]}
    says("| `no-p2p+no-shm` | both | through sockets |")


def article(model: str, gpus: int, setup: str = "no NVLink") -> float:
    """The tf_cnn_benchmarks study's fp16 img/s (reference data, source tf-cnn-benchmarks)."""
    from dlbench.reference import select
    (row,) = select(source="tf-cnn-benchmarks", model=model, gpus=gpus, precision="fp16", setup=setup)
    return row.value


def test_the_interconnect_prose(h200_4, scaling):
    cells = {(m, p): h200_4.get(i) for m, p, i in (
        ("resnet50", "default", "c828ce0b1be2"), ("resnet50", "no-p2p", "a6caee5619e7"),
        ("resnet50", "no-p2p+no-shm", "3f3c18c77d7d"), ("vgg16", "default", "7190dd83c291"),
        ("vgg16", "no-p2p", "dc3ef3d46074"), ("vgg16", "no-p2p+no-shm", "d569391748b8"))}
    for (m, p), r in cells.items():       # the generated table's records, as the page names them
        assert (r.config.base.model, r.config.interconnect, r.config.gpus) == (m, p, 4)

    def factor(m, p) -> str:
        return f"{rate(cells[(m, p)]) / rate(cells[(m, 'default')]):.3f}"
    flags = {k: H.record_flags(r) for k, r in cells.items()}
    assert flags[("resnet50", "default")][0] == flags[("resnet50", "no-p2p+no-shm")][0] == "noisy"
    assert flags[("vgg16", "no-p2p+no-shm")][:2] == ["noisy (time cap)", "cv 14%"]
    assert all(not f[0].startswith(("noisy", "time cap", "cv"))
               for k, f in flags.items() if k in (("resnet50", "no-p2p"), ("vgg16", "default"),
                                                  ("vgg16", "no-p2p")))
    assert all(f[-2:] == ["no telemetry", "one process"] for f in flags.values())
    says(f"ResNet-50 keeps {factor('resnet50', 'no-p2p')} over shared memory and "
         f"{factor('resnet50', 'no-p2p+no-shm')} over sockets, both over an NVLink window flagged "
         f"noisy (±{hw(cells[('resnet50', 'default')])}), the sockets one noisy too "
         f"(±{hw(cells[('resnet50', 'no-p2p+no-shm')])}); VGG-16 {factor('vgg16', 'no-p2p')} and "
         f"**{factor('vgg16', 'no-p2p+no-shm')}**, the latter from a noisy, time-capped window "
         f"(±{hw(cells[('vgg16', 'no-p2p+no-shm')])}, cv 14%). Every figure is one process, "
         "without GPU telemetry.")

    bridges = [article(m, n, "NVLink bridges") / article(m, n) for m in BF16_BATCH
               for n in (2, 4)]
    says(f"(its bridges changed its throughput by factors of {span(bridges)} at 2 and 4 GPUs)")
    faster = [rate(ddp(scaling, m, 1)) / article(m, 1) for m in BF16_BATCH if m != "nasnet"]
    vgg_params = h200_4.get("2fd09f47b407").memory["params_bytes"] / 4     # fp32 weights
    says(f"on GPUs {span(faster, '.0f', 'x')} faster per GPU, VGG-16's {vgg_params / 1e6:.0f}M "
         "parameters no longer hide")


# -- collectives ----------------------------------------------------------------------------------
def test_the_comm_defaults():
    from dlbench.jobs import runs
    assert (default("comm", "iters"), default("comm", "warmup")) == (20, 5)
    says("`--iters` timed samples (20) after `--warmup` (5)")
    assert default("comm", "dtype") == "float32"
    says("`--dtype` picks the element type (float32 by default)")
    assert runs.ITERS_PER_SAMPLE == 10 and default("comm", "iters_per_sample") is None
    says(f"| `graph` (default on NCCL) | `--iters-per-sample` ({runs.ITERS_PER_SAMPLE}) "
         "iterations captured in one CUDA graph")
    says(f"| `batched` | `--iters-per-sample` ({runs.ITERS_PER_SAMPLE}) calls queued back to back")
    assert 'timing = "graph" if backend == "nccl" else "eager"' in inspect.getsource(runs.comm_plan)
    plan = runs.comm_plan(["all_reduce"], [], "8B", "1KiB", 2, device="cpu")
    assert (plan.backend, plan.ranks, plan.timing, plan.extra["iters_per_sample"]) == \
        ("gloo", 2, "eager", 1)
    says("| `eager` (default on gloo) | one Python call, an event after it")


def test_busbw_factors_and_exact_inputs():
    from dlbench.measure.bandwidth import busbw_factor
    from dlbench.workloads.collectives import EXACT_INTEGERS, Pattern
    n = 8
    assert busbw_factor("all_reduce", n) == 2 * (n - 1) / n
    assert {busbw_factor(op, n) for op in ("all_gather", "reduce_scatter", "all_to_all")} == \
        {(n - 1) / n}
    assert busbw_factor("broadcast", n) == 1
    says("all_reduce 2(n-1)/n; all_gather, reduce_scatter and all_to_all (n-1)/n; broadcast 1")
    assert (EXACT_INTEGERS["bfloat16"], EXACT_INTEGERS["float16"], EXACT_INTEGERS["float32"]) == \
        (256, 2048, 2**24)
    says("(bfloat16 256, float16 2,048, float32 2^24)")
    assert max(Pattern.for_type(t, w).m for t in EXACT_INTEGERS for w in (2, 8, 32)) == 7
    says("m (at most 7) is the largest that keeps that sum within the integers the type holds")
    ranks = 32
    old = sum(6 + r + 1 for r in range(ranks))    # (i mod 7) + rank + 1 at its largest, summed
    assert old > EXACT_INTEGERS["bfloat16"]
    says(f"The old inputs (`(i mod 7) + rank + 1`) summed to {old} at {ranks} ranks, past "
         f"bfloat16's {EXACT_INTEGERS['bfloat16']}")


def test_the_collectives_example(h200_4, h200_8):
    def largest(store, ranks, link, size):
        [r] = [r for r in store.results(kind="comm") if r.ok and r.config.op == "all_reduce"
               and not r.config.inplace and r.config.ranks == ranks
               and r.config.interconnect == link and r.config.size_bytes == size]
        return r
    four, eight = largest(h200_4, 4, "default", 4 << 30), largest(h200_8, 8, "default", 4 << 30)
    sockets = largest(h200_4, 2, "no-p2p+no-shm", 1 << 30)
    assert {r.config.timing for r in (four, eight)} == {"eager"}
    assert all(H._comm_flags(r) == ["one process"] for r in (four, eight, sockets))
    says(f"all_reduce busbw at 4 GiB was {four.busbw() / 1e9:.0f} GB/s on four H200 and "
         f"{eight.busbw() / 1e9:.0f} GB/s on eight (eager timing); over sockets at 2 ranks and "
         f"1 GiB, {sockets.busbw() / 1e9:.1f} GB/s (each one process).")


def test_eager_timing_beside_nccl_tests(h100_4_comm):
    from dlbench.report.nccl_tests import only_run
    nccl = only_run((ROOT / "results" / H.H100_4_COMM / "nccl-default.txt").read_text())
    assert not nccl.graph
    recs = {r.config.size_bytes: r for r in h100_4_comm.results(run_id=H.COMM_H100_EAGER_RUN,
                                                                kind="comm")
            if not r.config.inplace}
    small, four = recs[1 << 20], recs[4 << 20]
    assert {small.config.timing, four.config.timing} == {"eager"}
    assert small.env["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"

    def ratio(r) -> str:
        return f"{r.busbw() / 1e9 / nccl.row(r.config.size_bytes).out_busbw:.3f}"
    assert H._comm_flags(small) == ["cv 15%", "one process"]
    assert H._comm_flags(four) == ["one process"]
    says(f"on two H100s eager timing read {ratio(small)}x the busbw of nccl-tests' default loop at "
         f"1 MiB (cv 15%) and {ratio(four)}x at 4 MiB, out of place, each one process")


def test_the_targets_on_two_h100s(h100_4_comm):
    """The page's summary of the two-H100 comparison: graph mode at 0.9x or more of nccl-tests'
    default loop at every size from 1 MiB, not of its -G; within 2% of neither from 16 MiB."""
    from dlbench.report.nccl_tests import only_run
    folder = ROOT / "results" / H.H100_4_COMM
    graph_g, default_loop = (only_run((folder / f).read_text())
                             for f in ("nccl-G.txt", "nccl-default.txt"))
    assert graph_g.graph and not default_loop.graph
    recs = [r for r in h100_4_comm.results(run_id=H.COMM_H100_GRAPH_RUN, kind="comm")
            if r.config.size_bytes >= 1 << 20]
    assert {r.config.timing for r in recs} == {"graph"}

    def ratios(nccl, from_bytes):
        return [r.busbw() / 1e9 / nccl.row(r.config.size_bytes).busbw(r.config.inplace)
                for r in recs if r.config.size_bytes >= from_bytes]
    assert min(ratios(default_loop, 1 << 20)) >= 0.9 > min(ratios(graph_g, 1 << 20))
    assert all(any(abs(x - 1) > 0.02 for x in ratios(nccl, 16 << 20))
               for nccl in (default_loop, graph_g))
    says("(0.9x met against nccl-tests' default loop, not against `-G`; within 2% not met)")


def test_what_nccl_chose():
    from dlbench.measure import nccl_tuning
    doc = nccl_tuning.__doc__
    assert "2.20 to 2.22" in doc and "2.24 and later" in doc
    says("the forms NCCL has written since 2.20 are read")
    algorithms = sorted(nccl_tuning.POINT_TO_POINT | nccl_tuning.IN_NETWORK)
    assert algorithms == sorted(nccl_tuning.ALGORITHM_IDS)
    says("the **algorithm** (RING, TREE, PAT, NVLS, NVLS_TREE, COLLNET_DIRECT, COLLNET_CHAIN) and "
         f"**protocol** ({', '.join(nccl_tuning.PROTOCOL_IDS[:-1])}, "
         f"{nccl_tuning.PROTOCOL_IDS[-1]})")


def test_the_published_figures_table():
    from dlbench.reference.busbw import busbw_references
    table = PAGE[PAGE.index("### Published figures beside yours"):
                 PAGE.index("### Beside nccl-tests")]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and "---" not in line][1:]
    refs = busbw_references()
    assert len(rows) == len(refs)
    basis = {"maintainer": "NCCL maintainer", "measured": "measured"}
    for row, ref in zip(rows, refs):
        _, gpus, algorithm, busbw, said_basis, sources = row
        assert gpus == (str(ref.gpus[0]) if ref.gpus else
                        "any, one node" if ref.nodes == 1 else "across nodes"), ref
        assert algorithm.lower().startswith(ref.algorithm), ref
        assert ref.nccl is None or f"NCCL {ref.nccl}" in algorithm
        assert busbw == f"{ref.busbw_gbs:g}" and said_basis == basis[ref.basis]
        assert all(s in sources for s in ref.sources)
    # the switch's reductions: busbw not comparable, with the issues the page names
    switched = {s for r in refs if not r.comparable and r.nodes == 1 for s in r.sources}
    assert switched == {"https://github.com/NVIDIA/nccl-tests/issues/212",
                        "https://github.com/NVIDIA/nccl-tests/issues/272"}
    says("does not compare with a ring's (nccl-tests issues 212 and 272)")
    # what was not found is not there
    assert not [r for r in refs if r.algorithm == "nvls" and set(r.gpus or ()) & {2, 4}]
    assert not [r for r in refs if "400 Gb/s" in r.platform]
    says("Not found, so left out rather than extrapolated: H100 and H200 with NVLS at 2 and 4 GPUs")
    assert {r.gpu_id for r in refs if "5090" in r.platform} == {None}
    says("The RTX 5090 is not in the spec table, so its rows match no host.")


# -- safety and pitfalls --------------------------------------------------------------------------
def test_safety_and_timeouts():
    from dlbench.launch import torchrun
    from dlbench.launch.interconnect import SAFETY_ENV
    says("every rank gets `" + " ".join(f"{k}={v}" for k, v in SAFETY_ENV.items()) + "`")
    assert '"--max-restarts", "0"' in inspect.getsource(torchrun)
    says("(torchrun `--max-restarts 0`)")
    assert default("scale", "pg_timeout") == default("comm", "pg_timeout") == 120
    assert (default("scale", "timeout"), default("comm", "timeout")) == (900, 600)
    says("`--pg-timeout` (120 s) bounds how long one collective waits for a peer; `--timeout` "
         "(900 s for `scale`, 600 s for `comm`)")


def test_the_short_window_pitfall(scaling):
    one, two = ddp(scaling, "nasnet", 1), ddp(scaling, "nasnet", 2)
    assert all(H.record_flags(r)[0] == "noisy (time cap)" for r in (one, two))
    says(f"A scaling factor slightly above the GPU count (NASNet's {rate(two) / rate(one):.2f} at "
         "2 GPUs on four H200s, from two windows flagged `noisy (time cap)`)")
