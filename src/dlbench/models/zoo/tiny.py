"""Tiny and fault-injecting models for tests: they run forward and backward on a CPU in milliseconds."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

#: Largest batch ``SimulatedOOMCNN`` accepts; a bigger one raises ``torch.OutOfMemoryError``.
OOM_BATCH_LIMIT = 32


def _conv_bn(cin: int, cout: int, stride: int) -> nn.Sequential:
    # No conv bias: the BatchNorm shift that follows makes it redundant.
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class TinyCNN(nn.Module):
    """Three conv-BN-ReLU stages, global average pool, linear: about 6.4k parameters."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(_conv_bn(3, 8, 1), _conv_bn(8, 16, 2), _conv_bn(16, 32, 2))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


class SimulatedOOMCNN(TinyCNN):
    """TinyCNN that raises ``torch.OutOfMemoryError`` above ``OOM_BATCH_LIMIT`` samples.

    Lets the batch-size search and the out-of-memory handling be tested without a GPU.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > OOM_BATCH_LIMIT:
            raise torch.OutOfMemoryError(
                f"CUDA out of memory (simulated by test_oom: batch {x.shape[0]} > {OOM_BATCH_LIMIT})"
            )
        return super().forward(x)


class NaNCNN(TinyCNN):
    """TinyCNN whose logits are all NaN, so the loss is NaN: tests the divergence check."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * float("nan")


class TinyMLP(nn.Module):
    """Flatten, linear, ReLU, linear."""

    def __init__(self, input_size: int, num_classes: int = 10, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(3 * input_size * input_size, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class _Block(nn.Module):
    """Pre-norm transformer block with causal SDPA attention."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        # [B, T, D] -> [B, heads, T, D/heads], the layout SDPA expects.
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Two-layer causal language model: ``module(token_ids [B, T]) -> logits [B, T, vocab]``."""

    def __init__(self, vocab: int = 128, max_len: int = 32, dim: int = 32, heads: int = 2,
                 layers: int = 2) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.blocks = nn.ModuleList(_Block(dim, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        x = self.tok(input_ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def tiny_cnn(input_size: int) -> nn.Module:
    """Factory for ``tiny_cnn`` (any input size: the pooling is adaptive)."""
    return TinyCNN()


def tiny_mlp(input_size: int) -> nn.Module:
    """Factory for ``tiny_mlp``; the first layer is sized for ``input_size``."""
    return TinyMLP(input_size)


def tiny_gpt(input_size: int) -> nn.Module:
    """Factory for ``tiny_gpt``; position table sized for ``input_size`` tokens."""
    return TinyGPT(max_len=input_size)


def oom_cnn(input_size: int) -> nn.Module:
    """Factory for ``test_oom``."""
    return SimulatedOOMCNN()


def nan_cnn(input_size: int) -> nn.Module:
    """Factory for ``test_nan``."""
    return NaNCNN()
