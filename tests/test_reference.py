"""Reference data: every spec row sourced, published tables complete, the ms-per-batch fit
reproduced."""

import json
import math
import re

import pytest

from dlbench import reference as ref
from dlbench.measure.regression import fit_through_origin, ms_per_batch_fit
from dlbench.measure.stats import t_quantile

REQUIRED = {"t4", "v100-pcie", "titan-v", "gtx-1080-ti", "rtx-2080-ti", "rtx-3060", "quadro-rtx-8000",
            "mx250", "titan-x-maxwell", "a100-sxm-80gb", "h100-sxm", "h100-pcie", "h200", "l4",
            "l40s", "rtx-4090", "b200", "mi300x"}


def test_every_spec_row_carries_a_source_and_sane_figures():
    specs = ref.gpu_specs()
    assert REQUIRED <= {s.id for s in specs}
    assert len({s.id for s in specs}) == len(specs)
    for s in specs:
        assert s.source and ("http" in s.source), s.id
        assert s.fp32_tflops and 0.5 < s.fp32_tflops < 200, s.id
        assert s.memory_bandwidth_gbs and s.memory_gb and s.tdp_w, s.id
        for p in ("tf32", "fp16", "bf16", "fp8"):
            v = s.tflops(p)
            assert v is None or v >= s.fp32_tflops, (s.id, p)   # tensor peaks above FP32
        if any(s.tflops(p) is None for p in ("fp16",)):
            assert s.note, f"{s.id}: a null figure needs a note"


def test_dense_not_sparse_for_hopper():
    h100 = ref.spec_by_id("h100-sxm")
    assert h100.bf16_tflops == pytest.approx(1979 / 2, rel=1e-3)
    assert h100.tf32_tflops == pytest.approx(989 / 2, rel=1e-2)


def test_match_gpu_by_torch_name():
    assert ref.match_gpu("NVIDIA H100 80GB HBM3").id == "h100-sxm"
    assert ref.match_gpu("NVIDIA H100 PCIe").id == "h100-pcie"
    assert ref.match_gpu("NVIDIA H200").id == "h200"
    assert ref.match_gpu("Tesla V100-PCIE-16GB").id == "v100-pcie"
    assert ref.match_gpu("NVIDIA GeForce RTX 3060").id == "rtx-3060"
    assert ref.match_gpu("NVIDIA GeForce RTX 3060 Ti") is None
    assert ref.match_gpu("NVIDIA H100 NVL") is None
    assert ref.match_gpu(None) is None


def test_published_tables_are_complete_and_sourced():
    rows = ref.reference_results()
    srcs = ref.sources()
    assert {r.source for r in rows} == {"tf-cnn-benchmarks", "ms-per-batch",
                                        "cifar10-frameworks"} <= set(srcs)
    s0 = ref.select(source="tf-cnn-benchmarks")
    assert len(s0) == 3 * 6 * 3      # three tables, six models, 1/2/4 GPUs
    assert ref.select(s0, model="resnet50", precision="fp16", gpus=4, setup="no NVLink")[0].value == 4066.72
    s2 = ref.select(source="ms-per-batch")
    assert len(s2) == 7 * 6 + 2      # seven full rows, MX250 vgg16 only
    assert ref.select(s2, device="MX250", mode="train")[0].value == 10344.4
    s3 = ref.select(source="cifar10-frameworks", metric="median_epoch_s")
    assert len(s3) == 5 + 2 + 5 + 3
    assert ref.select(s3, model="WRN-28-10", gpus=2, batch_size=512)[0].value == 56.49
    for r in rows:
        assert r.gpu_id is None or ref.spec_by_id(r.gpu_id)


def test_sources_say_what_each_study_is_not_its_number_in_the_project():
    """'dlbench gpus --source' and '--specs' print these: a user never saw the articles' numbers."""
    texts = [v for src in ref.sources().values() for v in src.values()]
    texts += [s.source for s in ref.gpu_specs()]
    assert texts and not [t for t in texts if re.search(r"seed ?\d{3}", t, re.IGNORECASE)]


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_ms_per_batch_vgg16_fit_lands_on_the_article(mode):
    fit = ms_per_batch_fit("vgg16", mode)
    assert fit.n == 6
    assert fit.r2 == pytest.approx(0.984, abs=0.002)     # the article: R^2 = 0.984
    assert 0.6 < fit.r2_centered < fit.r2


def test_origin_fit_on_known_numbers():
    fit = fit_through_origin([1.0, 2.0, 3.0], [2.0, 4.0, 6.5])
    assert fit.slope == pytest.approx((2 + 8 + 19.5) / 14)
    ssr = sum((y - fit.slope * x) ** 2 for x, y in [(1, 2), (2, 4), (3, 6.5)])
    assert fit.r2 == pytest.approx(1 - ssr / (4 + 16 + 42.25))
    y, lo, hi = fit.predict(2.0)
    assert y == pytest.approx(2 * fit.slope) and lo < y < hi
    half = t_quantile(0.975, 2) * math.sqrt(ssr / 2) * math.sqrt(1 + 4 / 14)
    assert hi - y == pytest.approx(half)


