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

from dlbench.models import get_model
from dlbench.records.throughput import ThroughputConfig

SRC = str(Path(__file__).resolve().parents[1] / "src")
FAST = ["--min-steps", "5", "--min-time", "0.05", "--max-time", "1", "--warmup", "1",
        "--warmup-time", "0", "--target-ci", "0.05"]
TINY_GPT2 = dict(n_layer=2, n_embd=32, n_head=2, vocab_size=100)


def hf_name(**fields) -> str:
    return "hf:gpt2?" + "&".join(f"{k}={v}" for k, v in fields.items())


def dlbench(*args, cwd, timeout):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, env.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-P", "-m", "dlbench", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=cwd)


def test_the_count_on_meta_is_the_built_models_count():
    transformers = pytest.importorskip("transformers")
    from dlbench.models.size import count_module

    spec = get_model(hf_name(**TINY_GPT2))
    count = spec.count_params()
    reference = transformers.GPT2LMHeadModel(transformers.GPT2Config(**TINY_GPT2))
    expected = sum(p.numel() for p in reference.parameters())  # tied embeddings once
    assert count.total == count.trainable == expected
    assert count == count_module(spec.build())


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
