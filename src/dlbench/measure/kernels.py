"""Where a step's time goes: a few steps under torch.profiler, after the measured window.

``--profile N`` runs N more steps once the window is closed, so the profiler's own cost never
enters a figure. On a GPU it records every CUDA kernel (kernels replayed from a CUDA graph
included) with its device time; on the CPU, every operator's self time. The record keeps the
raw list, one ``(name, calls, seconds)`` per distinct kernel over the N steps, and the
categories below are applied when it is shown, so a better rule re-reads old records.

The categories answer the tuning question "is it the convolutions, the kernels Inductor
generated around them, the optimizer, or the gaps between kernels?": the sum of kernel time
per step against the window's median step time is how busy the GPU was.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

# (category, test on the lower-cased kernel name), first match wins. The names are those the
# CUDA libraries give their kernels: cuDNN's convolutions ("sm90_xmma_fprop_implicit_gemm",
# "..._dgrad_...", "..._wgrad_..."), cuBLAS's GEMMs ("nvjet_...", "sm90_xmma_gemm_...",
# "cutlass_..."), PyTorch's multi-tensor optimizer and GradScaler kernels
# ("multi_tensor_apply_kernel"), Inductor's generated kernels ("triton_poi_/red_/per_/tem_").
CATEGORIES: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("communication (NCCL)", lambda n: "nccl" in n),
    ("memory copy/set", lambda n: n.startswith(("memcpy", "memset"))),
    ("convolution (Inductor template)", lambda n: n.startswith("triton_tem") and "conv" in n),
    ("GEMM (Inductor template)", lambda n: n.startswith("triton_tem")),
    ("reduction (Inductor)", lambda n: n.startswith(("triton_red", "triton_per"))),
    ("pointwise (Inductor)", lambda n: n.startswith("triton")),
    ("optimizer, grad scaling (multi-tensor)",
     lambda n: any(k in n for k in ("multi_tensor", "foreach", "fused_sgd", "fused_adam",
                                    "optimizer."))),
    # cuDNN's attention runs helper kernels of its fusion engine beside the flash kernels.
    ("attention", lambda n: any(k in n for k in ("flash", "fmha", "attention", "sdpa",
                                                 "cudnn::fusion", "unpack_cudnn"))),
    ("batch norm", lambda n: any(k in n for k in ("batch_norm", "batchnorm", "bn_fw", "bn_bw"))),
    ("convolution", lambda n: any(k in n for k in ("conv", "fprop", "dgrad", "wgrad",
                                                   "implicit_gemm", "cudnn"))),
    ("GEMM", lambda n: any(k in n for k in ("gemm", "nvjet", "cublas", "cutlass", "matmul",
                                            "aten::mm", "aten::addmm", "aten::bmm"))),
    ("elementwise, reduction (PyTorch)",
     lambda n: any(k in n for k in ("elementwise", "reduce_kernel", "at::native", "aten::"))),
)
OTHER = "other"
GPU_ACTIVITY = "cuda kernels"
# Ranges that PyTorch's own record_function annotations leave on the GPU's timeline: they span
# kernels listed on their own, so counting them would count those kernels twice. Profiles taken
# before they were filtered out at the source still hold them.
GPU_ANNOTATIONS = ("Optimizer.", "ProfilerStep#")
NAME_CHARS = 240  # template-heavy kernel names run to kilobytes; the start tells them apart


def category(name: str) -> str:
    low = name.lower()
    for cat, test in CATEGORIES:
        if test(low):
            return cat
    return OTHER


def profile_steps(step: Callable[[], Any], n: int, device: torch.device) -> dict[str, Any]:
    """Run ``step`` n times under torch.profiler; the raw kernel list for the record."""
    from torch.profiler import ProfilerActivity, profile  # loads Kineto: only when profiled

    on_gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        for _ in range(n):
            step()
        if on_gpu:
            torch.cuda.synchronize(device)
    kind = torch.autograd.DeviceType.CUDA if on_gpu else torch.autograd.DeviceType.CPU
    rows = []
    for e in prof.key_averages():
        if e.device_type != kind or (on_gpu and getattr(e, "is_user_annotation", False)):
            continue
        us = (getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
              if on_gpu else e.self_cpu_time_total)
        if us > 0:
            rows.append((e.key[:NAME_CHARS], int(e.count), us / 1e6))
    rows.sort(key=lambda r: -r[2])
    return {"steps": n, "activity": GPU_ACTIVITY if on_gpu else "cpu operators (self time)",
            "kernels": rows}


def summarise(profile: dict[str, Any], step_s: float | None = None,
              top: int = 8) -> dict[str, Any]:
    """Per-step times by category and the top kernels; with ``step_s`` (the window's median
    step), the share of the step the GPU spent in kernels (None for a CPU profile: operators'
    self times there include the profiler's own cost per operator)."""
    n = max(1, int(profile.get("steps") or 1))
    kernels: Sequence = [k for k in profile.get("kernels") or ()
                         if not (profile.get("activity") == GPU_ACTIVITY
                                 and k[0].startswith(GPU_ANNOTATIONS))]
    total = sum(k[2] for k in kernels) / n
    by_cat: dict[str, list[float]] = {}
    for name, _calls, secs in kernels:
        acc = by_cat.setdefault(category(name), [0.0, 0])
        acc[0] += secs / n
        acc[1] += 1
    cats = sorted(((c, t, int(k)) for c, (t, k) in by_cat.items()), key=lambda x: -x[1])
    return {
        "steps": n, "activity": profile.get("activity"), "per_step_s": total,
        "busy": (total / step_s) if step_s and profile.get("activity") == GPU_ACTIVITY else None,
        "categories": [{"category": c, "per_step_s": t, "share": t / total if total else 0.0,
                        "distinct": k} for c, t, k in cats],
        "top": [{"name": name, "category": category(name), "calls_per_step": calls / n,
                 "per_step_s": secs / n, "share": secs / n / total if total else 0.0}
                for name, calls, secs in list(kernels)[:top]],
    }
