"""The four-H200 page's prose against its records: every figure it quotes outside its generated
tables, and its hand-kept tables, recomputed here from the committed store (and the stores and
files it cites beside it), with the flags of the records behind them. The generated tables are
checked by tests/test_readme_claims.py, the what-if table by tests/test_whatif.py and the
re-checked MLPerf verdicts' counts by tests/test_verdicts.py."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from fakes.pages import H, assert_says, environment_rows, store_fixture

from dlbench import env as envmod
from dlbench.measure import stats
from dlbench.models.registry import get_model
from dlbench.records.peak import ceilings
from dlbench.reference import select, sources, spec_for_env
from dlbench.report.table import fmt_num, fmt_pct
from dlbench.training import mlperf
from dlbench.training.scoring import convergence, olympic_mean

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / H.H200_4_PAGE).read_text()
MULTICAST_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                 "NVSHMEM_DISABLE_NVLS": "1"}
WINDOW = "--warmup 3 --warmup-time 0.5 --min-steps 5 --min-time 1"
BF16_BATCH = {"resnet50": 1024, "inception_v3": 512, "vgg16": 512, "resnet152": 512,
              "inception_v4": 512, "nasnet": 64}
FP32_BATCH = {**{m: 256 for m in BF16_BATCH}, "nasnet": 64}
#: The page's names of the models, as the article's figures and the prose give them.
NAMES = {"resnet50": "ResNet-50", "inception_v3": "Inception v3", "vgg16": "VGG-16",
         "resnet152": "ResNet-152", "inception_v4": "Inception v4", "nasnet": "NASNet",
         "vit_b_16": "ViT-B/16", "gpt2": "GPT-2", "densenet161": "DenseNet-161"}
#: The largest-batch table's rows: the model and its label there.
MAXBATCH_LABELS = (("resnet50", "resnet50"), ("resnet152", "resnet152"),
                   ("inception_v3", "inception_v3"), ("inception_v4", "inception_v4"),
                   ("vgg16", "vgg16 (fp32 ‡)"), ("nasnet", "nasnet (large)"),
                   ("densenet161", "densenet161"), ("vit_b_16", "vit_b_16"),
                   ("gpt2", "gpt2 (seq 1024)"))
MAXBATCH_CAPTION = ("Each search's record (the latest of its setup) and the latest throughput "
                    "measured at its batch and setup; peak: the probe's allocated memory peak "
                    "there (share of the card's); ±95%.")


def says(text: str) -> None:
    assert_says(PAGE, " ".join(text.split()))


# -- reading the store ---------------------------------------------------------------------------
store = store_fixture(H.H200_4)


@pytest.fixture(scope="module")
def runs(store):
    return {r.run_id: r for r in store.runs()}


@pytest.fixture(scope="module")
def scaling(store):
    return store.results(kind="scaling")


def ddp(scaling, model: str, precision: str, gpus: int, batch: int | None = None):
    """The scaling tables' record: the latest ok ddp record of the config, default interconnect."""
    batch = batch or (BF16_BATCH if precision == "bf16" else FP32_BATCH)[model]
    return H.latest(scaling, model=model, batch_size=batch, precision=precision, gpus=gpus,
                    strategy="ddp", interconnect="default")


def strategy_records(store) -> dict[tuple[str, str, str, int], object]:
    """(model, precision, strategy, GPUs) -> the record of the generated strategy table."""
    out = {}
    for model, precision, ids in H._STRATEGY_IDS:
        for rid in ids.split():
            r = store.get(rid)
            out[(model, precision, r.config.strategy, r.config.gpus)] = r
    return out


def command(run) -> str:
    """The run's command as the page gives it: without the harness's options."""
    text = run.command
    for cut in (" --timeout", " --db", " -q", " --tag"):
        text = text.split(cut)[0]
    return text


def option(run, flag: str) -> str:
    words = run.command.split()
    return words[words.index(flag) + 1]


def uuids(r) -> frozenset[str]:
    return frozenset(g["uuid"] for g in r.env["gpus"])


def host(r) -> tuple[int, str | None]:
    """A record's host threads and the GPUs its job was given (``CUDA_VISIBLE_DEVICES``)."""
    return r.env["cpu_logical_cores"], r.env.get("env_vars", {}).get("CUDA_VISIBLE_DEVICES")


def host_gpus(r) -> int:
    """The GPUs of the record's host: the rows of its ``nvidia-smi topo -m`` matrix, which names
    every GPU of the host whatever the job was given."""
    matrix = r.env["topology"].split("Legend")[0].splitlines()[1:]
    return sum(line.startswith("GPU") for line in matrix)


def run_gpus(store, run_id: str) -> frozenset[str]:
    return frozenset().union(*(uuids(r) for r in store.results(run_id=run_id)))


def overlap(a, b) -> bool:
    t = datetime.fromisoformat
    return t(a.started_at) < t(b.finished_at) and t(b.started_at) < t(a.finished_at)


def hw(r) -> str:
    return fmt_pct(r.summary().rel_halfwidth)


def rate(r) -> float:
    return r.summary().throughput


def span(values, fmt: str = ".2f", unit: str = "") -> str:
    lo, hi = f"{min(values):{fmt}}", f"{max(values):{fmt}}"
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"


def first_host(store) -> frozenset[str]:
    """The first four-H200 host: the GPUs of the bf16 scaling's 4-GPU run."""
    return run_gpus(store, "83d39760447e")


def article(model: str, gpus: int, setup: str = "no NVLink", precision: str = "fp16") -> float:
    (row,) = select(source="tf-cnn-benchmarks", model=model, gpus=gpus, precision=precision,
                    setup=setup)
    return row.value


# -- the page, section by section ----------------------------------------------------------------
def test_the_opening_and_the_environment(store, runs):
    every = list(store.iter_results())
    assert all(r.repeat_group is None for r in every)
    says("Every figure on this page comes from one process: run-to-run variance is not in its "
         "interval.")
    # one environment key per GPU count: GPU model and count, driver, CUDA, cuDNN, torch, CPU
    keys = {}
    for r in every:
        ident = envmod.identity(r.env)
        keys.setdefault(ident["gpu_count"], set()).add(str(sorted(ident.items())))
    assert all(len(k) == 1 for k in keys.values())
    assert set(envmod.identity(every[0].env)) == {
        "accelerator", "gpu_count", "gpu_names", "driver", "cuda_runtime", "cudnn", "torch",
        "cpu_model"}
    says("(the GPU model and the number a process sees, driver, CUDA, cuDNN, torch, CPU model; "
         "not the host name)")

    # the hosts: told apart by their GPUs' UUIDs
    first = first_host(store)
    assert len(first) == 4 and run_gpus(store, "4f551b3782d4") <= first
    later = run_gpus(store, "f2f4a3ada79e")  # a 4-GPU job of 64 threads on other GPUs
    assert len(later) == 4 and not later & first
    assert {host(r)[0] for r in store.results(run_id="f2f4a3ada79e")} == {64}
    says("Most of it was measured on hosts of four H200 (64 threads; the GPU UUIDs in the "
         "records show more than one such machine, in turn: \"the first four-H200 host\" below "
         "is the one of the bf16 scaling)")
    by_threads: dict[int, list] = {}
    for r in every:
        by_threads.setdefault(host(r)[0], []).append(r)
    # the hosts' sizes: a four-H200 host has 64 threads, an eight-H200 one 128, ...
    assert {(host(r)[0], host_gpus(r)) for r in every} == {(16, 1), (32, 2), (64, 4), (128, 8)}
    eight = by_threads[128]
    assert {r.env["gpu_count"] for r in eight} == {1, 2, 4}
    assert all(host(r)[1] for r in eight)  # each job given its GPUs by CUDA_VISIBLE_DEVICES
    fours = {uuids(r) for r in eight if r.env["gpu_count"] == 4}
    assert len(fours) == 2 and not set.intersection(*map(set, fours))  # two hosts at least
    twos = {uuids(r) for r in by_threads[32]}
    assert len(twos) == 2 and not set.intersection(*map(set, twos))
    assert len({uuids(r) for r in by_threads[16]}) > 1
    assert {r.env["gpu_count"] for r in by_threads[16]} == {1}
    says("| same environment key | eight-H200 hosts (128 threads; jobs on 1, 2 or 4 of their "
         "GPUs through `CUDA_VISIBLE_DEVICES`), two-H200 hosts (32 threads), one-H200 machines "
         "(16 threads) |")

    # the environment table, from the first host's records
    env = store.results(run_id="83d39760447e")[0].env
    cards = {(g["name"], g["memory_total_bytes"], g["sm_count"], g["power_limit_w"],
              g["max_sm_clock_mhz"]) for r in every for g in r.env["gpus"]}
    ((name, mem, sms, watts, clock),) = cards
    spec = spec_for_env(env)[0]
    assert name == "NVIDIA H200" and spec.source.startswith("NVIDIA H200 Tensor Core GPU")
    says(f"| GPUs | 4x NVIDIA H200 ({spec.memory_gb} GB on NVIDIA's datasheet, "
         f"{mem / 2**30:.1f} GiB as torch reports it; {sms} SMs; power limit {watts:.0f} W; SM "
         f"clock up to {clock:,} MHz); NV18 (18 NVLinks) between every pair |")
    matrix = [line.split("\t")[1:5] for line in env["topology"].splitlines()[1:5]]
    assert all(cell.strip() == ("X" if i == j else "NV18") for i, row in enumerate(matrix)
               for j, cell in enumerate(row))
    says("# Four H200 (NV18 between every pair), November 2026")
    for key in ("driver", "cuda_runtime", "nccl", "python", "kernel", "cpu_model"):
        assert len({r.env[key] for r in every}) == 1, key
    for row in environment_rows(env):
        says(row)
    # every rank of a multi-GPU job: NVLink multicast off
    jobs = [r for r in every if getattr(r, "launch_env", None)]
    assert {r.kind for r in jobs} == {"scaling", "comm", "train"}
    assert all(MULTICAST_OFF.items() <= r.launch_env.items() for r in jobs)
    assert all(r.config.gpus == 1 for r in store.results(kind="train") if not r.launch_env)
    says("Every rank of a multi-GPU job ran with `" + " ".join(
        f"{k}={v}" for k, v in MULTICAST_OFF.items()) + "` (NVLink multicast off).")


