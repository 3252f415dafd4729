"""The JAX training and evaluation step: one ``jax.jit``-compiled function, donated state.

A step is ``state, out = fn(state, x, y)``: the state (parameters, BatchNorm statistics,
optimizer state, step count) is donated, so XLA updates it in place as PyTorch's optimizers do,
and ``out`` is the loss (train) or the logits (eval), never donated, which the timer waits on.
The batch is synthetic and made on the device (random, never zeros), as for PyTorch.

Precision, as PyTorch's autocast: fp32 parameters and optimizer; the model computes in the
compute dtype (bf16 for ``bf16``); the loss in fp32. ``fp32`` is true IEEE fp32 (matmuls and
convolutions at ``highest`` precision: XLA's default on GPUs would use TF32), ``tf32`` allows
TF32. fp16 needs loss scaling, which is not written for JAX: it is refused with a hint (bf16).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from dlbench.config import ConfigError

# JAX grabs 75% of the GPU's memory when its backend starts, unless told otherwise: the peak
# memory of a run would then read as that block, and a PyTorch run in the same process would
# find the GPU three quarters full. Off unless the user set it (the record says which).
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # heavy: jax  # noqa: E402  (after the preallocation setting, which it reads)
import jax.numpy as jnp  # heavy: jax  # noqa: E402
import optax  # heavy: jax  # noqa: E402

COMPUTE_DTYPES = {"fp32": jnp.float32, "tf32": jnp.float32, "bf16": jnp.bfloat16}


def compute_dtype(precision: str):
    if precision not in COMPUTE_DTYPES:
        raise ConfigError(f"--precision {precision} with --framework jax: JAX has no loss "
                          "scaling here; use bf16 (no scaling needed), tf32 or fp32")
    return COMPUTE_DTYPES[precision]


@contextlib.contextmanager
def precision_flags(precision: str) -> Iterator[None]:
    """Matmul/convolution precision for the run, restored after (the jit cache keys on it)."""
    saved = getattr(jax.config, "jax_default_matmul_precision", None)
    jax.config.update("jax_default_matmul_precision",
                      "tensorfloat32" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        jax.config.update("jax_default_matmul_precision", saved)


def make_optimizer(name: str, lr: float | Callable | None = None, nesterov: bool = False,
                   weight_decay: float = 0.0) -> optax.GradientTransformation:
    """``sgd`` (momentum 0.9; lr 1e-3 as the PyTorch step) or ``adamw`` (lr 1e-4); PyTorch's
    SGD adds weight decay to the gradient before momentum, and so does this chain."""
    if name == "sgd":
        sgd = optax.sgd(1e-3 if lr is None else lr, momentum=0.9, nesterov=nesterov)
        return optax.chain(optax.add_decayed_weights(weight_decay), sgd) if weight_decay else sgd
    return optax.adamw(1e-4 if lr is None else lr, weight_decay=weight_decay or 1e-2)


def cross_entropy(logits, labels):
    """Mean cross-entropy in fp32 over every position (a language model's too)."""
    logits = logits.astype(jnp.float32)
    return optax.softmax_cross_entropy_with_integer_labels(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)).mean()


@dataclass
class Built:
    """A model ready to step: its state and the compiled-on-first-call step function."""

    state: dict
    fn: Callable  # fn(state, x, y) -> (state, out)
    x: Any
    y: Any


def init_state(module, example, tx: optax.GradientTransformation | None, seed: int,
               placed=None) -> dict:
    """Random weights (and optimizer state) made in one compiled program, on the devices of
    ``placed`` (a sharding: replicated over a mesh) or the default one. ``example`` gives the
    input's shape and dtype only: every process of a multi-host job makes the same state."""
    shape, dtype = (1, *example.shape[1:]), example.dtype

    def make():
        k = jax.random.key(seed)
        variables = module.init({"params": k, "dropout": k}, jnp.zeros(shape, dtype),
                                train=False)
        state = {"params": variables["params"],
                 "batch_stats": variables.get("batch_stats", {}),
                 "step": jnp.zeros((), jnp.int32)}
        if tx is not None:
            state["opt"] = tx.init(state["params"])
        return state
    return jax.jit(make, out_shardings=placed)()


