"""The size guard: a model whose weights and training state cannot fit on the device is refused
before it is built (one line, exit 2, nothing recorded), from a parameter count on meta."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from fakes import cli

from dlbench.commands.common import as_flags
from dlbench.launch import forking
from dlbench.models import get_model
from dlbench.records.throughput import ThroughputConfig

SRC = str(Path(__file__).resolve().parents[1] / "src")
FAST = ["--min-steps", "5", "--min-time", "0.05", "--max-time", "0.3", "--warmup", "1",
        "--warmup-time", "0", "--target-ci", "0.05"]
TINY_GPT2 = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=100)


def hf_name(**fields) -> str:
    return "hf:gpt2?" + "&".join(f"{k}={v}" for k, v in fields.items())


def dlbench(*args, cwd, timeout):
    """``dlbench ARGS`` in this process: the guard refuses in dlbench's own process, before it
    starts any, and what is tested is what the command says, returns and stores."""
    return cli.run(*args, cwd=cwd, timeout=timeout)


def test_the_count_on_meta_is_the_built_models_count():
    transformers = pytest.importorskip("transformers")
    from dlbench.models.size import count_module

    spec = get_model(hf_name(**TINY_GPT2))
    count = spec.count_params()
    reference = transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY_GPT2))
    expected = sum(p.numel() for p in reference.parameters())  # tied embeddings once
    assert count.total == count.trainable == expected
    assert count == count_module(spec.build())


_BUILD_AFTER_COUNT = """
import sys, torch
from dlbench.models import get_model
spec = get_model("tiny_llama")
if sys.argv[1] == "count":  # transformers is first imported within the count on meta
    assert "transformers" not in sys.modules
    assert spec.count_params().total > 0
torch.manual_seed(0)
emb = spec.build(32).model.get_input_embeddings().weight
print(float(emb.std()), float(emb.flatten()[:4].sum()))
"""


@pytest.mark.slow
def test_a_count_on_meta_leaves_the_models_built_after_it_initialised_as_their_library_does():
    """transformers keeps the initialisers it finds when first imported: imported within a
    count, it must still initialise every model built after it (an embedding N(0, 0.02),
    not PyTorch's N(0, 1)), with the same weights as a process that never counted."""
    pytest.importorskip("transformers")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, env.get("PYTHONPATH", "")]))
    out = {}
    # The counting process is a new interpreter: transformers is first imported there, within
    # the count. The plain one needs only a process where transformers was imported as usual,
    # outside any count: a child of the test session's fork server, which imported it so at its
    # start (tests/conftest.py), where it runs one; a new interpreter where it does not.
    for how, python in (("count", []), ("plain", forking.python_args())):
        p = subprocess.run([sys.executable, *python, "-c", _BUILD_AFTER_COUNT, how],
                           capture_output=True, text=True, timeout=120, env=env)
        assert p.returncode == 0, p.stderr
        out[how] = [float(v) for v in p.stdout.split()]
    std, first = out["count"]
    assert std == pytest.approx(0.02, rel=0.2)  # tiny_llama's initializer_range
    assert out["count"] == out["plain"]


def test_a_deep_stack_is_counted_from_its_first_layers_exactly():
    pytest.importorskip("transformers")
    from dlbench.models.sources import COUNT_ALL_LAYERS

    spec = get_model(hf_name(**dict(TINY_GPT2, n_layer=COUNT_ALL_LAYERS + 5)))
    built = sum(p.numel() for p in spec.build().parameters())
    assert spec.count_params().total == built


def test_bytes_per_parameter_are_a_lower_bound_of_what_a_step_holds():
    from dlbench.workloads.size_guard import bytes_per_param

    def cfg(**kw):
        return ThroughputConfig(**{"model": "tiny_mlp", "batch_size": 2, "device": "cpu", **kw})
    assert bytes_per_param(cfg(mode="eval")) == (4, 4)
    assert bytes_per_param(cfg(mode="eval", precision="bf16")) == (4, 4)  # fp32 under autocast
    assert bytes_per_param(cfg(optimizer="sgd")) == (4, 12)
    assert bytes_per_param(cfg(optimizer="adamw")) == (4, 16)
    assert bytes_per_param(cfg(method="fwd-bwd", model="tiny_cnn")) == (4, 8)