def test_the_bf16_scaling(store, runs, scaling):
    table = {(m, n): ddp(scaling, m, "bf16", n) for m in BF16_BATCH for n in (1, 2, 4)}
    assert {r.run_id for (m, n), r in table.items() if n < 4} == {"4f551b3782d4"}
    assert {r.run_id for (m, n), r in table.items() if n == 4 and m != "nasnet"} == \
        {"83d39760447e"}
    assert table[("nasnet", 4)].run_id == "9f27ee3f6a3d"
    says("Runs 4f551b3782d4 (1 and 2 GPUs), 83d39760447e (4 GPUs), 9f27ee3f6a3d (NASNet at 4 "
         f"GPUs, with `--max-time {option(runs['9f27ee3f6a3d'], '--max-time')}`).")
    one_two = command(runs["4f551b3782d4"])
    assert one_two == ("dlbench scale -m resnet50,inception_v3,vgg16,resnet152,inception_v4,"
                       f"nasnet --gpus 1,2 --precision bf16 --channels-last on {WINDOW} "
                       "--max-time 3")
    assert command(runs["83d39760447e"]).endswith(f"{WINDOW} --max-time 3")
    says(f"`{one_two.replace('--gpus 1,2', '--gpus 1,2,4')}` (ddp, eager, batch per GPU;")
    says(f"Short windows: at least {option(runs['4f551b3782d4'], '--min-steps')} steps and "
         f"{option(runs['4f551b3782d4'], '--min-time')} s, at most "
         f"{option(runs['4f551b3782d4'], '--max-time')} s (NASNet at 4 GPUs: "
         f"{option(runs['9f27ee3f6a3d'], '--max-time')} s).")

    # the article's figures: tf_cnn_benchmarks on four Quadro RTX 8000, without NVLink bridges
    assert "4x Quadro RTX 8000" in sources()["tf-cnn-benchmarks"]["title"]
    cells = []
    for m in BF16_BATCH:
        one, two, four = (article(m, n) for n in (1, 2, 4))
        name = "NASNet-A mobile" if m == "nasnet" else NAMES[m]
        cells.append(f"{name} {one:,.0f} / {two:,.0f} ({two / one:.2f}) / {four:,.0f} "
                     f"({four / one:.2f})")
    says("The article's four Quadro RTX 8000 (fp16, XLA, its runs without NVLink bridges; img/s "
         "at 1 / 2 / 4 GPUs, factor in parentheses): " + "; ".join(cells) + ".")

    # NASNet's factor above 2, with the flags of its windows
    n1, n2 = table[("nasnet", 1)], table[("nasnet", 2)]
    assert all("noisy (time cap)" in H.record_flags(r) for r in (n1, n2))
    assert rate(n2) / rate(n1) > 2
    says(f"NASNet's {rate(n2) / rate(n1):.2f} is above 2: its windows were stopped by their time "
         f"cap and are flagged `noisy (time cap)` (±{hw(n1)} at 1 GPU, ±{hw(n2)} at 2)")

    # the first host, shared: the scaling on GPUs 0-1, peak and the suite on 2, a search on 3
    first, scale = first_host(store), runs["4f551b3782d4"]
    assert {host(r) for r in store.results(run_id=scale.run_id)} == {(64, "0,1")}
    for run_id, gpu in (("e8125b954fb2", "2"), ("eea04ab2c011", "2"), ("fa24d7be8741", "3")):
        assert {host(r) for r in store.results(run_id=run_id)} == {(64, gpu)}
        assert run_gpus(store, run_id) <= first and overlap(runs[run_id], scale)
    assert runs["e8125b954fb2"].command.startswith("dlbench peak")
    assert runs["fa24d7be8741"].command.startswith("dlbench maxbatch")
    says("The runs shared the first four-H200 host (its CPUs and PCIe, not their GPUs) with "
         "other jobs: while GPUs 0-1 ran the 1- and 2-GPU scaling, GPU 2 ran `dlbench peak` and "
         "the default suite and GPU 3 a largest-batch search.")
    assert host(table[("nasnet", 4)]) == (128, "4,5,6,7")
    says("NASNet at 4 GPUs ran on four GPUs (4-7) of an eight-H200 host.")

    # NASNet: timm's large one (weights in fp32 under autocast: 4 bytes a parameter)
    spec = get_model("nasnet")
    params = store.get("0b31735dc07a").memory["params_bytes"] / 4
    assert "nasnetalarge" in spec.description and "5.3M params" in spec.notes
    assert "NASNet-A mobile at 224 px" in select(source="tf-cnn-benchmarks", model="nasnet")[0].note
    says(f"NASNet here is timm's `nasnetalarge` ({spec.input_size} px, {params / 1e6:.1f}M "
         "parameters); the article's \"nasnet\" was NASNet-A mobile at 224 px (5.3M)")


