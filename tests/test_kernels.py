"""``--profile``: kernel categories, the per-step arithmetic, the record and its tables."""

import json

import pytest
from conftest import FAST_STOP

from dlbench.config import ConfigError
from dlbench.measure.kernels import GPU_ACTIVITY, OTHER, category, summarise
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.report.kernel_tables import kernel_tables
from dlbench.report.tables import fmt_pct, tables_for
from dlbench.store import Store
from dlbench.workloads import throughput


# Kernel names as the H100's libraries and Inductor name them (cut), and CPU operators.
@pytest.mark.parametrize("name, expected", [
    ("sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64",
     "convolution"),
    ("sm90_xmma_dgrad_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc", "convolution"),
    ("void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 512, true, 1>", "batch norm"),
    ("nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_TNN", "GEMM"),
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "GEMM"),
    ("triton_red_fused__native_batch_norm_legit_functional_add_0", "reduction (Inductor)"),
    ("triton_per_fused_native_batch_norm_backward_12", "reduction (Inductor)"),
    ("triton_poi_fused_add_relu_threshold_backward_7", "pointwise (Inductor)"),
    ("triton_tem_fused_convolution_3", "convolution (Inductor template)"),
    ("triton_tem_fused_mm_1", "GEMM (Inductor template)"),
    ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedSgdMathFunctor>",
     "optimizer, grad scaling (multi-tensor)"),
    ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>", "attention"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26_64x64x64", "attention"),
    ("void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*)", "attention"),
    ("void nhwcAddPaddingKernel<__half, __half, float, true, (cudnnKernelDataType_t)0>(int)",
     "convolution"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>", "convolution"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
     "elementwise, reduction (PyTorch)"),
    ("Memcpy HtoD (Pageable -> Device)", "memory copy/set"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "communication (NCCL)"),
    ("aten::mkldnn_convolution", "convolution"),
    ("aten::native_batch_norm_backward", "batch norm"),
    ("aten::addmm", "GEMM"),
    ("Optimizer.step#SGD.step", "optimizer, grad scaling (multi-tensor)"),
    ("aten::add_", "elementwise, reduction (PyTorch)"),
    ("some_vendor_kernel", OTHER),
])
def test_kernel_names_fall_in_their_category(name, expected):
    assert category(name) == expected


def recorded(activity=GPU_ACTIVITY):
    # Four steps: 8 ms of convolution, 2 of Inductor reductions, 1 of optimizer per step.
    return {"steps": 4, "activity": activity, "kernels": [
        ["sm90_xmma_fprop_implicit_gemm_a", 212, 0.020],
        ["sm90_xmma_dgrad_implicit_gemm_b", 212, 0.012],
        ["triton_red_fused_native_batch_norm_0", 400, 0.008],
        ["multi_tensor_apply_kernel<FusedSgdMathFunctor>", 4, 0.004]]}


def test_summary_is_per_step_and_shares_sum_to_one():
    s = summarise(recorded(), step_s=0.0125, top=2)
    assert s["per_step_s"] == pytest.approx(0.011)
    assert [c["category"] for c in s["categories"]] == [
        "convolution", "reduction (Inductor)", "optimizer, grad scaling (multi-tensor)"]
    conv = s["categories"][0]
    assert conv["per_step_s"] == pytest.approx(0.008) and conv["distinct"] == 2
    assert sum(c["share"] for c in s["categories"]) == pytest.approx(1.0)
    assert s["busy"] == pytest.approx(0.011 / 0.0125)
    assert [k["calls_per_step"] for k in s["top"]] == [53, 53]
    assert s["top"][0]["per_step_s"] == pytest.approx(0.005)


def test_gpu_annotation_ranges_are_not_counted_as_kernels():
    gpu = recorded()
    gpu["kernels"] = gpu["kernels"] + [["Optimizer.step#SGD.step", 4, 0.006]]
    assert summarise(gpu)["per_step_s"] == pytest.approx(0.011)
    cpu = {**gpu, "activity": "cpu operators (self time)"}  # on the CPU it is host time: kept
    assert summarise(cpu)["per_step_s"] == pytest.approx(0.011 + 0.0015)


def test_busy_is_left_out_for_a_cpu_profile():
    assert summarise(recorded("cpu operators (self time)"), step_s=0.01)["busy"] is None
    assert summarise({"steps": 2, "kernels": []})["per_step_s"] == 0.0


def cfg(**kw) -> ThroughputConfig:
    base = dict(model="tiny_cnn", batch_size=8, device="cpu", warmup_steps=1, warmup_seconds=0.0,
                stop=FAST_STOP)
    return ThroughputConfig(**{**base, **kw})


def test_profile_runs_after_the_window_and_is_no_part_of_the_identity(cpu_env, tmp_path):
    assert cfg(profile_steps=3).key() == cfg().key()
    with pytest.raises(ConfigError, match="^profile_steps must be >= 0"):
        cfg(profile_steps=-1)
    rec = throughput.measure(cfg(profile_steps=3), cpu_env)
    assert rec.ok and rec.profile["steps"] == 3
    names = [k[0] for k in rec.profile["kernels"]]
    assert any(category(n) == "convolution" for n in names)
    # Every profiled operator ran a whole number of times in each of the 3 steps or in setup.
    assert all(k[2] > 0 and k[1] >= 1 for k in rec.profile["kernels"])
    assert throughput.measure(cfg(), cpu_env).profile is None
    with Store(tmp_path / "k.db") as store:  # JSON turns the tuples into lists: still read
        store.add(rec)
        back = store.results()[0]
    assert back.profile["kernels"][0] == list(rec.profile["kernels"][0])
    titles = [t.title for t in tables_for([back], "cpu")]
    assert any(t.startswith("Where the time went") for t in titles)


def test_tables_show_categories_top_kernels_and_the_busy_share(cpu_env):
    base = throughput.measure(cfg(), cpu_env)
    step = base.summary().median_s
    rec = ThroughputRecord.from_dict({**base.to_dict(), "profile": recorded()})
    cats, top = kernel_tables([rec], top=3)
    assert cats.rows[0][:3] == ("convolution", "8.000", "72.7%")
    assert f"ran kernels {fmt_pct(0.011 / step)} of it" in " ".join(cats.notes)
    assert [r[0] for r in top.rows] == ["sm90_xmma_fprop_implicit_gemm_a",
                                        "sm90_xmma_dgrad_implicit_gemm_b",
                                        "triton_red_fused_native_batch_norm_0"]
    assert kernel_tables([base]) == []
    long = {**recorded(), "kernels": [["k|" + "x" * 300, 4, 0.01]]}
    cut = ThroughputRecord.from_dict({**base.to_dict(), "profile": long})
    row = kernel_tables([cut])[1].rows[0]
    assert len(row[0]) == 72 and "|" not in row[0]
    json.dumps(rec.to_dict())  # the record stays JSON
