"""The JAX models: Flax (Linen) twins of dlbench's PyTorch models, random init, built from code.

Each twin has the PyTorch model's layers, widths and parameter count (``tests/test_jax_models``
compares them), so the FLOPs counted on the PyTorch model (:mod:`dlbench.measure.flops`) are
this model's too. Differences of layout or of a kernel choice (the work is the same):

- images are NHWC, XLA's native layout on GPUs (PyTorch's default is NCHW);
- ``dtype`` is the compute dtype (bf16 for mixed precision) and parameters stay fp32, which
  is what PyTorch's autocast does;
- attention is :func:`jax.nn.dot_product_attention` (its default implementation is XLA's
  einsum, softmax, einsum), where PyTorch's SDPA picks a fused kernel;
- dropout follows :mod:`dlbench.frameworks.dropout`: in training the PyTorch model's config
  rates at the same places (VGG-16's classifier; GPT-2's embedding, residual and attention
  probabilities), in inference none. ``jax.nn.dot_product_attention`` has no dropout, so where
  attention probabilities are dropped (GPT-2 in training, as PyTorch's SDPA does inside its
  kernel) :func:`_attention` writes out that same XLA computation with the dropout between
  softmax and the second einsum.

Flax Linen, not NNX: a Linen model is a pure function of its parameter tree, which is what
``jax.jit`` with donated buffers wants, across every Flax version from 0.10 on; NNX's object
graph costs a split/merge per call unless the step is written around it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import flax.linen as nn  # heavy: jax
import jax  # heavy: jax
import jax.numpy as jnp  # heavy: jax

from dlbench.frameworks.dropout import RATES

# torch's defaults, so both frameworks train the same model: BN momentum 0.1 (Flax counts the
# other way), eps 1e-5; LayerNorm eps 1e-6 (torchvision ViT) and 1e-5 (GPT-2).
_BN = dict(momentum=0.9, epsilon=1e-5)
# torch's default init of conv and linear weights is kaiming-uniform(a=sqrt(5)); He-normal
# (fan-out) is torchvision's ResNet/VGG choice. Init never changes a step's time, only the
# loss curve of ``train``, where CNN10 uses torch's default (see below).
_TORCH_DEFAULT = nn.initializers.variance_scaling(1 / 3, "fan_in", "uniform")


def _bn(train: bool, dtype) -> nn.BatchNorm:
    return nn.BatchNorm(use_running_average=not train, dtype=dtype, **_BN)


# -- CNN10 (dlbench train's 10-layer CNN) -------------------------------------------------------
class CNN10(nn.Module):
    """Three stages of three 3x3 conv-BN-ReLU (width, 2w, 4w), 2x2 average pooling between
    stages, global average pooling, one dense layer (:class:`dlbench.training.models.CNN10`)."""

    num_classes: int = 10
    width: int = 64
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        for i, c in enumerate((self.width, 2 * self.width, 4 * self.width)):
            for _ in range(3):
                x = nn.Conv(c, (3, 3), padding=1, use_bias=False, dtype=self.dtype,
                            kernel_init=_TORCH_DEFAULT)(x)
                x = nn.relu(_bn(train, self.dtype)(x))
            if i < 2:
                x = nn.avg_pool(x, (2, 2), (2, 2))
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes, dtype=self.dtype, kernel_init=_TORCH_DEFAULT)(x)


# -- ResNet-50 v1.5 (torchvision) ---------------------------------------------------------------
class _Bottleneck(nn.Module):
    planes: int
    stride: int
    downsample: bool
    dtype: Any

    @nn.compact
    def __call__(self, x, train: bool):
        conv = lambda c, k, s=1, p=0: nn.Conv(c, (k, k), (s, s), padding=p, use_bias=False,
                                              dtype=self.dtype)
        out = nn.relu(_bn(train, self.dtype)(conv(self.planes, 1)(x)))
        out = nn.relu(_bn(train, self.dtype)(conv(self.planes, 3, self.stride, 1)(out)))  # v1.5
        out = _bn(train, self.dtype)(conv(self.planes * 4, 1)(out))
        if self.downsample:
            x = _bn(train, self.dtype)(conv(self.planes * 4, 1, self.stride)(x))
        return nn.relu(out + x)


class ResNet(nn.Module):
    layers: Sequence[int] = (3, 4, 6, 3)
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(64, (7, 7), (2, 2), padding=3, use_bias=False, dtype=self.dtype)(x)
        x = nn.relu(_bn(train, self.dtype)(x))
        x = nn.max_pool(x, (3, 3), (2, 2), padding=((1, 1), (1, 1)))
        for i, blocks in enumerate(self.layers):
            planes = 64 * 2 ** i
            for b in range(blocks):
                stride = 2 if (b == 0 and i > 0) else 1
                x = _Bottleneck(planes, stride, b == 0, self.dtype)(x, train)
        x = jnp.mean(x, axis=(1, 2))
        return nn.Dense(self.num_classes, dtype=self.dtype)(x)


# -- VGG-16 (torchvision, no batch norm) --------------------------------------------------------
class VGG16(nn.Module):
    num_classes: int = 1000
    dtype: Any = jnp.float32
    dropout: float = RATES["vgg16"]["classifier"]  # torchvision's classifier dropout

    @nn.compact
    def __call__(self, x, train: bool = True):
        for c in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
                  512, 512, 512, "M"):
            if c == "M":
                x = nn.max_pool(x, (2, 2), (2, 2))
            else:
                x = nn.relu(nn.Conv(c, (3, 3), padding=1, dtype=self.dtype)(x))
        # torchvision's AdaptiveAvgPool2d((7, 7)) is the identity at 224 px.
        x = x.reshape(x.shape[0], -1)
        for _ in range(2):
            x = nn.relu(nn.Dense(4096, dtype=self.dtype)(x))
            x = nn.Dropout(self.dropout, deterministic=not train)(x)
        return nn.Dense(self.num_classes, dtype=self.dtype)(x)


# -- transformers: ViT-B/16 (torchvision) and GPT-2 small (transformers) ----------------------
def _attention(q, k, v, causal: bool, drop: nn.Dropout | None):
    """Multi-head attention over [B, T, heads, head_dim]. Without dropout it is
    :func:`jax.nn.dot_product_attention`. With it (``drop``, in training), the computation that
    function's default (XLA) implementation runs, the logits and softmax in fp32, with the
    probabilities dropped before they weight the values, as PyTorch's SDPA does with
    ``dropout_p``: the same work on both sides. Each element is dropped on its own (no
    broadcast mask), as in PyTorch."""
    if drop is None:
        return jax.nn.dot_product_attention(q, k, v, is_causal=causal)
    logits = jnp.einsum("bthd,bshd->bhts", q, k, preferred_element_type=jnp.float32)
    logits = logits * (1.0 / q.shape[-1] ** 0.5)
    if causal:
        t, s = logits.shape[-2:]
        keep = jnp.tril(jnp.ones((t, s), bool))
        logits = jnp.where(keep, logits, jnp.finfo(jnp.float32).min)
    probs = drop(jax.nn.softmax(logits, axis=-1).astype(v.dtype))
    return jnp.einsum("bhts,bshd->bthd", probs, v)


class _Block(nn.Module):
    """Pre-LN transformer block: LN, multi-head attention, residual; LN, MLP (GELU), residual.
    ``dropout`` after the attention projection and after the MLP; ``attn_dropout`` on the
    attention probabilities."""

    dim: int
    heads: int
    mlp: int
    eps: float
    causal: bool
    dropout: float
    dtype: Any
    tanh_gelu: bool = False  # GPT-2's GELU (tanh approximation); ViT's is exact
    attn_dropout: float = 0.0

    @nn.compact
    def __call__(self, x, train: bool):
        b, t, d = x.shape
        h = nn.LayerNorm(epsilon=self.eps, dtype=self.dtype)(x)
        qkv = nn.Dense(3 * d, dtype=self.dtype)(h).reshape(b, t, 3, self.heads, d // self.heads)
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        drop = (nn.Dropout(self.attn_dropout, deterministic=False)
                if train and self.attn_dropout else None)
        a = _attention(q, k, v, self.causal, drop).reshape(b, t, d)
        a = nn.Dense(d, dtype=self.dtype)(a)
        x = x + nn.Dropout(self.dropout, deterministic=not train)(a)
        h = nn.LayerNorm(epsilon=self.eps, dtype=self.dtype)(x)
        h = nn.Dense(self.mlp, dtype=self.dtype)(h)
        h = nn.gelu(h, approximate=self.tanh_gelu)
        h = nn.Dense(d, dtype=self.dtype)(h)
        return x + nn.Dropout(self.dropout, deterministic=not train)(h)


class ViT(nn.Module):
    patch: int = 16
    dim: int = 768
    depth: int = 12
    heads: int = 12
    mlp: int = 3072
    num_classes: int = 1000
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        x = nn.Conv(self.dim, (self.patch, self.patch), (self.patch, self.patch),
                    dtype=self.dtype)(x)
        b = x.shape[0]
        x = x.reshape(b, -1, self.dim)
        cls = self.param("class_token", nn.initializers.zeros, (1, 1, self.dim))
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, self.dim)).astype(x.dtype), x], 1)
        pos = self.param("pos_embedding", nn.initializers.normal(0.02), (1, x.shape[1], self.dim))
        x = x + pos.astype(x.dtype)
        for _ in range(self.depth):
            x = _Block(self.dim, self.heads, self.mlp, 1e-6, False, 0.0, self.dtype)(x, train)
        x = nn.LayerNorm(epsilon=1e-6, dtype=self.dtype)(x)
        return nn.Dense(self.num_classes, dtype=self.dtype)(x[:, 0])


class GPT2(nn.Module):
    vocab: int = 50257
    positions: int = 1024
    dim: int = 768
    depth: int = 12
    heads: int = 12
    dropout: float = RATES["gpt2"]["residual"]  # GPT2Config's resid_pdrop
    dtype: Any = jnp.float32
    tied: bool = True  # GPT-2's lm head is the input embedding; tiny_gpt's is its own
    tanh_gelu: bool = True
    attn_dropout: float = RATES["gpt2"]["attention"]  # GPT2Config's attn_pdrop
    embd_dropout: float = RATES["gpt2"]["embedding"]  # GPT2Config's embd_pdrop

    @nn.compact
    def __call__(self, ids, train: bool = True):
        wte = nn.Embed(self.vocab, self.dim, embedding_init=nn.initializers.normal(0.02),
                       dtype=self.dtype)
        wpe = nn.Embed(self.positions, self.dim, embedding_init=nn.initializers.normal(0.02),
                       dtype=self.dtype)
        x = wte(ids) + wpe(jnp.arange(ids.shape[1]))[None]
        x = nn.Dropout(self.embd_dropout, deterministic=not train)(x)
        for _ in range(self.depth):
            x = _Block(self.dim, self.heads, 4 * self.dim, 1e-5, True, self.dropout,
                       self.dtype, self.tanh_gelu, self.attn_dropout)(x, train)
        x = nn.LayerNorm(epsilon=1e-5, dtype=self.dtype)(x)
        if self.tied:
            return wte.attend(x)  # the lm head tied to the input embedding, as GPT-2's
        return nn.Dense(self.vocab, use_bias=False, dtype=self.dtype)(x)


class TinyCNN(nn.Module):
    """The test model ``tiny_cnn``: three conv-BN-ReLU (8, 16, 32 channels; strides 1, 2, 2),
    global average pooling, one dense layer (:class:`dlbench.models.zoo.tiny.TinyCNN`)."""

    num_classes: int = 10
    dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x, train: bool = True):
        for c, s in ((8, 1), (16, 2), (32, 2)):
            x = nn.Conv(c, (3, 3), (s, s), padding=1, use_bias=False, dtype=self.dtype)(x)
            x = nn.relu(_bn(train, self.dtype)(x))
        return nn.Dense(self.num_classes, dtype=self.dtype)(jnp.mean(x, axis=(1, 2)))


# -- the registry -------------------------------------------------------------------------------
@dataclass(frozen=True)
class JaxModel:
    """A JAX twin of a PyTorch model: ``build(dtype, input_size, num_classes)`` gives the module;
    ``torch_name`` is the PyTorch model whose FLOPs, unit and defaults it shares."""

    name: str
    kind: str  # image | text
    build: Callable[..., nn.Module]
    torch_name: str
    twin: bool = True  # the PyTorch model's architecture (its FLOP count holds); tiny ones: no


def _image(cls, **kw):
    return lambda dtype, size, classes: cls(num_classes=classes, dtype=dtype, **kw)


JAX_MODELS: dict[str, JaxModel] = {m.name: m for m in (
    JaxModel("resnet50", "image", _image(ResNet), "resnet50"),
    JaxModel("vgg16", "image", _image(VGG16), "vgg16"),
    JaxModel("vit_b_16", "image", _image(ViT), "vit_b_16"),
    JaxModel("cnn10", "image", lambda dtype, size, classes: CNN10(classes, 64, dtype), "cnn10"),
    JaxModel("gpt2", "text", lambda dtype, size, vocab: GPT2(
        vocab=vocab, positions=max(1024, size), dtype=dtype), "gpt2"),
    # The registry's tiny test models, for the CPU tests.
    JaxModel("tiny_cnn", "image", _image(TinyCNN), "tiny_cnn"),
    JaxModel("tiny_gpt", "text", lambda dtype, size, vocab: GPT2(
        vocab=vocab, positions=size, dim=32, depth=2, heads=2, dropout=0.0, dtype=dtype,
        tied=False, tanh_gelu=False, attn_dropout=0.0, embd_dropout=0.0), "tiny_gpt"),
)}

#: dlbench train's models that have a JAX twin: name -> build(dtype, in_channels, classes).
JAX_TRAIN_MODELS: dict[str, Callable[..., nn.Module]] = {
    "cnn10": lambda dtype, classes: CNN10(classes, 64, dtype),
    "cnn10_small": lambda dtype, classes: CNN10(classes, 16, dtype),
}


def supported() -> list[str]:
    return sorted(JAX_MODELS)


def get_jax_model(name: str) -> JaxModel:
    """The JAX twin of a registry model, or a ConfigError listing those there are."""
    from dlbench.config import ConfigError
    if name not in JAX_MODELS:
        raise ConfigError(f"-m {name}: no JAX version of this model; --framework jax has "
                          f"{', '.join(m for m in supported() if not m.startswith('tiny'))}")
    return JAX_MODELS[name]


def param_count(module: nn.Module, example: jnp.ndarray) -> int:
    """Parameters of ``module`` (shapes only: nothing is allocated)."""
    shapes = jax.eval_shape(lambda: module.init(
        {"params": jax.random.key(0), "dropout": jax.random.key(1)}, example, train=False))
    return sum(int(jnp.prod(jnp.array(p.shape))) for p in jax.tree_util.tree_leaves(
        shapes["params"]))
