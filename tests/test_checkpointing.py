"""Activation checkpointing's policies (dlbench.workloads.checkpointing): ``full`` recomputes a
block's matmuls in the backward pass, ``selective`` keeps their outputs; both give the same
gradients as no checkpointing."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from dlbench.cli import build_parser
from dlbench.commands.common import checkpointing_fields
from dlbench.config import ConfigError
from dlbench.models import get_model
from dlbench.records.throughput import ThroughputConfig
from dlbench.workloads.checkpointing import enable_checkpointing, saved_ops
from dlbench.workloads.devices import UnsupportedError


class CountMatmuls(TorchDispatchMode):
    """Counts the matmul ops that run (forward, backward and any recomputation)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in saved_ops():
            self.n += 1
        return func(*args, **(kwargs or {}))


def _step(policy: str | None, model_name: str = "tiny_llama"):
    """One forward and backward of a fresh model (seed 0); its gradients and matmul count."""
    spec = get_model(model_name)
    torch.manual_seed(0)
    model = spec.build()
    model.train()
    if policy:
        enable_checkpointing(model, policy)
    x, _ = spec.make_batch(2, torch.device("cpu"), spec.input_size,
                           generator=torch.Generator().manual_seed(1))
    with CountMatmuls() as count:
        model(x).float().square().mean().backward()
    return [p.grad.clone() for p in model.parameters()], count.n


@pytest.mark.parametrize("model_name", ["tiny_llama", "tiny_cnn"])
def test_selective_keeps_the_matmuls_full_recomputes_them(model_name):
    plain, n_plain = _step(None, model_name)
    full, n_full = _step("full", model_name)
    selective, n_selective = _step("selective", model_name)
    if model_name == "tiny_llama":  # a CNN's convolutions are not matmuls: nothing to count
        assert n_full > n_plain        # the blocks' matmuls run again in the backward pass
        assert n_selective == n_plain  # ... their outputs were kept
    for a, b, c in zip(plain, full, selective):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c)


def test_timm_takes_no_policy():
    class TimmLike(torch.nn.Module):
        def set_grad_checkpointing(self, on: bool) -> None:
            raise AssertionError("not reached")
    with pytest.raises(UnsupportedError, match="takes no policy"):
        enable_checkpointing(TimmLike(), "selective")


def test_policy_config_label_key_and_flag():
    cfg = ThroughputConfig(model="tiny_llama", batch_size=2, checkpointing=True)
    sel = replace(cfg, checkpoint_policy="selective")
    assert "ckpt" in cfg.label and "ckpt=selective" in sel.label
    assert sel.key() != cfg.key()
    # full is the key of a checkpointed result stored before the policy existed
    stored = {k: v for k, v in cfg.to_dict().items() if k != "checkpoint_policy"}
    assert ThroughputConfig.from_dict(stored).key() == cfg.key()
    with pytest.raises(ConfigError, match="selective"):
        ThroughputConfig(model="tiny_llama", batch_size=2, checkpoint_policy="selective")
    with pytest.raises(ConfigError, match="^checkpoint_policy must be one of"):
        replace(cfg, checkpoint_policy="some")
    parser = build_parser()
    for cmd in ("throughput", "scale", "maxbatch"):
        for argv, want in (([], (False, "full")), (["--checkpointing"], (True, "full")),
                           (["--checkpointing", "selective"], (True, "selective"))):
            args = parser.parse_args([cmd, "-m", "tiny_llama", *argv])
            f = checkpointing_fields(args)
            assert (f["checkpointing"], f["checkpoint_policy"]) == want, (cmd, argv)
