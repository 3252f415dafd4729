"""Suites are built for the device that is there."""

from pathlib import Path

import pytest

from dlbench.config import ConfigError
from dlbench.suites import SUITES, VIEWS, DeviceFacts, canonical, suite_for, view_of_suite

GPU_BF16 = DeviceFacts(cuda=True, bf16=True)
GPU_FP16 = DeviceFacts(cuda=True, bf16=False)
CPU = DeviceFacts(cuda=False, bf16=True)


def test_default_is_cpu_suite_without_gpu():
    suite, configs = suite_for(None, CPU)
    assert suite.name == "cpu"
    assert all(c.device == "cpu" for c in configs)


def test_default_gpu_suite_contents():
    suite, configs = suite_for(None, GPU_BF16)
    assert suite.name == "default"
    train = [c for c in configs if c.mode == "train"]
    assert [c.model for c in train] == ["resnet50", "vgg16", "vit_b_16", "gpt2"]
    assert {c.precision for c in configs} == {"bf16"}
    assert [(c.model, c.mode) for c in configs if c.mode == "eval"] == [("resnet50", "eval")]
    assert all(c.channels_last for c in configs if c.model not in ("bert-base", "gpt2"))
    assert not any(c.channels_last for c in configs if c.model in ("bert-base", "gpt2"))
    assert len(configs) == 5  # 3 processes each: about 5 minutes on an H100


def test_fp16_where_the_gpu_has_no_bf16():
    _, configs = suite_for("default", GPU_FP16)
    assert {c.precision for c in configs} == {"fp16"}


def test_classic_cnn_and_ms_per_batch_suites():
    _, s0 = suite_for("classic-cnn", GPU_BF16)
    assert len(s0) == 24
    assert {(c.precision, c.compile) for c in s0} == {("fp16", None), ("fp16", "default"),
                                                       ("fp32", None), ("fp32", "default")}
    compiled = [c.model for c in s0 if c.compile]
    assert compiled[-2:] == ["nasnet", "nasnet"]  # the longest compile does not hold up the rest
    r50 = {c.precision: c.batch_size for c in s0 if c.model == "resnet50"}
    assert r50 == {"fp16": 512, "fp32": 256}
    _, s2 = suite_for("ms-per-batch", GPU_BF16)
    assert len(s2) == 12 and {c.batch_size for c in s2} == {16}
    assert {c.method for c in s2} == {"fwd-bwd"}


@pytest.mark.parametrize("old,new", [("seed000", "classic-cnn"), ("seed002", "ms-per-batch")])
def test_old_suite_names_build_the_same_suite_and_are_not_listed(old, new):
    suite, configs = suite_for(old, GPU_BF16)
    assert suite.name == new and configs == suite_for(new, GPU_BF16)[1]
    assert old not in SUITES and canonical(old) == new and canonical(new) == new
    assert view_of_suite(old) == view_of_suite(new) == new   # a stored run's table layout
    assert view_of_suite("tune") == "throughput" and view_of_suite(None, "x") == "x"


def test_every_suite_view_is_a_known_view():
    assert {s.view for s in SUITES.values()} <= set(VIEWS)


def test_reading_the_suites_imports_no_torch():
    # `dlbench --help` and `dlbench run --list-suites` read this module.
    import subprocess
    import sys
    code = "import sys, dlbench.suites; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"


def test_gpu_only_suite_on_cpu_names_the_cpu_suite():
    with pytest.raises(ConfigError, match="'cpu' suite"):
        suite_for("default", CPU)
    with pytest.raises(ConfigError, match="unknown"):
        suite_for("nope", CPU)


@pytest.mark.parametrize("name", sorted(SUITES))
def test_every_suite_has_unique_configs(name):
    dev = GPU_BF16 if SUITES[name].gpu_only else CPU
    _, configs = suite_for(name, dev)
    assert len({c.key() for c in configs}) == len(configs)