def test_a_model_far_too_large_is_refused_in_seconds_through_the_cli(tmp_path):
    pytest.importorskip("transformers")
    db = tmp_path / "t.db"
    t = time.monotonic()
    p = dlbench("throughput", "-m", hf_name(n_layer=10000), "--device", "cpu", "-b", "1",
                "--db", str(db), *FAST, cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - t
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "70.9 billion parameters" in lines[0] and "GiB" in lines[0], lines[0]
    assert "host's RAM" in lines[0], lines[0]
    assert elapsed < 30, f"refused after {elapsed:.0f} s"
    assert not db.exists()  # refused before the sweep: no run, no row


def test_a_huge_width_is_refused_too(tmp_path):
    pytest.importorskip("transformers")
    p = dlbench("throughput", "-m", hf_name(n_embd=2**17, n_head=2), "--device", "cpu",
                "--mode", "eval", "-b", "1", "--db", str(tmp_path / "t.db"), *FAST,
                cwd=tmp_path, timeout=60)
    assert p.returncode == 2, p.stderr[-3000:]
    assert "billion parameters need at least" in p.stderr and "for eval (weights" in p.stderr


def test_a_model_that_fits_passes_the_guard_and_runs(tmp_path):
    pytest.importorskip("transformers")
    from dlbench.workloads.size_guard import check_fits

    name = hf_name(**TINY_GPT2)
    check_fits(ThroughputConfig(model=name, batch_size=2, device="cpu"), get_model(name),
               torch.device("cpu"))
    p = dlbench("throughput", "-m", name, "--device", "cpu", "-b", "2", "--seq-len", "16",
                "--db", str(tmp_path / "t.db"), "-q", "--json", *FAST, cwd=tmp_path, timeout=180)
    assert p.returncode == 0, p.stderr[-3000:]
    assert json.loads(p.stdout)[0]["status"] == "ok"


def test_the_worker_refuses_too_when_no_preflight_ran(monkeypatch):
    from dlbench.workloads import size_guard, throughput
    from dlbench.workloads.size_guard import ModelTooLargeError

    monkeypatch.setattr(size_guard, "device_memory", lambda device: 1024)  # a 1 KiB device
    cfg = ThroughputConfig(model="tiny_mlp", batch_size=2, device="cpu")
    with pytest.raises(ModelTooLargeError, match="more than the host's RAM"):
        throughput.measure(cfg, env={}, idle_baseline=False)


# -- dlbench scale: each rank's share, as its strategy splits the model ------------------------
def _scaling(strategy: str, gpus: int = 4, optimizer: str = "sgd", offload: bool = False):
    from dlbench.records.scaling import ScalingConfig

    base = ThroughputConfig(model="tiny_llama", batch_size=2, device="cpu", optimizer=optimizer)
    return ScalingConfig(base=base, gpus=gpus, strategy=strategy, offload=offload)


def test_each_strategy_splits_the_state_but_every_rank_builds_the_whole_model():
    from dlbench.models.size import ParamCount
    from dlbench.workloads.size_guard import rank_min_bytes

    p = 1000
    count = ParamCount(total=p, trainable=p)
    assert rank_min_bytes(_scaling("ddp"), count) == (12 * p, 0)
    assert rank_min_bytes(_scaling("ddp", optimizer="adamw"), count) == (16 * p, 0)
    assert rank_min_bytes(_scaling("ps"), count) == (8 * p + p, 0)    # momentum: 1/4 each
    assert rank_min_bytes(_scaling("fsdp", gpus=2), count) == (6 * p, 0)
    # over 4 ranks the shard (3 bytes) is smaller than the model each rank built first (4)
    assert rank_min_bytes(_scaling("fsdp"), count) == (4 * p, 0)
    assert rank_min_bytes(_scaling("tp", gpus=2), count) == (6 * p, 0)
    assert rank_min_bytes(_scaling("fsdp+tp"), count) == (4 * p, 0)
    assert rank_min_bytes(_scaling("fsdp", gpus=2, offload=True), count) == (4 * p, 6 * p)
    frozen = ParamCount(total=p, trainable=p // 2)   # frozen weights: 4 bytes, no state
    assert rank_min_bytes(_scaling("ddp"), frozen) == (4 * p // 2 + 12 * p // 2, 0)


def test_the_ranks_of_one_host_share_its_ram(monkeypatch):
    from dlbench.workloads import size_guard
    from dlbench.workloads.size_guard import ModelTooLargeError, check_scaling_fits

    spec = get_model("tiny_llama")
    p = spec.count_params().total
    # 2 CPU ranks: ddp needs 2 x 12 bytes a parameter, fsdp 2 x 6
    monkeypatch.setattr(size_guard, "device_memory", lambda device: 16 * p)
    check_scaling_fits(_scaling("fsdp", gpus=2), spec, torch.device("cpu"))
    with pytest.raises(ModelTooLargeError, match=r'with strategy="ddp" on 2 rank\(s\): the 2 '
                                                 r'ranks of a host need .*, or shard it '
                                                 r'\(strategy="fsdp"\)$') as err:
        check_scaling_fits(_scaling("ddp", gpus=2), spec, torch.device("cpu"))
    printed = as_flags(err.value)  # the command line's words for the same error
    assert "with --strategy ddp on 2 rank(s)" in printed and printed.endswith(
        "or shard it (--strategy fsdp)")


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_a_model_far_too_large_for_its_ranks_is_refused_by_scale(tmp_path, strategy):
    pytest.importorskip("transformers")
    db = tmp_path / "s.db"
    t = time.monotonic()
    p = dlbench("scale", "-m", hf_name(n_layer=10000), "--device", "cpu", "--gpus", "2",
                "--strategy", strategy, "-b", "1", "--db", str(db), *FAST, cwd=tmp_path,
                timeout=60)
    elapsed = time.monotonic() - t
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert f"70.9 billion parameters with --strategy {strategy} on 2 rank(s)" in lines[0]
    assert "host's RAM" in lines[0] and "every rank builds the whole model" in lines[0]
    assert elapsed < 30, f"refused after {elapsed:.0f} s"
    assert not db.exists()  # no process started, no run, no row


def test_a_rank_refuses_too_when_no_preflight_ran(monkeypatch):
    from dlbench.workloads import size_guard
    from dlbench.workloads.scaling import measure_rank
    from dlbench.workloads.size_guard import ModelTooLargeError

    monkeypatch.setattr(size_guard, "device_memory", lambda device: 1024)
    with pytest.raises(ModelTooLargeError, match='with strategy="ddp" on 1 rank'):
        measure_rank(_scaling("ddp", gpus=1), 0, None)


# -- dlbench generate: the weights against the GPU, or the host's available memory ----------------
def test_a_language_model_far_too_large_is_refused_by_generate_on_the_cpu(tmp_path):
    pytest.importorskip("transformers")
    db = tmp_path / "g.db"
    t = time.monotonic()
    p = dlbench("generate", "-m", hf_name(n_layer=10000), "--device", "cpu", "--db", str(db),
                "--output-len", "2", "--prompt-len", "2", cwd=tmp_path, timeout=60)
    elapsed = time.monotonic() - t
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "70.9 billion parameters need 264.2 GiB for their fp32 weights alone" in lines[0]
    assert "the host's available memory" in lines[0] and "--precision bf16" in lines[0]
    assert elapsed < 30, f"refused after {elapsed:.0f} s"
    assert not db.exists()


def test_a_generation_batch_too_large_for_the_host_is_a_row_not_a_killed_process(monkeypatch):
    pytest.importorskip("transformers")
    import psutil

    from dlbench.models.lm import get_lm, meta_shape
    from dlbench.records.generate import GenerateConfig
    from dlbench.workloads import generate

    name = hf_name(**TINY_GPT2)
    shape = meta_shape(get_lm(name))
    cfg = GenerateConfig(model=name, batch_size=64, prompt_len=8, output_len=8, device="cpu",
                         precision="fp32")
    from dlbench.measure import generation as gen
    per_seq = 2 * gen.kv_cache_bytes(shape, "fp32", 1, 16) + \
        gen.prefill_activation_bytes(shape, "fp32", 8)
    room = int((shape.params * 4 + 4 * per_seq) / 0.9)   # the weights and 4 sequences
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("VM", (), {"available": room}))
    with pytest.raises(torch.OutOfMemoryError, match=r"more than the host's available memory .*"
                                                     r"a batch of \d or less fits$"):
        generate.check_fits(cfg, shape, torch.device("cpu"))
    generate.check_weights_fit(cfg, torch.device("cpu"))  # the weights alone fit