def test_the_fp32_scaling(store, runs, scaling):
    table = {(m, n): ddp(scaling, m, "fp32", n) for m in FP32_BATCH for n in (1, 2, 4)}
    where = {}
    for (m, n), r in table.items():
        where.setdefault(r.run_id, set()).add(m)
        assert option(runs[r.run_id], "--max-time") == "2.5" and WINDOW in runs[r.run_id].command
    assert {(r.config.base.precision, r.config.base.channels_last) for r in table.values()} == \
        {("fp32", False)}  # fp32 is TF32 off in dlbench
    assert command(runs["e599168b33fa"]).startswith(
        "dlbench scale -m resnet50,inception_v3,vgg16,resnet152,inception_v4 -b 256 --gpus 1,2,4 "
        "--precision fp32")
    for run_id in ("64eb41680d29", "e230e23680e0", "dced4fe33cd3"):
        assert command(runs[run_id]).startswith("dlbench scale -m nasnet -b 64 --gpus ")
    says("`dlbench scale -m resnet50,inception_v3,vgg16,resnet152,inception_v4 -b 256 --gpus 1,2,4 "
         "--precision fp32` and `dlbench scale -m nasnet -b 64 --gpus 1,2,4 --precision fp32` "
         "(TF32 off, NCHW; the same window flags, but at most 2.5 s: `--max-time 2.5`).")
    e599, r846 = runs["e599168b33fa"], runs["846f77af2b13"]
    assert where.pop("e599168b33fa") == {"resnet50", "inception_v3", "vgg16"}
    assert where.pop("846f77af2b13") == {"resnet152"}
    fours = [run_gpus(store, run.run_id) for run in (e599, r846)]
    assert not fours[0] & fours[1]  # two eight-H200 hosts
    for run in (e599, r846):
        assert {host(r) for r in store.results(run_id=run.run_id)} == {(128, "4,5,6,7")}
        assert run.status == "interrupted"
        models = option(run, "-m").split(",")
        stored = {r.config.base.model for r in store.results(run_id=run.run_id)}
        assert models[len(stored)] not in stored  # cut in the model after these
    says("ResNet-50, Inception v3 and VGG-16 ran on four GPUs (4-7) of an eight-H200 host (run "
         "e599168b33fa), ResNet-152 on GPUs 4-7 of another (run 846f77af2b13); both runs were "
         "cut by a time limit in the model after these, status `interrupted`, every finished "
         "config stored.")

    # the earlier 1- and 2-GPU records of the same configs, and their flags
    earlier = [r for run in ("9ab6ba6329a9", "71b49d85cc6a")
               for r in store.results(run_id=run, kind="scaling")]
    assert {host(r)[0] for r in earlier} == {64}
    diffs = [abs(rate(r) / rate(table[(r.config.base.model, r.config.gpus)]) - 1)
             for r in earlier]
    says(f"The earlier 1- and 2-GPU records of the same configs on four-H200 hosts "
         f"(9ab6ba6329a9, 71b49d85cc6a) are within {max(diffs):.1%} of these")
    flags = {(r.run_id, r.config.base.model, r.config.gpus): H.record_flags(r) for r in earlier}
    assert all(f[-1] == "one process" for f in flags.values())
    assert {tuple(f) for (run, *_), f in flags.items() if run == "9ab6ba6329a9"} == \
        {("no telemetry", "one process")}
    later = {k[1:]: f[:-1] for k, f in flags.items() if k[0] == "71b49d85cc6a"}
    assert later == {("vgg16", 2): ["throttled (power)"], ("resnet152", 1): ["noisy (time cap)"],
                     ("resnet152", 2): ["time cap"]}
    (r152,) = [r for r in earlier if (r.config.base.model, r.config.gpus) == ("resnet152", 1)]
    says("(each one process; those of 9ab6ba6329a9 `no telemetry`; of 71b49d85cc6a, VGG-16's "
         "2-GPU one `throttled (power)`, ResNet-152's 1-GPU one `noisy (time cap)`, "
         f"±{hw(r152)}, and its 2-GPU one `time cap`).")

    # Inception v4 and NASNet on a later four-H200 host: 1 GPU beside 2, then all four
    assert set(where) == {"a84c1aa01fc0", "449c8736e1be", "64eb41680d29", "e230e23680e0",
                          "f2f4a3ada79e", "dced4fe33cd3"}
    order = sorted(where, key=lambda run: runs[run].started_at)
    assert (order[0], order[-1]) == ("a84c1aa01fc0", "dced4fe33cd3")
    machine = run_gpus(store, "f2f4a3ada79e")
    assert all(run_gpus(store, run) <= machine for run in where)
    assert not machine & first_host(store)
    gpus = {run: host(store.results(run_id=run)[0]) for run in where}
    for one, two in (("a84c1aa01fc0", "449c8736e1be"), ("64eb41680d29", "e230e23680e0")):
        assert (gpus[one], gpus[two]) == ((64, "0"), (64, "2,3"))
        assert overlap(runs[one], runs[two])
    assert gpus["f2f4a3ada79e"] == gpus["dced4fe33cd3"] == (64, None)  # all four
    says("Inception v4 and NASNet ran on a later four-H200 host: the 1-GPU run on GPU 0 beside "
         "the 2-GPU run on GPUs 2-3, then all four (runs a84c1aa01fc0 to dced4fe33cd3).")


def test_the_interconnect_ab(store, runs, scaling):
    four = runs["da0b697532f1"]
    assert command(four).startswith("dlbench scale -m resnet50,vgg16 --gpus 4 --interconnect "
                                    "no-p2p,no-p2p+no-shm --precision bf16 --channels-last on")
    defaults = [store.get(i) for i in ("c828ce0b1be2", "7190dd83c291")]  # the table's default
    assert {r.run_id for r in defaults} == {"83d39760447e"}
    assert all(ddp(scaling, r.config.base.model, "bf16", 4).id == r.id for r in defaults)
    says("(run da0b697532f1; the default profile from the bf16 scaling run)")
    two, ttt = runs["f9417393c970"], runs["b2d9d8df1a64"]
    says(f"`{command(two).split(' ' + WINDOW)[0]}` (run f9417393c970; GPUs 0-1 while GPUs 2-3 "
         "ran the time-to-accuracy job)")
    assert {host(r) for r in store.results(run_id=two.run_id)} == {(64, "0,1")}
    assert {host(r) for r in store.results(run_id=ttt.run_id)} == {(64, "2,3")}
    assert overlap(two, ttt)

    # the article's NVLink A/B: bridges over none at 2 and 4 GPUs
    factors = {(m, n): article(m, n, "NVLink bridges") / article(m, n)
               for m in BF16_BATCH for n in (2, 4)}
    assert max(factors, key=factors.get) == ("vgg16", 2)
    says("at 2 and 4 GPUs the bridges changed its throughput by factors of "
         f"{span(factors.values())} (VGG-16 at 2 GPUs the most)")
    # today's GPUs per GPU: the 1-GPU bf16 column against the article's 1-GPU figures
    faster = [rate(ddp(scaling, m, "bf16", 1)) / article(m, 1) for m in BF16_BATCH
              if m != "nasnet"]
    says(f"On today's GPUs, {span(faster, '.0f', 'x')} faster per GPU (the 1-GPU bf16 column "
         "above against the article's 1-GPU fp16 figures, NASNet apart)")
    vgg_params = store.get("2fd09f47b407").memory["params_bytes"] / 4  # fp32 weights
    says(f"VGG-16's {vgg_params / 1e6:.0f}M parameters no longer hide behind the compute")
    sockets = {n: store.get(rid) for n, rid in ((4, "d569391748b8"), (2, "47008f8b541f"))}
    assert all(r.config.interconnect == "no-p2p+no-shm" and r.config.base.model == "vgg16"
               and "noisy (time cap)" in H.record_flags(r) for r in sockets.values())
    ab = [r for run in ("da0b697532f1", "f9417393c970") for r in store.results(run_id=run)]
    ab += [ddp(scaling, r.config.base.model, "bf16", r.config.gpus) for r in ab]
    widest = sorted(ab, key=lambda r: r.summary().rel_halfwidth)[-2:]
    assert {r.id for r in widest} == {r.id for r in sockets.values()}
    says(f"its socket-only windows are the noisiest here (`noisy (time cap)`, ±{hw(sockets[4])} "
         f"at 4 GPUs and ±{hw(sockets[2])} at 2).")


