"""The CUDA paths, run for real on a GPU (skipped without one)."""

import math
import time

import pytest
import torch
from conftest import FAST_STOP

from dlbench.measure.timer import CudaEventTimer
from dlbench.records.throughput import ThroughputConfig
from dlbench.workloads import throughput

pytestmark = pytest.mark.gpu


def test_event_timer_matches_host_clock_around_a_sync():
    timer = CudaEventTimer(torch.device("cuda"))
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    t = time.perf_counter()
    timer.start()
    for _ in range(20):
        a = a @ a / 64
        timer.lap()
    times = timer.finish()
    host = time.perf_counter() - t
    assert len(times) == 20 and all(x > 0 for x in times)
    assert sum(times) == pytest.approx(host, rel=0.1)


def test_ready_never_blocks_and_lags_issued_steps():
    timer = CudaEventTimer(torch.device("cuda"))
    timer.start()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU spin: the event after it is not reached yet
    timer.lap()
    t = time.perf_counter()
    early = list(timer.ready())
    assert time.perf_counter() - t < 0.05 and early == []
    assert len(timer.finish()) == 1


def test_throttle_bounds_the_unfinished_steps_and_keeps_every_time():
    timer = CudaEventTimer(torch.device("cuda"))
    timer.start()
    for _ in range(6):
        torch.cuda._sleep(50_000_000)  # a few tens of ms of GPU spin per "step"
        timer.lap()
        timer.throttle(2)
        assert len(timer._events) - 1 - len(timer.ready()) <= 2  # never more queued than that
    times = timer.finish()
    assert len(times) == 6 and all(t > 0 for t in times)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "fp16", "bf16"])
def test_measure_on_gpu(precision):
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=32, precision=precision, device="cuda",
                           channels_last=True, warmup_steps=3, warmup_seconds=0.0, stop=FAST_STOP)
    rec = throughput.measure(cfg, {})
    assert rec.ok and rec.summary().throughput > 0
    assert rec.memory["allocated_peak_bytes"] > 0
    assert rec.memory["device_total_bytes"] > rec.memory["reserved_peak_bytes"]
    assert rec.summary().total_s == pytest.approx(rec.window_wall_s, rel=0.2, abs=0.005)


def test_profile_sees_the_kernels_replayed_from_a_cuda_graph():
    from dlbench.measure.kernels import category, summarise
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=32, precision="bf16", device="cuda",
                           channels_last=True, cuda_graph=True, profile_steps=5,
                           warmup_steps=3, warmup_seconds=0.0, stop=FAST_STOP)
    rec = throughput.measure(cfg, {})
    assert rec.ok and rec.profile["activity"] == "cuda kernels"
    cats = {category(k[0]) for k in rec.profile["kernels"]}
    assert "convolution" in cats, rec.profile["kernels"][:5]
    s = summarise(rec.profile, rec.summary().median_s)
    # Kernel time is part of the step: more than none of it, and not far beyond all of it.
    assert 0 < s["busy"] < 1.5


def test_real_cuda_oom_is_a_row_and_the_next_config_runs():
    from dlbench.jobs import launchers
    free, _ = torch.cuda.mem_get_info()
    # An image batch far larger than the card: float32 3x224x224 is 602 KB per image.
    too_big = int(free / (3 * 224 * 224 * 4)) * 2
    launcher = launchers.inline()
    cfg = ThroughputConfig(model="resnet50", batch_size=too_big, device="cuda", warmup_steps=1,
                           warmup_seconds=0.0, stop=FAST_STOP)
    rec = launcher.run(cfg, {})
    assert rec.error_type == "oom"
    ok = launcher.run(ThroughputConfig(model="tiny_cnn", batch_size=8, device="cuda",
                                       warmup_steps=1, warmup_seconds=0.0, stop=FAST_STOP), {})
    assert ok.ok


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_cuda_graph_step_trains_like_eager(precision):
    """The captured step really does the update: same parameters as eager after as many steps.
    (Its first call runs three eager warm-up steps, then the capture, then one replay.) In fp16
    the captured GradScaler skips and rescales on the device as the eager one does."""
    from dlbench.models import get_model
    spec, device = get_model("tiny_cnn"), torch.device("cuda")
    params, scales = {}, {}
    for graph, calls in ((False, 9), (True, 6)):  # 6 graphed calls = 3 warm-up + 6 replays
        torch.manual_seed(0)
        cfg = ThroughputConfig(model="tiny_cnn", batch_size=16, precision=precision,
                               device="cuda", cuda_graph=graph, optimizer_impl="fused")
        model = spec.build().to(device)
        x, y = spec.make_batch(16, device)
        step = throughput.build_step(cfg, spec, model, x, y, device)
        for _ in range(calls):
            step()
        torch.cuda.synchronize()
        params[graph] = [p.detach().float().clone() for p in model.parameters()]
        scales[graph] = step.scaler.get_scale() if step.scaler is not None else None
    assert scales[False] == scales[True]
    moved = sum((a - b).abs().sum().item() for a, b in zip(params[False], params[True]))
    assert all(torch.allclose(a, b, rtol=1e-3, atol=1e-4) for a, b in zip(params[False],
                                                                           params[True])), moved