def test_gpus_cli_prints_fit_and_predictions(tmp_path, capsys):
    from dlbench.cli import main
    assert main(["gpus", "--db", str(tmp_path / "none.db"), "--json", "--predict", "h100-sxm"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["r2"] == pytest.approx(0.984, abs=0.002) and len(out["points"]) == 6
    (p,) = out["predictions"]
    assert p["gpu"] == "h100-sxm" and p["low"] < p["batches_per_s"] < p["high"]


def _store(db, env, *recs):
    from dlbench.env import env_key
    from dlbench.store import Store
    with Store(db) as s:
        s.start_run("r1", "dlbench test", env, env_key(env), "CPU")
        for r in recs:
            s.add(r, env_key(env))
        s.finish_run("r1", "done")


def test_todays_figures_cite_a_source_and_state_their_conditions():
    from dlbench.reference import today
    rows = today.published_figures()
    assert {"llama-3.1-8b", "matmul"} <= set(today.models())
    for r in rows:
        assert r.kind in today.KINDS and r.value > 0 and r.conditions and r.says
        assert r.sources and all(s.startswith("https://") for s in r.sources), r
        assert r.gpu_id is None or ref.spec_by_id(r.gpu_id)
    # as the sources print them: torchtitan's Table 1, mamf-finder's H100 SXM bf16 row
    tt = [r for r in rows if r.model == "llama-3.1-8b" and r.gpus == 8]
    assert [r.value for r in tt] == [5762, 6667, 8532]
    assert all(r.gpu_id is None for r in tt)   # 96 GB HBM2e at 500 W: not the spec table's part
    (h100,) = [r for r in rows if r.gpu_id == "h100-sxm" and r.precision == "bf16"]
    assert h100.value == 794.5 and "2048x2048x13312" in h100.conditions
    # what was looked for and not found is said, not estimated
    assert any("llm.c" in x for x in today.left_out())
    assert any("MLPerf" in x for x in today.left_out())


def test_gpus_places_a_model_without_a_fit_beside_published_rows(tmp_path, capsys):
    """resnet50 and llama-3.1-8b have no ms-per-batch points: placed, not exit 2; a CPU
    record is shown with a note, and a model with no published row says so."""
    from dlbench.cli import main
    from dlbench.records import ThroughputConfig, ThroughputRecord
    env = {"accelerator": "cpu", "cpu_model": "Test CPU", "gpus": []}
    rec = ThroughputRecord(config=ThroughputConfig(model="resnet50", batch_size=8), env=env,
                           step_times_s=(0.5,) * 30, samples_per_step=8, unit="images",
                           run_id="r1")
    db = tmp_path / "r.db"
    _store(db, env, rec)
    assert main(["gpus", "-m", "resnet50", "--db", str(db), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["published"] and all(p["per_gpu"] > 0 for p in out["published"])
    (own,) = out["own"]
    assert own["per_gpu"] == pytest.approx(16.0) and own["note"].startswith("CPU")
    assert main(["gpus", "-m", "llama-3.1-8b", "--db", str(db)]) == 0
    assert "5,762" in capsys.readouterr().out
    assert main(["gpus", "-m", "gpt2", "--db", str(db)]) == 2     # nothing to place
    assert "no published per-GPU figure of gpt2" in capsys.readouterr().err


def test_gpus_fit_says_why_a_record_is_not_a_point_and_clips_negative_bounds(tmp_path, capsys):
    from dlbench.cli import main
    from dlbench.records import ThroughputConfig, ThroughputRecord
    from dlbench.workloads.gpu_fit import fit_gpus
    env = {"accelerator": "cpu", "cpu_model": "Test CPU", "gpus": []}
    rec = ThroughputRecord(config=ThroughputConfig(model="vgg16", batch_size=16, mode="eval",
                                                   precision="fp32"),
                           env=env, step_times_s=(0.5,) * 30, samples_per_step=16,
                           run_id="r1")
    db = tmp_path / "v.db"
    _store(db, env, rec)
    g = fit_gpus("vgg16", "eval", db=str(db), predict=["mx250", "h100-sxm"])
    assert not g.own and len(g.skipped) == 1 and "CPU" in g.skipped[0]
    assert all(lo >= 0 for _, _, lo, _ in g.predictions)
    raw = {s.id: g.fit.predict(s.tflops("fp32"))[1] for s, *_ in g.predictions}
    assert set(g.clipped) == {i for i, lo in raw.items() if lo < 0}
    assert main(["gpus", "--db", str(db), "--predict", "mx250"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "not fitted, not a point" in text and "CPU" in text