def test_the_collectives(store, runs):
    recs = store.results(kind="comm")
    assert all(r.ok and r.wrong == 0 and r.config.dtype == "float32" for r in recs)
    says("(nccl-tests' algbw and busbw, float32, every size checked exactly: #wrong 0)")

    def largest(run_id):
        rs = store.results(run_id=run_id, kind="comm")
        top = max(r.config.size_bytes for r in rs)
        return {(r.config.op, r.config.interconnect, r.config.inplace): r for r in rs
                if r.config.size_bytes == top}, top
    ops = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")

    def row(label, run_id, link="default", fmt=".0f", cmd=None):
        """A row of the table: busbw out of place at the run's largest size, per operation."""
        cells, top = largest(run_id)
        assert f"({top // 2**30} GiB)" in label
        busbw = [f"{cells[(op, link, False)].busbw() / 1e9:{fmt}}"
                 if (op, link, False) in cells else "" for op in ops]
        says(f"| {label} | {cmd or f'`{command(runs[run_id])}` ({run_id})'} | "
             + " | ".join(busbw) + " |")
        return cells
    two = row("2 (1 GiB)", "a4da8ea13541")
    row("2, no-p2p (1 GiB)", "2cfc41585e86", "no-p2p", ".1f")
    row("2, no-p2p+no-shm (1 GiB)", "2cfc41585e86", "no-p2p+no-shm", ".1f", "the same")
    four = row("4 (4 GiB)", "21dab31ed2ab")
    quoted = [*two.values(), *four.values(), *largest("2cfc41585e86")[0].values()]
    assert {f for r in quoted for f in H._comm_flags(r)} == {"one process"}
    says('("Collectives"). Flags every figure here carries: one process.')
    assert {r.config.ranks for r in two.values()} == {2}
    assert {r.config.ranks for r in four.values()} == {4}

    # out of place against in place: the largest gap
    pairs = [(op, ranks, cells[(op, link, False)], cells[(op, link, True)])
             for ranks, run_id in ((2, "a4da8ea13541"), (2, "2cfc41585e86"),
                                   (4, "21dab31ed2ab"))
             for cells in [largest(run_id)[0]]
             for op, link, inplace in cells if inplace]
    assert ("all_to_all", "default", True) not in two
    gap = {(op, ranks): abs(i.busbw() / o.busbw() - 1) for op, ranks, o, i in pairs}
    (op, ranks) = max(gap, key=gap.get)
    o, i = two[(op, "default", False)], two[(op, "default", True)]
    says(f"(up to {gap[(op, ranks)]:.0%} apart: {op} at {ranks} ranks, {o.busbw() / 1e9:.0f} out "
         f"of place, {i.busbw() / 1e9:.0f} in place; all_to_all has no in-place form)")


def test_the_strategies(store, runs, scaling):
    table = strategy_records(store)
    ran = {}
    for key, r in table.items():
        ran.setdefault(r.run_id, set()).add(key)
    bf16, fp32 = ("bf16",), ("fp32",)

    def keys(models, precisions, strategies, gpus=(1, 2)):
        return {(m, p, s, n) for m in models for p in precisions for s in strategies
                for n in gpus}
    four = ("resnet50", "inception_v3", "vgg16", "resnet152")
    assert ran == {
        "4f551b3782d4": keys(four, bf16, ("ddp",)),
        "e599168b33fa": keys(("resnet50", "inception_v3", "vgg16"), fp32, ("ddp",)),
        "846f77af2b13": keys(("resnet152",), fp32, ("ddp",)),
        "af81fa799598": keys(four, bf16, ("dp",)),
        "1828f55a65c2": keys(("resnet50", "vgg16"), fp32, ("dp",)),
        "ad45617fa471": keys(("resnet50", "inception_v3"), bf16, ("ps",))
        | {("vgg16", "bf16", "ps", 1)},
        "64d721b8d979": keys(("resnet152",), bf16, ("ps",)),
        "a80d67f4c709": {("vgg16", "bf16", "ps", 2)},
        "74f0b1ef8e08": {("resnet50", "fp32", "ps", 1)},
        "d1744f031017": {("resnet50", "fp32", "ps", 2)},
        "fe76d7c7c55f": {("vgg16", "fp32", "ps", 1)},
        "53caf1e4f3a0": keys(("inception_v3", "resnet152"), fp32, ("dp", "ps"))
        | {("vgg16", "fp32", "ps", 2)}}
    # the window flags: ddp bf16 at most 3 s (the scaling run), every other run 2.5 s
    for run_id in ran:
        assert WINDOW in runs[run_id].command
        assert option(runs[run_id], "--max-time") == ("3" if run_id == "4f551b3782d4" else "2.5")
    says("(the window flags of the scaling above, at most 2.5 s for dp and ps)")
    where = {run_id: {host(r) for r in store.results(run_id=run_id)} for run_id in ran}
    assert where["af81fa799598"] == where["1828f55a65c2"] == {(128, "0,1")}
    assert run_gpus(store, "af81fa799598") == run_gpus(store, "1828f55a65c2")
    assert where["ad45617fa471"] == {(64, "0,1")} and where["74f0b1ef8e08"] == {(64, "2,3")}
    assert where["64d721b8d979"] == {(128, "0,1")}
    assert not run_gpus(store, "64d721b8d979") & run_gpus(store, "af81fa799598")  # another
    assert run_gpus(store, "d1744f031017") == run_gpus(store, "64d721b8d979")
    assert where["a80d67f4c709"] == where["fe76d7c7c55f"] == {(32, None)}
    assert run_gpus(store, "a80d67f4c709") == run_gpus(store, "fe76d7c7c55f")
    assert where["53caf1e4f3a0"] == {(64, "0,1")}
    earlier = set().union(*(run_gpus(store, run) for run in ("83d39760447e", "ad45617fa471",
                                                             "74f0b1ef8e08")))
    assert not run_gpus(store, "53caf1e4f3a0") & earlier
    assert all(runs["53caf1e4f3a0"].started_at > runs[run].started_at for run in ran
               if run != "53caf1e4f3a0")
    fe76 = runs["fe76d7c7c55f"]
    assert fe76.status == "interrupted" and "--gpus 1,2" in fe76.command
    assert {r.config.gpus for r in store.results(run_id=fe76.run_id)} == {1}
    says("Where the rows ran (ddp's are the scaling tables' records): the bf16 dp rows and the "
         "fp32 dp rows of ResNet-50 and VGG-16 on GPUs 0-1 of an eight-H200 host (af81fa799598, "
         "1828f55a65c2); bf16 ps of ResNet-50 and Inception v3, and of VGG-16 at 1 GPU, on GPUs "
         "0-1 of a four-H200 host (ad45617fa471), of ResNet-152 on GPUs 0-1 of another "
         "eight-H200 host (64d721b8d979), of VGG-16 at 2 GPUs on a two-H200 host (a80d67f4c709); "
         "fp32 ps of ResNet-50 at 1 GPU on GPUs 2-3 of a four-H200 host (74f0b1ef8e08), at 2 "
         "GPUs on the GPUs of the bf16 ResNet-152 ps (d1744f031017); fp32 VGG-16 ps at 1 GPU on "
         "the two-H200 host (fe76d7c7c55f, whose run was cut by a time limit, status "
         "`interrupted`, before its 2-GPU config stored a record; where that config stood was "
         "not recorded); fp32 dp and ps of Inception v3 and ResNet-152 and fp32 ps of VGG-16 at "
         "2 GPUs on a later four-H200 host (53caf1e4f3a0).")

    # the first dp rows: before the fixes
    first = {(r.config.base.model, r.config.base.precision, r.config.gpus): r
             for run in ("ad45617fa471", "74f0b1ef8e08")
             for r in store.results(run_id=run, kind="scaling") if r.config.strategy == "dp"}
    pairs = [(first[(m, p, 1)], first[(m, p, 2)]) for m, p, n in first if n == 2]
    assert len(pairs) == 4
    factors = [rate(two) / rate(one) for one, two in pairs]
    one, two = first[("resnet50", "bf16", 1)], first[("resnet50", "bf16", 2)]
    assert H.record_flags(one) == ["throttled (power)", "one process"]
    steps = []
    for _, r in pairs:
        f = H.record_flags(r)
        assert f[0] == "noisy (time cap)" and f[1].endswith(" of 5 steps")
        steps.append(int(f[1].split()[0]))
    says(f"nn.DataParallel measured {min(factors):.2f}x-{max(factors):.2f}x of one GPU "
         f"(ResNet-50 bf16: {fmt_num(rate(two))} img/s on two GPUs, ±{hw(two)}, against "
         f"{fmt_num(rate(one))} on one, `throttled (power)`), every 2-GPU window `noisy (time "
         f"cap)` after {min(steps)} to {max(steps)} of its 5 steps.")
    # the rerun on the eight-H200 host, computed in fp16
    eight = H.open_store(ROOT / "results", H.H200_8, Path(store.path).parent)
    reruns = [r for run in ("299cfb08a8b2", "696f4e4e21da")
              for r in eight.results(run_id=run, kind="scaling")]
    eight.close()
    a, b = (H.latest(reruns, model="resnet50", strategy="dp", gpus=n) for n in (1, 2))
    assert a.config.base.precision == "bf16"
    assert H.record_flags(a) == ["throttled (power)", "one process"]
    assert H.record_flags(b) == ["noisy (time cap)", "throttled (power)", "one process"]
    says(f"A rerun then measured {rate(b) / rate(a):.2f}x on two GPUs (the eight-H200 page; its "
         "2-GPU window `noisy (time cap)`, both `throttled (power)`)")

    # dp against ddp at 2 GPUs, bf16; and what each strategy scales by in fp32
    cost = [1 - rate(table[(m, "bf16", "dp", 2)]) / rate(table[(m, "bf16", "ddp", 2)])
            for m in four]
    dp2 = [H.record_flags(table[(m, "bf16", "dp", 2)]) for m in four]
    assert all(f[0].startswith("noisy") for f in dp2)
    r152 = table[("resnet152", "bf16", "dp", 2)]
    assert "cv 20%" in H.record_flags(r152)
    says(f"cost {span([c * 100 for c in cost], '.0f', '%')} of ddp's figure at 2 GPUs in bf16 "
         f"(dp's 2-GPU windows all `noisy`, {sum(f[0] == 'noisy (time cap)' for f in dp2)} "
         f"stopped by their time cap, ResNet-152's ±{hw(r152)} with `cv 20%`)")
    assert all(rate(table[(m, "fp32", "dp", 1)]) < rate(table[(m, "fp32", "ddp", 1)])
               for m in four)
    fp32 = [(table[(m, "fp32", s, 1)], table[(m, "fp32", s, 2)]) for m in four
            for s in ("ddp", "dp", "ps")]
    twos = [H.record_flags(two) for _, two in fp32]
    capped = [f for f in twos if any("time cap" in x for x in f)]
    assert len(fp32) == 12
    says(f"In fp32 every strategy scales by {span([rate(b) / rate(a) for a, b in fp32])}x: the "
         f"step is long enough to hide any of them (of the twelve 2-GPU "
         f"windows, {len(capped)} were stopped by their time cap, "
         f"{sum(f[0] == 'noisy (time cap)' for f in capped)} of them `noisy`).")

    # VGG-16's bf16 ps at 2 GPUs: the hang, stored as an error row
    (hung,) = [r for r in store.results(run_id="64d721b8d979") if not r.ok]
    assert (hung.config.base.model, hung.config.strategy, hung.config.gpus) == ("vgg16", "ps", 2)
    assert "Timed out waiting 120000ms" in hung.error
    assert option(runs["64d721b8d979"], "--pg-timeout") == "120"
    says("VGG-16's bf16 ps run at 2 GPUs first hung until the 120 s timeout of its gloo control "
         "group (run 64d721b8d979, stored as an error row;")
    before = runs["4222c7dfb620"]
    assert before.status == "interrupted" and not store.results(run_id=before.run_id)
    assert "--strategy ps" in before.command
    says("an earlier ps run, 4222c7dfb620, was cut by a time limit before it stored a record;")
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    with torch.device("meta"):
        vgg = torchvision.models.vgg16()
    fc6 = sum(p.numel() for p in vgg.classifier[0].parameters())
    assert vgg.classifier[0].in_features == 512 * 7 * 7
    says(f"one owns VGG-16's {fc6 / 1e6:.0f}M-parameter fc6 layer, the other the rest")