def test_measure_with_a_cuda_graph():
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=32, precision="bf16", device="cuda",
                           channels_last=True, cuda_graph=True, optimizer_impl="fused",
                           warmup_steps=3, warmup_seconds=0.0, stop=FAST_STOP)
    rec = throughput.measure(cfg, {})
    assert rec.ok and rec.summary().throughput > 0 and rec.final_loss is not None


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_measure_fp16_training_in_a_cuda_graph_with_a_fused_optimizer(optimizer):
    # GradScaler inside the capture: the fused kernel reads its overflow flag on the device.
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=32, precision="fp16", device="cuda",
                           cuda_graph=True, optimizer=optimizer, optimizer_impl="fused",
                           warmup_steps=3, warmup_seconds=0.0, stop=FAST_STOP)
    rec = throughput.measure(cfg, {})
    assert rec.ok and rec.summary().throughput > 0 and math.isfinite(rec.final_loss)
    assert rec.loss_scale is not None and all(s > 0 for s in rec.loss_scale)
    assert rec.skipped_steps() is not None


def test_compiled_loss_gives_the_losses_of_eager_and_of_the_compiled_model():
    """The loss compiled with the model is the same function: over three training steps (so
    the update is in it too) it tracks eager and the model compiled alone, in fp32, dropout off."""
    from dlbench.models import get_model
    spec, device = get_model("tiny_gpt2"), torch.device("cuda")
    losses = {}
    for compile_mode, with_loss in ((None, False), ("default", False), ("default", True)):
        torch.manual_seed(0)
        cfg = ThroughputConfig(model="tiny_gpt2", batch_size=4, precision="fp32", device="cuda",
                               compile=compile_mode, compile_loss=with_loss)
        # Dropout off: eager and Inductor draw their masks from different generators.
        model = spec.build(32).to(device).eval()
        x, y = spec.make_batch(4, device, 32)
        if compile_mode and not with_loss:  # as measure() does
            model = torch.compile(model)
        step = throughput.build_step(cfg, spec, model, x, y, device)
        losses[cfg.compiled_as] = [float(step()) for _ in range(3)]
        torch._dynamo.reset()
    assert losses["eager"][0] > losses["eager"][2]  # it trains
    for name in ("default", "default+loss"):
        assert losses[name] == pytest.approx(losses["eager"], rel=1e-4), losses


@pytest.mark.parametrize("path", ["eager", "static", "graph", "compile"])
def test_generate_paths_on_the_gpu(path):
    """Every generation path on the GPU: the record splits each request into its tokens, and
    the captured paths time decode steps that are far shorter than the eager ones would be."""
    from dlbench.records.generate import GenerateConfig
    from dlbench.workloads import generate

    r = generate.measure(GenerateConfig(model="test-llama", batch_size=2, prompt_len=16,
                                        output_len=8, precision="bf16", path=path, stop=FAST_STOP,
                                        telemetry_interval_s=None), env={})
    assert r.ok, r.error
    assert all(len(d) == 7 for d in r.decode_s) and len(r.ttft_s) == len(r.step_times_s)
    for total, first, steps in zip(r.step_times_s, r.ttft_s, r.decode_s):
        assert first + sum(steps) <= total * 1.001  # CUDA events inside the request's own
    assert r.memory["kv_cache_bytes"] > 0 and r.memory["allocated_peak_bytes"] > 0


def test_static_graph_generates_what_generate_does():
    """The captured decode step produces generate()'s greedy tokens, request after request."""
    from dlbench.models.lm import get_lm
    from dlbench.records.generate import GenerateConfig
    from dlbench.workloads import generate

    lm = get_lm("test-llama").build_on("cuda", torch.float32)
    prompt = torch.randint(0, 256, (2, 9), device="cuda")
    want = lm.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                       max_new_tokens=6, min_new_tokens=6, do_sample=False, eos_token_id=None,
                       pad_token_id=0)[:, 9:]
    cfg = GenerateConfig(model="test-llama", batch_size=2, prompt_len=9, output_len=6,
                         precision="fp32", path="graph")
    loop = generate.StaticLoop(cfg, lm, prompt, torch.device("cuda"))
    with torch.no_grad():
        step = loop._prepare()
        for _ in range(2):
            loop.prefill()
            got = [loop.token.clone()]
            for _ in range(5):
                step()
                got.append(loop.token.clone())
            assert torch.equal(torch.cat(got, dim=1), want)