def _apply(module, state: dict, x, train: bool, step) -> tuple[Any, dict]:
    variables = {"params": state["params"]}
    if state["batch_stats"]:
        variables["batch_stats"] = state["batch_stats"]
    rngs = {"dropout": jax.random.fold_in(jax.random.key(0), step)}
    if train and state["batch_stats"]:
        out, upd = module.apply(variables, x, train=True, mutable=["batch_stats"], rngs=rngs)
        return out, upd["batch_stats"]
    return module.apply(variables, x, train=train, rngs=rngs), state["batch_stats"]


def train_fn(module, tx: optax.GradientTransformation, loss=cross_entropy,
             with_lr: bool = False) -> Callable:
    """The training step, uncompiled: forward, fp32 loss, backward, optimizer update."""
    def step(state, x, y):
        def objective(params):
            out, stats = _apply(module, {**state, "params": params}, x, True, state["step"])
            return loss(out, y), stats
        (value, stats), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
        updates, opt = tx.update(grads, state["opt"], state["params"])
        return {"params": optax.apply_updates(state["params"], updates), "batch_stats": stats,
                "opt": opt, "step": state["step"] + 1}, value
    return step


def fwd_bwd_fn(module) -> Callable:
    """``--method fwd-bwd``: forward, ``out.sum()`` and its gradients; no loss, no optimizer."""
    def step(state, x, y):
        def total(params):
            out, stats = _apply(module, {**state, "params": params}, x, True, state["step"])
            return out.astype(jnp.float32).sum(), stats
        (value, stats), grads = jax.value_and_grad(total, has_aux=True)(state["params"])
        # The gradients are an output, as .grad is kept in PyTorch: else XLA would drop them.
        return {**state, "batch_stats": stats, "step": state["step"] + 1, "grads": grads}, value
    return step


def eval_fn(module) -> Callable:
    """Inference: the compiled program returns the logits alone. Returning the (undonated)
    state from it would make XLA copy every parameter each step."""
    logits = jax.jit(lambda state, x: _apply(module, state, x, False, state["step"])[0])

    def step(state, x, y):
        return state, logits(state, x)
    return step


def synthetic_batch(kind: str, batch: int, size: int, classes: int, seed: int,
                    channels: int = 3, sharding=None) -> tuple[Any, Any]:
    """Random inputs and targets made on the device (NHWC images or token ids)."""
    def make():  # the keys made inside: nothing closed over, so any process can run it
        kx, ky = jax.random.split(jax.random.key(seed + 1))
        if kind == "image":
            return (jax.random.normal(kx, (batch, size, size, channels), jnp.float32),
                    jax.random.randint(ky, (batch,), 0, classes))
        return (jax.random.randint(kx, (batch, size), 0, classes),
                jax.random.randint(ky, (batch, size), 0, classes))
    if sharding is None:
        return jax.jit(make)()
    return jax.jit(make, out_shardings=(sharding, sharding))()


def batch_sharding(devices) -> tuple[Any, Any]:
    """(the batch split over ``devices`` on its first axis, the state replicated on them):
    ``jax.sharding`` over a one-axis mesh (:mod:`dlbench.frameworks.jax.data_parallel`)."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec  # heavy: jax
    mesh = Mesh(list(devices), ("data",))
    return NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())


def build(module, kind: str, mode: str, method: str, optimizer: str, batch: int, size: int,
          classes: int, seed: int, sharding=None, replicated=None) -> Built:
    """State, synthetic batch and jitted step of one config. With ``sharding`` (the batch split
    over a mesh, :mod:`dlbench.frameworks.jax.data_parallel`) the state is placed
    ``replicated`` and XLA's partitioner adds the gradient all-reduce."""
    x, y = synthetic_batch(kind, batch, size, classes, seed, sharding=sharding)
    train = mode == "train"
    tx = make_optimizer(optimizer) if (train and method == "standard") else None
    state = init_state(module, x, tx, seed, replicated)
    if not train:
        fn = eval_fn(module)  # nothing updated: nothing to donate
    elif method == "fwd-bwd":
        fn = jax.jit(fwd_bwd_fn(module), donate_argnums=0)
        state = {**state, "grads": jax.jit(lambda p: jax.tree_util.tree_map(jnp.zeros_like, p))(
            state["params"])}
    else:
        fn = jax.jit(train_fn(module, tx), donate_argnums=0)
    return Built(state, fn, x, y)