def test_two_h200s(store, runs):
    for run_id in ("f10e1774b20e", "9e6e5c8fd9e5", "28e3421be3c2"):
        assert {host(r) for r in store.results(run_id=run_id)} == {(32, None)}
        assert run_gpus(store, run_id) == run_gpus(store, "f10e1774b20e")
    topology = store.results(run_id="f10e1774b20e")[0].env["topology"]
    assert topology.splitlines()[1].split("\t")[2].strip() == "NV18"
    says("Measured on a host of two H200 (NV18) with the same software")
    says(f"`{command(runs['f10e1774b20e'])}`, then `--gpus 2 --interconnect no-p2p`:")
    assert command(runs["9e6e5c8fd9e5"]) == command(runs["f10e1774b20e"]).replace(
        "--gpus 1,2 --strategy ddp,dp,ps", "--gpus 2 --interconnect no-p2p")
    # DataParallel at the strategy table's batches
    table = strategy_records(store)
    one, two = table[("resnet50", "bf16", "dp", 1)], table[("resnet50", "bf16", "dp", 2)]
    assert H.record_flags(one) == ["throttled (power)", "one process"]
    assert H.record_flags(two) == ["noisy (time cap)", "throttled (power)", "one process"]
    says(f"at the batches of the table above it scaled {rate(two) / rate(one):.2f}x (its 2-GPU "
         "window `noisy (time cap)`, both `throttled (power)`).")
    # the all_reduce sweep
    comm = runs["28e3421be3c2"]
    recs = store.results(run_id=comm.run_id, kind="comm")
    assert all(r.ok and r.wrong == 0 and r.config.op == "all_reduce" for r in recs)
    out = {r.config.size_bytes: r for r in recs if not r.config.inplace}
    assert H._comm_flags(out[256 << 20]) == H._comm_flags(out[128 << 20]) == ["one process"]
    says(f"`{command(comm)}` (run 28e3421be3c2): busbw {out[256 << 20].busbw() / 1e9:.0f} GB/s "
         f"at 256 MiB ({out[128 << 20].busbw() / 1e9:.0f} at 128 MiB), out of place, #wrong 0 at "
         "every size.")


def test_the_what_if_check(store, scaling):
    from dlbench.whatif import check, scenarios
    db = str(store.path)
    rows = scenarios.check_against(db, busbw_from=db).scaling
    skill = {link: {k.prediction: k for k in check.skill_summary(
        [r for r in rows if r.link == link])} for link in ("default", "no-p2p", "no-p2p+no-shm")}
    with_skill = {(link, name) for link, ks in skill.items() for name, k in ks.items()
                  if k.skill is not None}
    assert with_skill == {("default", "none"), ("no-p2p+no-shm", "full")}
    nvlink, sockets = skill["default"]["none"], skill["no-p2p+no-shm"]["full"]
    closer = [r for r in rows if r.link == "no-p2p+no-shm"
              and abs(r.error_full) < abs(r.error_perfect)]
    assert [r.label.split()[0] for r in closer] == ["vgg16"]
    says(f"Skill only where the model beats the baseline: no overlap on NVLink (closer in "
         f"{nvlink.closer} of {nvlink.rows} rows), overlap over sockets (closer in "
         f"{sockets.closer} row of {sockets.rows}, VGG-16's; in the other {sockets.same} its "
         "prediction is the 1-GPU step).")
    assert sockets.closer + sockets.same == sockets.rows
    for link in ("default", "no-p2p"):
        full = skill[link]["full"]
        assert full.same == full.rows
    says("With overlap on NVLink and host shared memory the prediction is the 1-GPU step in "
         "every row, the baseline itself.")
    default = [r for r in rows if r.link == "default"]
    overlapped = [r for r in default if r.error_full is not None]
    assert {r.strategy for r in overlapped} == {"ddp"}
    assert all(r.error_full is None for r in default if r.strategy == "ps")
    says(f"The overlap column covers the ddp rows ({len(overlapped)} of the {len(default)} on "
         "NVLink): ps has no overlap prediction.")

    # the measured steps and their flags
    recs = [store.get(r.record_id) for r in rows]
    assert {r.kind for r in recs} == {"scaling"}
    flags = [H.record_flags(r) for r in recs]
    assert all(f[-1] == "one process" for f in flags)

    def count(test):
        return sum(any(test(x) for x in f) for f in flags)
    says(f"The {len(rows)} measured steps are this store's scaling records, each one process: "
         f"{count(lambda x: x.startswith('noisy'))} of them flagged `noisy`, "
         f"{count(lambda x: 'time cap' in x)} stopped by their time cap, "
         f"{count(lambda x: x == 'throttled (power)')} `throttled (power)`, "
         f"{count(lambda x: x.startswith('energy-mismatch'))} `energy-mismatch`, "
         f"{count(lambda x: x == 'no telemetry')} without telemetry.")

    # fp32 Inception v4 and NASNet
    late = [r for r in rows if r.label.split()[0] in ("inception_v4", "nasnet")
            and "fp32" in r.label]
    assert sorted((r.label.split()[0], r.ranks) for r in late) == [
        ("inception_v4", 2), ("inception_v4", 4), ("nasnet", 2), ("nasnet", 4)]
    worst = max(max(abs(r.error_none), abs(r.error_full)) for r in late)
    windows = [store.get(r.record_id) for r in late] + [
        ddp(scaling, m, "fp32", 1) for m in ("inception_v4", "nasnet")]
    wflags = [H.record_flags(r) for r in windows]
    assert all("4 of 5 steps" in f and any("time cap" in x for x in f) for f in wflags)
    nas4 = store.get(next(r.record_id for r in late if r.label.startswith("nasnet")
                          and r.ranks == 4))
    assert "noisy (time cap)" in H.record_flags(nas4)
    says(f"fp32 Inception v4 and NASNet at 2 and 4 GPUs are predicted within {worst:.1%}; their "
         "windows, and the 1-GPU ones they are predicted from, all ran `4 of 5 steps` and were "
         f"stopped by their time cap, {sum(f[0] == 'noisy (time cap)' for f in wflags)} of the "
         f"{len(windows)} `noisy` (NASNet's at 4 GPUs ±{hw(nas4)}).")
    # a profile or rank count comm never measured: the 4-GPU interconnect A/B
    measured = {(r.config.interconnect, r.config.ranks) for r in store.results(kind="comm")}
    assert ("no-p2p", 4) not in measured
    assert any(r.config.interconnect != "default" and r.config.gpus == 4 for r in scaling)
    assert all((r.link, r.ranks) in measured for r in rows)
    says("A profile or rank count `comm` never measured is left out.")


