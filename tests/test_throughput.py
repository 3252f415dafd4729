"""The throughput workload on the CPU with the tiny models: real forward/backward, real timing."""

import pytest
import torch
from conftest import FAST_STOP

from dlbench.config import ConfigError
from dlbench.jobs import launchers
from dlbench.models import get_model
from dlbench.records.base import ErrorType
from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
from dlbench.workloads import throughput
from dlbench.workloads.devices import UnsupportedError, check_supported


def cfg(**kw) -> ThroughputConfig:
    base = dict(model="tiny_cnn", batch_size=8, device="cpu", warmup_steps=2, warmup_seconds=0.0,
                stop=FAST_STOP)
    base.update(kw)
    return ThroughputConfig(**base)


@pytest.mark.parametrize("kw", [
    dict(mode="train"), dict(mode="eval"), dict(precision="bf16"), dict(precision="fp16"),
    dict(optimizer="adamw"), dict(method="fwd-bwd"), dict(channels_last=True),
    dict(model="tiny_gpt", batch_size=2), dict(model="tiny_mlp"),
])
def test_measure_real_tiny_models(kw, cpu_env):
    rec = throughput.measure(cfg(**kw), cpu_env)
    s = rec.summary()
    assert rec.ok and s is not None
    assert s.steps >= FAST_STOP.min_steps
    assert s.throughput > 0 and s.total_s > 0
    # the window's steps tile it: their sum matches the host clock across it (no gaps)
    assert s.total_s == pytest.approx(rec.window_wall_s, rel=0.05, abs=2e-3)
    assert len(rec.warmup_times_s) >= 2 and rec.first_step_s > 0
    assert rec.stop_reason in ("converged", "time_cap", "step_cap")
    if rec.config.mode == "train":
        assert rec.final_loss is not None and rec.final_loss == rec.final_loss
    assert rec.flops_per_sample and rec.flops_per_sample > 0


def test_tokens_unit_counts_sequence_length(cpu_env):
    rec = throughput.measure(cfg(model="tiny_gpt", batch_size=2, input_size=16), cpu_env)
    assert rec.unit == "tokens" and rec.units_per_sample == 16
    assert rec.units_per_s() == pytest.approx(rec.summary().throughput * 16)


def test_fake_clock_makes_the_window_deterministic(cpu_env):
    t = [0.0]

    def clock():  # every read advances 1/64 s (binary-exact)
        t[0] += 1 / 64
        return t[0]

    rec = throughput.measure(cfg(warmup_steps=1), cpu_env, clock=clock)
    s = rec.summary()
    assert rec.stop_reason == "converged"
    assert set(rec.step_times_s) == {1 / 32}  # two clock reads per measured step
    assert s.throughput == pytest.approx(8 * 32)


def test_oom_becomes_a_row(cpu_env):
    rec = launchers.inline().run(cfg(model="test_oom", batch_size=64), cpu_env)
    assert rec.status == "error" and rec.error_type == ErrorType.OOM
    assert "OutOfMemoryError" in rec.error and rec.summary() is None
    ok = launchers.inline().run(cfg(model="test_oom", batch_size=16), cpu_env)
    assert ok.ok


def test_nan_loss_becomes_a_row(cpu_env):
    rec = launchers.inline().run(cfg(model="test_nan"), cpu_env)
    assert rec.error_type == ErrorType.NAN and "nan" in rec.error.lower()


def test_unsupported_precision_is_refused_before_building():
    spec = get_model("tiny_cnn")
    for prec, words in (("tf32", "NVIDIA GPUs"), ("fp8", "not implemented")):
        with pytest.raises(UnsupportedError, match=words):
            check_supported(cfg(precision=prec), spec, torch.device("cpu"))
    with pytest.raises(UnsupportedError, match="image models"):
        check_supported(cfg(model="tiny_gpt", channels_last=True), get_model("tiny_gpt"),
                        torch.device("cpu"))


def test_measure_with_a_padded_vocabulary(cpu_env):
    plain = throughput.measure(cfg(model="tiny_gpt2", batch_size=2), cpu_env)
    padded = throughput.measure(cfg(model="tiny_gpt2", batch_size=2, pad_vocab=True), cpu_env)
    assert padded.ok and padded.final_loss == padded.final_loss
    assert abs(padded.final_loss) != float("inf")
    # 100 -> 128 rows of width 32, tied: one table grew by 28 x 32 fp32 values.
    assert padded.memory["params_bytes"] - plain.memory["params_bytes"] == 28 * 32 * 4
    assert padded.flops_per_sample == plain.flops_per_sample  # the useful work, unpadded
    with pytest.raises(UnsupportedError, match="no vocabulary"):
        check_supported(cfg(pad_vocab=True), get_model("tiny_cnn"), torch.device("cpu"))


