"""docs/articles.md against its sources: the ids against dlbench.records.compat, the published
figures of the three shipped studies against src/dlbench/reference/results.json (read through
dlbench.reference: the ResNet-50 scaling, the NVLink factors, the RTX 3060 milliseconds, the fit
on TFLOPS, the studies' setups), the MLPerf v0.5 study against the spec table that cites it, the
slow-networks study against the what-if model's constants, and the model notes (ResNet v1.5's
extra FLOPs, the two NASNets) against the registry and a FLOP count, and the suites the page
runs against dlbench.suites. The page's "a GPU log every 5 s" is read by
tests/test_throughput_telemetry_docs.py, and "PyTorch fit batch 2048" by
tests/test_memory_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

from fakes.pages import assert_says, resnet50_forward_flops

from dlbench.measure.flops import params_count
from dlbench.measure.regression import ms_per_batch_fit
from dlbench.models import get_model
from dlbench.records import compat
from dlbench.reference import select, sources, spec_by_id
from dlbench.report.network import ps_cluster_table
from dlbench.suites import DeviceFacts, suite_for
from dlbench.whatif import check

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "articles.md").read_text()
TF_CNN = "tf-cnn-benchmarks"
CNNS = ("resnet50", "inception_v3", "nasnet", "vgg16", "resnet152", "inception_v4")


def says(text: str) -> None:
    assert_says(PAGE, text)


def year(text: str) -> int:
    """The last year a text names (a title ends with its year; "2080 Ti" comes before)."""
    return int(re.findall(r"\b(20\d\d)\b", text)[-1])


# -- the table ------------------------------------------------------------------------------------
def test_the_ids_and_the_shipped_sources():
    ids = list(compat.ARTICLES.values())
    assert ids == [TF_CNN, "mlperf-v0.5", "ms-per-batch", "cifar10-frameworks", "slow-networks"]
    rows = re.findall(r"^\| \*\*.*?\*\* \| `([\w.-]+)` \|", PAGE, re.M)
    assert rows == ids
    assert set(sources()) == {TF_CNN, "ms-per-batch", "cifar10-frameworks"}
    says("`dlbench gpus --source` takes those of the three whose tables it ships")
    assert "Until 2026-11" in compat.__doc__
    says("Stores and scripts written before 2026-11 name the articles")


def test_the_titles_and_years():
    titles = {k: s["title"] for k, s in sources().items()}
    assert titles[TF_CNN] == "tf_cnn_benchmarks on 4x Quadro RTX 8000, NVLink on vs off (2020)"
    assert spec_by_id("quadro-rtx-8000").memory_gb == 48
    says("| tf_cnn_benchmarks on 4x Quadro RTX 8000 48 GB, NVLink on vs off (2020) |")
    assert titles["ms-per-batch"] == ("RTX 3060 (eGPU) per-model milliseconds, roofline, "
                                      "regression on TFLOPS (2022)")
    says("| RTX 3060 (eGPU): milliseconds per batch of three CNNs, the roofline, a regression on "
         "TFLOPS (2022) |")
    says(f"| {titles['cifar10-frameworks']} |")
    # the MLPerf v0.5 study: cited by the spec table for both its GPUs
    for gpu in ("t4", "v100-pcie"):
        assert "Dell's MLPerf v0.5 study on T4 vs V100, 2019" in spec_by_id(gpu).source
    says("| MLPerf Training v0.5 on T4 vs V100-PCIe (Dell, 2019) |")
    cluster = ps_cluster_table.__doc__
    assert "TensorFlow 0.12, CIFAR-10, 5 servers of 4 TITAN X over\n    1 GbE, 10 GbE and " \
           "InfiniBand FDR" in cluster and "The 2017 parameter-server cluster" in cluster
    says("| distributed TensorFlow CIFAR-10 over 1 GbE, 10 GbE and InfiniBand, 5 servers x 4 "
         "TITAN X (2017) |")
    years = [year(t) for t in titles.values()] + [year(spec_by_id("t4").source), year(cluster)]
    assert sorted(years) == [2017, 2019, 2019, 2020, 2022]
    says(f"five published benchmark articles ({min(years)}–{max(years)})")


# -- the tf_cnn_benchmarks study ------------------------------------------------------------------
def test_the_tf_cnn_benchmarks_figures():
    rows = select(source=TF_CNN)
    assert list(dict.fromkeys(r.model for r in rows)) == list(CNNS)
    assert {r.gpus for r in rows} == {1, 2, 4} and {r.precision for r in rows} == {"fp16", "fp32"}
    says("ran ResNet-50, Inception v3, NASNet, VGG-16, ResNet-152 and Inception v4 on 1, 2 and 4 "
         "Quadro RTX 8000")
    setup = sources()[TF_CNN]["setup"]
    assert "synthetic data" in setup and "NCCL all-reduce" in setup and "XLA" in setup
    plain = {r.gpus: r.value for r in select(source=TF_CNN, model="resnet50", precision="fp16",
                                             setup="no NVLink")}
    says(f"(ResNet-50 fp16: {plain[1]:,.0f} / {plain[2]:,.0f} ({plain[2] / plain[1]:.2f}) / "
         f"{plain[4]:,.0f} ({plain[4] / plain[1]:.2f})), then again with NVLink bridges.")
    value = {(r.model, r.precision, r.gpus, r.setup): r.value for r in rows}
    bridged = [k for k in value if k[3] == "NVLink bridges"]
    assert {p for _, p, _, _ in bridged} == {"fp16"}
    factors = [value[k] / value[(*k[:3], "no NVLink")] for k in bridged if k[2] in (2, 4)]
    says(f"(the bridges changed images/s by factors of {min(factors):.2f}–{max(factors):.2f} "
         "at 2 and 4 GPUs, fp16)")


def test_the_model_notes():
    more = resnet50_forward_flops(False) / resnet50_forward_flops(True) - 1
    says(f"(stride on the 3x3 convolution: about {more:.0%} more FLOPs than the v1 the article "
         "ran)")
    nasnet = get_model("nasnet")
    assert "NASNet-A mobile at 224 px (5.3M params" in nasnet.notes
    says(f"the article's \"nasnet\" was NASNet-A *mobile* at 224 px (5.3M parameters), dlbench's "
         f"`nasnet` is NASNet-A *large* at {nasnet.input_size} px "
         f"({params_count(nasnet) / 1e6:.1f}M)")
    [note] = {r.note for r in select(source=TF_CNN, model="nasnet")}
    assert "NASNet-A mobile at 224 px" in note


# -- the ms-per-batch article ---------------------------------------------------------------------
def test_the_ms_per_batch_figures():
    rows = select(source="ms-per-batch")
    assert {r.batch_size for r in rows} == {16}
    assert "ms per batch of 16 at 224x224" in sources()["ms-per-batch"]["setup"]
    says("timed VGG-16, ResNet-152 and DenseNet-161 at batch 16, 224x224")
    assert {r.model for r in rows} == {"vgg16", "resnet152", "densenet161"}
    assert {r.precision for r in rows} == {"fp32", "fp16"}
    assert {"MX250", "V100"} <= {r.device for r in rows}
    says("fp32 and fp16, on GPUs from an MX250 to a V100")
    got = {r.mode: r.value for r in select(source="ms-per-batch", gpu_id="rtx-3060",
                                           model="vgg16", precision="fp32")}
    says(f"(RTX 3060 fp32: VGG-16 {got['eval']} / {got['train']} ms)")
    fit = ms_per_batch_fit("vgg16", "eval")
    assert f"{ms_per_batch_fit('vgg16', 'train').r2:.3f}" == f"{fit.r2:.3f}"
    says(f"R^2 = {fit.r2:.3f} for VGG-16")


# -- the CIFAR-10 frameworks study ----------------------------------------------------------------
def test_the_cifar10_frameworks_setup():
    rows = select(source="cifar10-frameworks")
    assert {r.model for r in rows} == {"10-layer CNN", "WRN-28-10"}
    says("A 10-layer CNN and Wide ResNet 28-10 on CIFAR-10")
    assert {r.gpus for r in rows} == {1, 2} and {r.device for r in rows} == {"RTX 2080 Ti"}
    batches = sorted({r.batch_size for r in rows})
    says(f"on 1 and 2 RTX 2080 Ti (Keras `multi_gpu_model`, PyTorch `nn.DataParallel`), batch "
         f"{batches[0]} to {batches[-1]}")
    assert "PyTorch (nn.DataParallel)" in {r.framework for r in rows}
    assert {r.metric for r in rows} == {"first_epoch_s", "median_epoch_s", "total_train_s",
                                        "test_accuracy"}
    says("It reported the first epoch's time, the median epoch time from the second, the total "
         "time and the test accuracy")


# -- the slow-networks study ----------------------------------------------------------------------
def test_the_slow_networks_figures():
    assert check.PS_CLUSTER_1GBE_STEP_S * 100_000 / 3600 == 23
    assert check.PS_CLUSTER_1GBE_OVER_IB == 5.0 and check.PS_CLUSTER_BUSIEST_BPS == 2.5e9
    [observed] = ps_cluster_table([]).notes
    assert "23 h per 100,000 iterations on 1 GbE, over 5x the InfiniBand time" in observed
    says("Five servers of four TITAN X (Maxwell), joined by 1 GbE, 10 GbE and InfiniBand FDR")
    says("100,000 iterations per GPU")
    says(f"on 1 GbE synchronisation dominated ({check.PS_CLUSTER_1GBE_STEP_S * 100_000 / 3600:.0f}"
         f" h, over {check.PS_CLUSTER_1GBE_OVER_IB:.0f}x the InfiniBand time); the server "
         f"hosting the busiest parameter servers carried about "
         f"{check.PS_CLUSTER_BUSIEST_BPS / 1e9} Gbit/s")


# -- the suites that reproduce the studies' single-GPU tables -------------------------------------
def test_the_suites_the_page_runs():
    gpu = DeviceFacts(cuda=True, bf16=True)
    _, classic = suite_for("classic-cnn", gpu)
    assert {c.model for c in classic} == set(CNNS)
    assert {(c.precision, c.compile is not None) for c in classic} == {
        (p, compiled) for p in ("fp16", "fp32") for compiled in (False, True)}
    says("dlbench run --suite classic-cnn # the 1-GPU column: six CNNs, fp16 and fp32, eager and "
         "compiled")
    _, ms = suite_for("ms-per-batch", gpu)
    assert [c.model for c in ms][::4] == ["vgg16", "resnet152", "densenet161"]
    assert {(c.batch_size, c.method) for c in ms} == {(16, "fwd-bwd")}
    assert {(c.precision, c.mode) for c in ms} == {
        (p, m) for p in ("fp32", "fp16") for m in ("eval", "train")}
    says("dlbench run --suite ms-per-batch # vgg16/resnet152/densenet161, batch 16, fp32/fp16, "
         "eval/train, ms per batch")