def test_the_default_suite_and_the_ceilings(store, runs):
    suite, peak, scale = runs["eea04ab2c011"], runs["e8125b954fb2"], runs["4f551b3782d4"]
    wall = datetime.fromisoformat(suite.finished_at) - datetime.fromisoformat(suite.started_at)
    assert suite.command.startswith("dlbench run ")
    for run in (suite, peak):
        assert {host(r) for r in store.results(run_id=run.run_id)} == {(64, "2")}
        assert run_gpus(store, run.run_id) <= first_host(store) and overlap(run, scale)
    says(f"`dlbench run` on GPU 2 of the first four-H200 host, beside the scaling runs on GPUs "
         f"0-1 (run eea04ab2c011; wall time {wall.total_seconds():.0f} s).")
    recs = [r for r in store.results(run_id=peak.run_id, kind="peak") if r.ok]
    tops = ceilings(recs)
    setters = {k: next(r for r in recs if r.config.label == c["label"]
                       and r.median() == c["median"]) for k, c in tops.items()}
    assert all(H._peak_flags(r) == ["one process"] for r in setters.values())
    spec = spec_for_env(recs[0].env)[0]
    m = {k: c["median"] for k, c in tops.items()}
    copy = setters["copy"]
    spread = stats.interval(copy.times_s).halfwidth / stats.mean(copy.times_s)
    says(f"`dlbench peak` on GPU 2 (run e8125b954fb2) while GPUs 0-1 ran the scaling: "
         f"{m['bf16']:.0f} TFLOP/s bf16, {m['fp16']:.0f} fp16, {m['tf32']:.0f} tf32, "
         f"{m['fp32']:.1f} fp32, {m['fp8']:,.0f} fp8 in matmul (median of the best shape; "
         f"datasheet dense {spec.bf16_tflops} / {spec.fp16_tflops} / {spec.tf32_tflops} / "
         f"{spec.fp32_tflops} / {spec.fp8_tflops:,.0f}), {m['copy']:,.0f} GB/s device copy "
         f"(the median of its iterations; their mean's interval is ±{fmt_pct(spread)}); flags: "
         "one process.")


# -- the largest batch ---------------------------------------------------------------------------
def maxbatch_rows(store):
    """The table's rows: per model, the latest ok search of each precision and the latest ok
    throughput record measured at its batch and setup."""
    searches = [m for m in store.results(kind="maxbatch") if m.ok]
    throughput = [r for r in store.results(kind="throughput") if r.ok]

    def pair(model, precision):
        m = [s for s in searches if (s.config.model, s.config.base.precision)
             == (model, precision)][-1]
        key = replace(m.config.base, batch_size=m.best_batch).key()
        t = [r for r in throughput if r.config.key() == key][-1]
        return m.id, t.id
    return tuple((label, pair(model, "bf16"), pair(model, "fp32"))
                 for model, label in MAXBATCH_LABELS)