def test_cuda_requested_without_gpu_is_a_clear_error(cpu_env):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    rec = launchers.inline().run(cfg(device="cuda"), cpu_env)
    assert rec.error_type == ErrorType.UNSUPPORTED and 'device="cpu"' in rec.error


def test_config_validation_names_the_flag():
    with pytest.raises(ConfigError, match="^precision must be one of"):
        cfg(precision="fp64")
    with pytest.raises(ConfigError, match="^batch_size must be >= 1"):
        cfg(batch_size=0)
    with pytest.raises(ConfigError, match="^compile must be one of"):
        cfg(compile="fast")


def test_config_key_ignores_how_long_it_was_measured():
    a, b = cfg(), cfg(warmup_steps=50, stop=FAST_STOP.__class__())
    assert a.key() == b.key()
    assert cfg(batch_size=9).key() != a.key()


def test_record_round_trip(cpu_env):
    rec = throughput.measure(cfg(), cpu_env)
    back = ThroughputRecord.from_dict(rec.to_dict())
    assert back == rec
    assert back.summary() == rec.summary()


def test_precision_flags_are_restored():
    before = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    with throughput.precision_flags("tf32", torch.device("cpu")):
        assert torch.get_float32_matmul_precision() == "high"
    assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before


def test_skipped_fp16_steps_are_counted_from_the_loss_scale():
    from dlbench.records.throughput import ThroughputConfig, ThroughputRecord
    cfg = ThroughputConfig(model="tiny_cnn", batch_size=4, precision="fp16", device="cpu")
    rec = ThroughputRecord(config=cfg, env={}, step_times_s=(0.1,), samples_per_step=4,
                           loss_scale=(65536.0, 8192.0))
    assert rec.skipped_steps() == 3
    again = ThroughputRecord.from_dict(rec.to_dict())
    assert again.loss_scale == (65536.0, 8192.0) and again.skipped_steps() == 3
    assert ThroughputRecord(config=cfg, env={}).skipped_steps() is None


def test_autotuning_can_be_turned_off_for_threaded_replicas():
    # nn.DataParallel's replica threads would autotune cuDNN again on every step.
    from dlbench.workloads.throughput import precision_flags
    saved = torch.backends.cudnn.benchmark
    with precision_flags("bf16", torch.device("cuda")):
        assert torch.backends.cudnn.benchmark
    with precision_flags("bf16", torch.device("cuda"), autotune=False):
        assert not torch.backends.cudnn.benchmark
    assert torch.backends.cudnn.benchmark == saved


def test_fused_sgd_survives_an_overflowed_first_step():
    """fp16's first steps usually overflow; GradScaler then has the fused kernel skip the step,
    and fused SGD's momentum buffers, made with empty_like, must not stay uninitialised."""
    def steps(impl):
        p = torch.nn.Parameter(torch.ones(64))
        opt = throughput.make_optimizer("sgd", [p], impl)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)
        for bad in (True, False, False):
            opt.zero_grad(set_to_none=True)
            loss = (p * (float("inf") if bad else 1.0)).sum()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return p.detach().clone()
    fused, stock = steps("fused"), steps("default")
    assert torch.isfinite(fused).all()
    assert torch.equal(fused, stock)


def test_compile_loss_compiles_one_function_from_input_to_loss(cpu_env, monkeypatch):
    # torch.compile is recorded and bypassed: which callable it is handed is the logic here
    # (the compiled path itself runs on the GPU: benchmarks/tuned.sh).
    handed = []

    def fake_compile(fn, mode=None):
        handed.append((fn, mode))
        return fn
    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: None)
    model_only = throughput.measure(cfg(model="tiny_gpt2", batch_size=2, compile="default"),
                                    cpu_env)
    assert model_only.ok and isinstance(handed[-1][0], torch.nn.Module)
    handed.clear()
    both = throughput.measure(cfg(model="tiny_gpt2", batch_size=2, compile="default",
                                  compile_loss=True), cpu_env)
    assert both.ok and len(handed) == 1
    fn, mode = handed[0]
    assert fn.__name__ == "forward_loss" and mode == "default"
    assert both.final_loss == both.final_loss  # a finite training loss came out of it


def test_compile_loss_needs_a_compiled_training_step():
    with pytest.raises(ConfigError, match="compile_loss needs compile"):
        cfg(compile_loss=True)
    with pytest.raises(ConfigError, match='mode="train"'):
        cfg(compile="default", compile_loss=True, mode="eval")
    c = cfg(compile="default", compile_loss=True)
    assert c.compiled_as == "default+loss" and "compiled+loss" in c.label
    assert cfg(compile="default").compiled_as == "default" and cfg().compiled_as == "eager"
    assert ThroughputConfig.from_dict(c.to_dict()) == c