def test_batches_scale_down_on_smaller_cards():
    from dlbench.suites import gpu_batch
    assert gpu_batch("resnet50") == 1024
    assert gpu_batch("resnet50", 81_559 * 2**20) == 1024
    assert gpu_batch("resnet50", 85_031_714_816) == 1024   # what torch reports for an H100 80GB
    assert gpu_batch("resnet50", 24 * 2**30) == 256      # 1024 * 24/79.6 = 308 -> 256
    assert gpu_batch("gpt2", 16 * 2**30) == 4            # 32 * 16/79.6 = 6.4 -> 4
    _, configs = suite_for("default", DeviceFacts(cuda=True, bf16=True, memory_bytes=24 * 2**30))
    assert {c.model: c.batch_size for c in configs}["resnet50"] == 256


def test_the_default_gpu_suite_runs_every_config_in_several_processes():
    from dlbench.suites import DEFAULT_REPEAT, REPEAT_STOP
    suite, configs = suite_for("default", GPU_BF16)
    assert suite.repeat == DEFAULT_REPEAT >= 3
    assert {c.stop for c in configs} == {REPEAT_STOP}
    # shorter windows and warm-up, never under a second of warm-up (clocks ramp up)
    assert {(c.warmup_steps, c.warmup_seconds) for c in configs} == {(5, 1.0)}


def test_the_cpu_suite_is_sized_for_two_cores():
    # Every figure to a 5% interval in about two minutes on 2 cores: inputs and batches small
    # enough for steps of 0.1-0.55 s on two idle cores (a window of 10 s or more then holds 20
    # steps or more, which its interval needs), and caps that keep the windows, warm-up
    # included, under two minutes where other jobs slow every step.
    from dlbench.suites import CPU_LM_STOP, CPU_STOP
    _, configs = suite_for("cpu", CPU)
    assert [(c.model, c.mode, c.batch_size, c.input_size) for c in configs] == [
        ("resnet50", "train", 8, 112), ("resnet50", "eval", 16, 112),
        ("vit_b_16", "eval", 4, 112), ("bert-base", "train", 1, 64), ("gpt2", "train", 1, 64)]
    assert {(c.precision, c.compile, c.method) for c in configs} == {("fp32", None, "standard")}
    assert {c.stop for c in configs} == {CPU_STOP, CPU_LM_STOP}
    for c in configs:
        assert c.stop.target_rel_ci == 0.05   # the interval the suite promises, flagged if missed
        assert c.stop.confidence == 0.95
        # the minimum time, not the minimum of steps, sizes an idle window; a window of slow
        # steps runs past its cap only until it has its 10
        assert 10.0 <= c.stop.min_seconds < c.stop.max_seconds <= 25.0
        assert 2 <= c.stop.min_steps <= 10
        assert c.warmup_steps <= 2 and c.warmup_seconds <= 1.0
    assert sum(c.stop.min_seconds + c.warmup_seconds for c in configs) <= 75.0     # idle
    assert sum(c.stop.max_seconds + c.warmup_seconds for c in configs) <= 115.0    # capped
    # what the README and the throughput guide say of it is these sums
    least = sum(c.stop.min_seconds + c.warmup_seconds for c in configs)
    most = sum(c.stop.max_seconds + c.warmup_seconds for c in configs)
    root = Path(__file__).resolve().parents[1]
    readme = " ".join((root / "README.md").read_text().split())
    guide = (root / "docs" / "throughput.md").read_text()
    assert f"its windows and warm-ups {least:.0f} to {most:.0f} s in all" in readme
    assert f"Its windows and warm-ups take {least:.0f} s at least and {most:.0f} s at most" in guide
    assert "each figure to a 5% interval" in readme


def test_the_other_suites_run_one_process_per_config():
    assert {name: s.repeat for name, s in SUITES.items() if name != "default"} == {
        "cpu": 1, "classic-cnn": 1, "ms-per-batch": 1, "smoke": 1}
    assert "one process per config" in SUITES["cpu"].description