def test_the_largest_batch(store, runs):
    rows = maxbatch_rows(store)
    for line in H.maxbatch_picked(MAXBATCH_CAPTION, rows)(store):
        if line:
            says(line)
    pairs = {(label.split()[0], precision): (store.get(s), store.get(t))
             for label, *sides in rows for precision, (s, t) in zip(("bf16", "fp32"), sides)}
    searches = [m for m, _ in pairs.values()]
    assert all(m.config.tolerance == 0.1 for m in searches)
    assert all(m.config.base.channels_last for m in searches if m.config.model != "gpt2")
    no_autotune = {key for key, (m, _) in pairs.items() if not m.config.base.autotune}
    cnns = {m for m, _ in MAXBATCH_LABELS} - {"vit_b_16", "gpt2"}
    assert no_autotune == {(m, "fp32") for m in cnns} and len(cnns) == 7
    says("the seven CNNs' fp32 searches with `--no-autotune` (†)")
    for m in searches:
        words = runs[m.run_id].command.split()
        assert {"--channels-last", "--resume"} <= set(words)
        assert (option(runs[m.run_id], "--tolerance"), option(runs[m.run_id], "--max-time")) == \
            ("0.1", "2")
        base = m.config.base
        assert (base.optimizer, base.mode, base.compile) == ("sgd", "train", None)
    says("`dlbench maxbatch -m MODEL --precision bf16|fp32 --channels-last --tolerance 0.1 "
         "--max-time 2 --resume` per model (SGD, train, eager)")
    corrected = [key for key, (m, _) in pairs.items()
                 if any(p.fits for p in m.probes if p.batch == m.first_oom_batch)]
    assert corrected == [("vgg16", "bf16"), ("densenet161", "bf16")]
    for model, precision in corrected:  # the search record before the correction stays
        both = [m for m in store.results(kind="maxbatch") if m.ok
                and (m.config.model, m.config.base.precision) == (model, precision)]
        assert len(both) == 2 and both[0].best_batch > both[1].best_batch
    says("so the next smaller batch that fitted was measured instead and the search record "
         "corrected (both records are in the store).")
    cores = {host(m)[0] for m in searches}
    assert cores == {16, 64, 128}
    says("The searches ran one per GPU on four- and eight-H200 hosts, then on one-H200 machines "
         "of the same environment key")

    # the first ResNet-50 search: a cuDNN error above a batch that trained
    (first,) = store.results(run_id="fa24d7be8741", kind="maxbatch")
    assert not first.ok and host(first) == (64, "3") and uuids(first) <= first_host(store)
    fit = max(p.batch for p in first.probes if p.fits)
    (err,) = [p for p in first.probes if p.outcome == "exception"]
    assert "CUDNN_STATUS_INTERNAL_ERROR" in err.error and fit < err.batch
    says(f"ResNet-50 bf16: the first search (run fa24d7be8741, GPU 3 of the first four-H200 "
         f"host) stopped at a cuDNN `CUDNN_STATUS_INTERNAL_ERROR` at batch {err.batch:,} where "
         f"{fit:,} had trained")

    # the boundary against the fastest smaller batch of the same setup
    every = [r for r in store.results(kind="throughput") if r.ok]

    def setup(c):
        return (c.model, c.precision, c.channels_last, c.mode, c.compile,
                getattr(c, "autotune", True), c.input_size)
    gains, boundary = {}, {}
    for model in ("resnet152", "inception_v4", "nasnet", "vit_b_16", "gpt2", "vgg16",
                  "inception_v3", "resnet50"):
        m, t = pairs[(model, "bf16")]
        smaller = [r for r in every if setup(r.config) == setup(t.config)
                   and r.config.batch_size < m.best_batch]
        best = max(smaller, key=rate)
        assert best.run_id == "eea04ab2c011" and best.stop_reason == "converged"
        gains[model], boundary[model] = rate(t) / rate(best) - 1, t
    steps = [H.record_flags(t) for t in boundary.values()]
    assert all(f[0] in ("time cap", "noisy (time cap)") and f[1].endswith(" of 20 steps")
               for f in steps)
    counts = [int(f[1].split()[0]) for f in steps]
    up = [m for m, g in gains.items() if g > 0]
    down = [m for m, g in gains.items() if g < 0]
    assert up == ["resnet152", "inception_v4", "nasnet", "vit_b_16", "gpt2"]
    r50 = boundary["resnet50"]
    base = store.get("fe07f5b0aeb4")
    assert base.config.batch_size == 1024 and "noisy (time cap)" in H.record_flags(r50)
    says(f"against the fastest smaller batch of the same setup (the default suite's, whose windows "
         f"converged; the boundary windows were all stopped by their time cap after "
         f"{min(counts)} to {max(counts)} of 20 steps), the boundary bought "
         + ", ".join(f"{NAMES[m]} {gains[m]:+.1%}" for m in up[:-1])
         + f" and {NAMES[up[-1]]} {gains[up[-1]]:+.1%}, but "
         + ", ".join(f"{NAMES[m]} ran {gains[m]:+.1%}" if i == 0 else
                     f"{NAMES[m]} {gains[m]:+.1%}" for i, m in enumerate(down[:-1]))
         + f" and {NAMES[down[-1]]} **{gains[down[-1]]:+.0%}** slower ({fmt_num(rate(r50))} img/s "
         f"at {r50.config.batch_size:,}, ±{hw(r50)}, `noisy (time cap)`, against "
         f"{fmt_num(rate(base))} at {base.config.batch_size:,}).")
    reserved = {m: boundary[m].memory["reserved_peak_bytes"] / 1e9 for m in boundary}
    (total,) = {r.memory["device_total_bytes"] for r in boundary.values()}
    slower, more = down, [m for m in up if reserved[m] > max(reserved[d] for d in down)]
    assert more == ["resnet152", "inception_v4", "vit_b_16"]
    says(f"Those three ran with {span([reserved[m] for m in slower], '.0f')} GB of the card's "
         f"{total / 1e9:.0f} GB reserved by the allocator; the batch-1,024 figure is the default "
         "suite's, on another H200 of the same environment key.")
    assert uuids(base) != uuids(r50)
    assert envmod.identity(base.env) == envmod.identity(r50.env)
    says(f"though ResNet-152, Inception v4 and ViT-B/16 reserved more "
         f"({span([reserved[m] for m in more], '.0f')} GB) and still ran faster at their "
         "boundary.")

    # GPT-2 with -b auto, and ViT-B/16 fp32 over batch sizes
    (auto,) = store.results(run_id="4e1c14d3f033", kind="throughput")
    assert auto.id == pairs[("gpt2", "bf16")][1].id
    assert H.record_flags(auto)[:2] == ["time cap", "10 of 20 steps"]
    says(f"`{command(runs['4e1c14d3f033'])}`: {fmt_num(rate(auto) * auto.units_per_sample)} "
         f"tok/s at {auto.config.batch_size} (run 4e1c14d3f033; `time cap`, 10 of 20 steps).")
    sweep = store.results(run_id="377117b20186", kind="throughput")
    ok = [r for r in sweep if r.ok]
    (oom,) = [r for r in sweep if not r.ok]
    assert oom.error_type == "oom" and oom.config.batch_size == 2048
    sf = [H.record_flags(r) for r in ok]
    assert all(f[0] == "time cap" and "throttled (power)" in f for f in sf)
    steps = [int(f[1].removesuffix(" of 20 steps")) for f in sf]
    says(f"`{command(runs['377117b20186'])}`: "
         + " / ".join(fmt_num(rate(r)) for r in ok) + " img/s at "
         + " / ".join(f"{r.config.batch_size:,}" for r in ok)
         + f", out of memory at {oom.config.batch_size:,} (run 377117b20186; each window `time "
         f"cap` after {min(steps)} to {max(steps)} of 20 steps, `throttled (power)`).")

    # fp32 against bf16
    def best(model, precision):
        return pairs[(model, precision)][0].best_batch
    share = [best(m, "fp32") / best(m, "bf16") for m, _ in MAXBATCH_LABELS if m != "gpt2"]
    slow = [rate(pairs[(m, "bf16")][1]) / rate(pairs[(m, "fp32")][1])
            for m, _ in MAXBATCH_LABELS if m not in ("gpt2", "vgg16")]
    r152 = [pairs[("resnet152", p)][1] for p in ("fp32", "bf16")]
    gpt = [pairs[("gpt2", p)][1] for p in ("bf16", "fp32")]
    says(f"the CNNs and ViT-B/16 fit about half the batch ({span(share)} of it; ResNet-50 "
         f"{best('resnet50', 'fp32'):,} against {best('resnet50', 'bf16'):,}), GPT-2 "
         f"{1 - best('gpt2', 'fp32') / best('gpt2', 'bf16'):.0%} less ({best('gpt2', 'fp32')} "
         f"against {best('gpt2', 'bf16')}); true fp32 is {span(slow, '.1f')}x slower at the "
         f"boundary for them, VGG-16 apart (ResNet-152 {fmt_num(rate(r152[0]))} against "
         f"{fmt_num(rate(r152[1]))} img/s), GPT-2 {rate(gpt[0]) / rate(gpt[1]):.1f}x.")

    # VGG-16 in fp32: the cliff
    search, vgg = pairs[("vgg16", "fp32")]
    batches = [p.batch for p in search.probes]
    assert batches == [512, 1024, 2048, 1536, 1792, 1920] and search.probes[-1].outcome == "oom"
    walls = {p.batch: p.wall_s for p in search.probes}
    before = [p.wall_s for p in search.probes[:batches.index(1792)]]  # up to 1,536
    assert H.record_flags(vgg) == ["time cap", "throttled (power)", "one process"]
    table = strategy_records(store)
    small = [table[("vgg16", "fp32", s, 1)] for s in ("ddp", "dp", "ps")]
    says(f"VGG-16 fp32: probes of {span(before, '.0f')} s up to batch 1,536, "
         f"{walls[1792]:.0f} s at 1,792, {walls[1920]:.0f} s at 1,920 (out of memory); measured at "
         f"1,792 it ran {fmt_num(rate(vgg))} img/s (`time cap`, `throttled (power)`), "
         f"{span([rate(r) / rate(vgg) for r in small], '.0f')} times below fp32 VGG-16's 1-GPU "
         f"figures at batch 256 in the strategy table above "
         f"({span([rate(r) for r in small], '.1f')} img/s).")
    cut = runs["c1619d6841bc"]
    (partial,) = store.results(run_id=cut.run_id, kind="maxbatch")
    assert cut.status == "interrupted" and not partial.ok
    assert [p.batch for p in partial.probes if p.fits] == [512, 1024, 1536, 1792]
    assert [p.batch for p in partial.probes if not p.fits] == [2048]
    says('Its search was cut once after "512, 1,024, 1,536 and 1,792 fit, 2,048 OOM" (run '
         f"c1619d6841bc); the resumed one finished it: `{command(runs[search.run_id])}` (run "
         f"{search.run_id}).")
    # the autotuned fp32 searches cut on the multi-GPU hosts
    cut_searches = [m for m in store.results(kind="maxbatch") if not m.ok
                    and m.config.base.precision == "fp32" and m.config.base.autotune
                    and host(m)[0] > 16]
    assert {m.error_type for m in cut_searches} == {"interrupted", "timeout"}
    (late,) = [m for m in cut_searches if m.error_type == "timeout"]
    ((batch, error),) = [(p.batch, p.error) for p in late.probes]
    assert late.config.model == "vgg16" and "ran past 300 s" in error
    says(f"or a probe past the then 300 s probe limit (VGG-16 at {batch}; where its step stood "
         "then was not recorded).")


def test_time_to_accuracy(store, runs, tmp_path):
    train = store.results(kind="train")
    for r in train:  # the first rules' rate: 0.05 x sqrt(global batch / 128), constant
        assert r.lr == pytest.approx(0.05 * math.sqrt(r.config.global_batch / 128))
    rate_at = {r.config.global_batch: r.lr for r in train}
    says(f"0.05 x sqrt(global batch / 128) held constant after its warm-up ({rate_at[512]:g} at "
         f"a global batch of 512, {rate_at[2048]:g} at 2,048)")
    # the recipe's records: one H100, then two H100s of a four-GPU host
    h100 = H.open_store(ROOT / "results", f"{H.H100}/time-to-accuracy-recipe", tmp_path)
    setups = convergence(h100.results(kind="train"))
    h100.close()
    assert {s.gpus for s in setups} == {1}
    assert all(s.converged == s.runs == 5 for s in setups)
    batches = sorted(s.global_batch for s in setups)
    says(f"one H100 converged 5 of 5 seeds at every global batch from {batches[0]} to "
         f"{batches[-1]:,}")
    four = H.open_store(ROOT / "results", f"{H.H100_4}/tta", tmp_path)
    (two,) = [s for s in convergence(four.results(kind="train")) if s.gpus == 2]
    four.close()
    assert two.converged == two.runs == 5
    says(f"at two H100s of a four-GPU host it converged 5 of 5 seeds at a global batch of "
         f"{two.global_batch:,}")

    # the runs, where they ran
    mlperf_runs = {"b2d9d8df1a64": (64, "2,3"), "657e0e614a26": (128, "4,5,6,7")}
    for run_id, where in mlperf_runs.items():
        assert {host(r) for r in store.results(run_id=run_id)} == {where}
    says("--max-epochs 15` (run b2d9d8df1a64, GPUs 2-3 of a four-H200 host), the same with "
         "`--gpus 4` (run 657e0e614a26, GPUs 4-7 of an eight-H200 host)")
    cmd = runs["b2d9d8df1a64"].command
    for part in ("--dataset fashion-mnist", "-m cnn10", "--target 0.90", "--gpus 1,2",
                 "--precision bf16", "-b 512", "--seeds 5", "--max-epochs 15"):
        assert part in cmd
    recs = [r for run in mlperf_runs for r in store.results(run_id=run, kind="train")]
    assert all(r.config.loader == "gpu" for r in recs)

    # the per-setup table
    def setup_row(gpus):
        rs = sorted((r for r in recs if r.config.gpus == gpus), key=lambda r: r.config.seed)
        score = olympic_mean([r.time_to_train_s if r.ok else None for r in rs])
        olympic = f"{score.mean_s:.2f} s" if score.valid else "invalid"
        passed = sum(r.compliance["passed"] for r in rs)
        img = statistics.median(r.train_samples_per_s() for r in rs)
        says(f"| {gpus} | " + " / ".join(f"{r.time_to_train_s:.2f}" if r.ok else "cap"
                                          for r in rs)
             + " | " + " / ".join(str(r.epochs_to_converge) if r.ok else "-" for r in rs)
             + f" | {olympic} | {score.failures} of {len(rs)} | {img:,.0f} | {passed} of "
               f"{len(rs)} |")
        return rs, img
    one, img1 = setup_row(1)
    setup_row(2)
    fours, _ = setup_row(4)
    failed = [r for r in recs if not r.ok]
    assert {r.error_type for r in failed} == {"not_converged"}
    assert all('"status": "aborted"' in r.mllog for r in failed)
    says('A capped run did not reach 0.90 within 15 epochs: its log says "aborted"')
    # today's rules: every log fails, by dlbench's checker and MLPerf's own
    use_mlperf = mlperf.available()
    checks = mlperf.recheck(ROOT / "results" / H.H200_4 / "dlbench.db.gz", use_mlperf=use_mlperf)
    assert len(checks) == len(train) and not any(c.today.passed for c in checks)
    for c in checks:
        reasons = " ".join(c.today.reasons)
        for key in ("opt_momentum", "opt_nesterov", "opt_learning_rate_schedule",
                    "opt_learning_rate_decay_epochs"):
            assert f"{key} appears 0 times" in reasons
        assert "is not the rules'" in reasons
        if use_mlperf:
            assert mlperf.mlperf_verdict(c.today.output) == "FAILED"
    says("their logs lack the recipe's momentum, Nesterov, schedule and decay lines and state a "
         "learning rate or warm-up other than the rules' at their global batch; MLPerf's own "
         "checker prints FAILED for each.")

    # 4 GPUs: global batch 2,048 at twice the 1-GPU rate
    assert {(r.config.global_batch, r.lr / one[0].lr) for r in fours} == {(2048, 2.0)}
    assert sum(not r.ok for r in fours) == 3
    says(f"At 4 GPUs the global batch is 2,048 (the batch per GPU kept) at a learning rate only "
         f"twice the 1-GPU one ({fours[0].lr:g} against {one[0].lr:g}), and three seeds in five "
         "did not converge")
    # the H100 beside it: the same command on one H100
    h100 = H.open_store(ROOT / "results", H.H100, tmp_path)
    seeds = h100.results(run_id="49d638dbbc76", kind="train")
    h100.close()
    same = {(r.config.model, r.config.dataset, r.config.batch_size, r.config.gpus,
             r.config.precision, r.config.max_epochs, r.config.target) for r in seeds + one}
    assert len(same) == 1 and len(seeds) == 5
    h100_img = statistics.median(r.train_samples_per_s() for r in seeds)
    says(f"The throughput beside it says the H200 is about {img1 / h100_img - 1:.0%} faster per "
         f"GPU than the H100 ({h100_img:,.0f} img/s, the same command on one H100: the H100 "
         "page's run 49d638dbbc76)")
    epochs = [r.epochs_to_converge for r in recs if r.ok]
    says(f"the epochs to converge vary from {min(epochs)} to {max(epochs)} with the seed")

    # the epoch table over batch sizes
    sweep = {(r.config.gpus, r.config.batch_size): r for run in ("b2273bd6259e", "0767ee2d3aed")
             for r in store.results(run_id=run, kind="train")}
    assert {k for k, r in sweep.items() if r.run_id == "b2273bd6259e"} == {
        (1, 128), (1, 256), (1, 1024), (1, 2048), (2, 128)}
    assert runs["b2273bd6259e"].status == "interrupted"
    for run_id, batches in (("b2273bd6259e", "128,256,1024,2048"),
                            ("0767ee2d3aed", "256,1024,2048")):
        assert f"-b {batches} --seeds 1 --max-epochs 20" in runs[run_id].command
    assert all(r.config.seed == 0 for r in sweep.values())
    says("`dlbench train ... -b 128,256,1024,2048 --seeds 1 --max-epochs 20` (one seed per batch "
         "size;")
    assert run_gpus(store, "b2273bd6259e") == run_gpus(store, "b2d9d8df1a64")
    assert {host(r) for r in store.results(run_id="0767ee2d3aed")} == {(128, "0,1")}
    for (gpus, batch), r in sorted(sweep.items()):
        ttt = f"{r.time_to_train_s:.2f}" if r.ok else "cap"
        says(f"| {gpus} | {batch} | {r.first_epoch_s:.2f} | {r.median_epoch_s:.2f} | "
             f"{r.epochs} | {r.final_accuracy:.4f} | {ttt} |")
    for gpus in (1, 2):  # batch 512: medians over the five seeds, the accuracy their mean
        rs = [r for r in recs if r.config.gpus == gpus]
        says(f"| {gpus} | 512 | {statistics.median(r.first_epoch_s for r in rs):.2f} | "
             f"{statistics.median(r.median_epoch_s for r in rs):.2f} | "
             f"{statistics.median(r.epochs for r in rs):.0f} | "
             f"{statistics.mean(r.final_accuracy for r in rs):.4f} | "
             f"{statistics.median(r.time_to_train_s for r in rs if r.ok):.2f} |")
    capped = [sweep[(2, 1024)], sweep[(2, 2048)]]
    assert not any(r.ok for r in capped) and sweep[(1, 2048)].ok
    assert [r.config.global_batch for r in capped] == [2048, 4096]
    says(f"at a global batch of 2,048 and more (learning rate "
         f"{' and '.join(f'{r.lr:.2g}' for r in capped)}) this CNN did not reach 0.90 in 20 "
         f"epochs at 2 GPUs ({' and '.join(f'{r.final_accuracy:.4f}' for r in capped)}), where "
         f"one GPU reached it at 2,048 in {sweep[(1, 2048)].epochs_to_converge}.")
