"""Time to accuracy in JAX: the PyTorch run's loop, model, data order, schedule and MLPerf log.

The same run as :func:`dlbench.training.loop.train_run`, step for step: the dataset staged on
the device once during init (``--loader gpu``), each epoch in the order the PyTorch run uses
(``order(n, seed, epoch)``, handed in by the caller: the same permutation, the last partial
batch kept), uint8 images normalised on the device, the learning rate of every step from the
same rule (``lr_at``), SGD with Nesterov momentum (or AdamW) with PyTorch's update rule, the
loss in fp32, an evaluation over the whole test set after every epoch, the clock from
``run_start`` to the end of the evaluation that first reaches the target (MLPerf's). The
caller hands in the hyperparameters, the log and its config events, so both frameworks write the
same MLPerf log from the same rules.

What differs: the weights are drawn by JAX's generator (same distributions, other numbers), the
layout is NHWC, and the step is one XLA program. Both shapes of a step (full batch and the last
partial one) and the evaluation are compiled during init, on throwaway state, as the PyTorch run
autotunes there; MLPerf permits that. Inside an epoch nothing waits on the newest step: the loss
of every step stays on the device; the host waits only on an older step, where the queue is
bounded (the timer of :mod:`dlbench.frameworks.jax.measure`), and reads the losses once when
the epoch ends. Measurement code prints nothing and writes nothing.
"""

from __future__ import annotations

import math
import socket
import time
from typing import Any, Callable

import numpy as np

from dlbench.frameworks.jax import step as jstep
from dlbench.frameworks.jax.measure import JaxStepTimer, jax_device, peak_memory
from dlbench.frameworks.jax.models import JAX_TRAIN_MODELS
from dlbench.measure.window import MeasuredWindow, steps_in_flight
from dlbench.records.train import batch_sizes, book_epoch, book_run_end

import jax  # heavy: jax  # noqa: E402
import jax.numpy as jnp  # heavy: jax  # noqa: E402
import optax  # heavy: jax  # noqa: E402


def _tx(optimizer: str, momentum: float, nesterov: bool, weight_decay: float):
    """The update direction without the learning rate, which each step scales by its own:
    PyTorch's SGD (decay added to the gradient, then momentum) and AdamW (decoupled decay)."""
    if optimizer == "sgd":
        return optax.chain(optax.add_decayed_weights(weight_decay),
                           optax.trace(decay=momentum, nesterov=nesterov))
    return optax.chain(optax.scale_by_adam(b1=momentum, b2=0.999, eps=1e-8),
                       optax.add_decayed_weights(weight_decay))


def _to_nhwc(x) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x).transpose(0, 2, 3, 1))


def train_run(cfg, data, *, hp, lr_at: Callable[[int, int], float], log,
              log_config: Callable[[], None], order: Callable[[int, int, int], Any],
              eval_batch: int, synthetic_warmup: int = 5, measure_side: bool = True,
              on_epoch: Callable[[dict[str, Any]], None] | None = None,
              clock: Callable[[], float] = time.perf_counter) -> dict[str, Any]:
    """Train ``cfg`` (one device) to its target or epoch cap; the raw results, the keys of
    PyTorch's :func:`train_run`. ``hp`` has ``optimizer``, ``peak_lr``, ``momentum``,
    ``nesterov``, ``weight_decay``; ``lr_at(step, steps_per_epoch)`` is the schedule."""
    if cfg.model not in JAX_TRAIN_MODELS:
        from dlbench.config import ConfigError
        raise ConfigError(f"--model {cfg.model} with --framework jax: JAX has "
                          f"{', '.join(sorted(JAX_TRAIN_MODELS))}")
    jdev, _ = jax_device(cfg.device)
    dtype = jstep.compute_dtype(cfg.precision)
    t_init = clock()
    log.start("init_start", t=t_init)
    log_config()
    with jstep.precision_flags(cfg.precision), jax.default_device(jdev):
        return _run(cfg, data, hp, lr_at, log, order, eval_batch, synthetic_warmup,
                    measure_side, on_epoch, clock, t_init, jdev, dtype)


def _run(cfg, data, hp, lr_at, log, order, eval_batch, synthetic_warmup, measure_side,
         on_epoch, clock, t_init, jdev, dtype) -> dict[str, Any]:
    module = JAX_TRAIN_MODELS[cfg.model](dtype, data.num_classes)
    tx = _tx(hp.optimizer, hp.momentum, hp.nesterov, hp.weight_decay)
    c = data.channels
    mean = jnp.asarray(data.mean, jnp.float32).reshape(1, 1, 1, c)
    std = jnp.asarray(data.std, jnp.float32).reshape(1, 1, 1, c)

    def normalise(x):
        return (x.astype(jnp.float32) / 255.0 - mean) / std

    def train_step(state, images, labels, perm, start, lr, n):
        # The batch's indices sliced on the device at a traced offset: one program per batch
        # size (the full one and the last), not one per offset.
        idx = jax.lax.dynamic_slice_in_dim(perm, start, n)
        x, y = normalise(images[idx]), labels[idx]

        def objective(params):
            out, stats = module.apply({"params": params, "batch_stats": state["batch_stats"]},
                                      x, train=True, mutable=["batch_stats"])
            return jstep.cross_entropy(out, y), stats["batch_stats"]
        (loss, stats), grads = jax.value_and_grad(objective, has_aux=True)(state["params"])
        direction, opt = tx.update(grads, state["opt"], state["params"])
        params = jax.tree_util.tree_map(lambda p, d: p - lr * d, state["params"], direction)
        return {"params": params, "batch_stats": stats, "opt": opt}, loss

    def eval_step(state, images, labels, start, n):
        x = normalise(jax.lax.dynamic_slice_in_dim(images, start, n))
        y = jax.lax.dynamic_slice_in_dim(labels, start, n)
        out = module.apply(state, x, train=False).astype(jnp.float32)
        loss = optax.softmax_cross_entropy_with_integer_labels(out, y).sum()
        return (out.argmax(-1) == y).sum(), loss

    step_fn = jax.jit(train_step, donate_argnums=0, static_argnums=6)
    eval_fn = jax.jit(eval_step, static_argnums=4)

    # note: host-to-device copies of the whole set, once, during init (MLPerf's staging)
    train_x = jax.device_put(_to_nhwc(data.train_x), jdev)
    train_y = jax.device_put(np.asarray(data.train_y, np.int32), jdev)
    eval_x = jax.device_put(_to_nhwc(data.eval_x), jdev)
    eval_y = jax.device_put(np.asarray(data.eval_y, np.int32), jdev)
    n_train, n_eval, batch = data.train_len, data.eval_len, cfg.batch_size
    steps = -(-n_train // batch)
    eval_n = min(eval_batch, n_eval)

    # on the device the run's arrays are on: an array placed on a device is another input to
    # a compiled program than one left where JAX put it by default, so a step compiled for the
    # one would be compiled again for the other in the run's first epoch (it was, until this
    # state and the programs' inputs below were placed as the run's are)
    state = jax.device_put(_init_state(module, tx, cfg.seed, (1, *train_x.shape[1:])), jdev)
    est_step_s = _compile(step_fn, eval_fn, state, train_x, train_y, eval_x, eval_y, batch,
                          n_train, n_eval, eval_n, clock)

    out: dict[str, Any] = {
        "rank": 0, "world": 1, "host": socket.gethostname(), "device": jdev.platform,
        "lr": hp.peak_lr, "hyperparameters": hp.to_dict() if hasattr(hp, "to_dict") else None,
        "samples_per_epoch": n_train, "steps_per_epoch": steps,
        "epoch_times_s": [], "eval_times_s": [], "eval_end_s": [], "eval_accuracy": [],
        "eval_loss": [], "train_loss": [], "iter_loss": [], "iter_time_s": [],
        "time_to_train_s": None, "epochs_to_converge": None, "status": "ok",
        "error_type": None, "error": None, "pipeline": None, "synthetic": None,
        "warm_up": {"train": list(batch_sizes(n_train, batch)),
                    "eval": list(batch_sizes(n_eval, eval_n))}}
    in_flight = steps_in_flight(est_step_s)
    t0 = clock()
    out["init_s"] = t0 - t_init
    log.end("init_stop", t=t0)
    log.start("run_start", t=t0)
    global_step = 0
    t_eval_end = t0
    for epoch in range(1, cfg.max_epochs + 1):
        t_epoch = clock()
        log.start("epoch_start", metadata={"epoch_num": epoch}, t=t_epoch)
        perm = jax.device_put(np.asarray(order(n_train, cfg.seed, epoch), np.int32), jdev)
        holder: dict[str, Any] = {}
        timer = JaxStepTimer(lambda: holder["loss"], clock)
        timer.start()
        losses = []
        for i in range(0, n_train, batch):
            lr = lr_at(global_step, steps)  # a host-side float: no sync
            state, holder["loss"] = step_fn(state, train_x, train_y, perm, jnp.int32(i),
                                            jnp.float32(lr), min(batch, n_train - i))
            losses.append(holder["loss"])
            timer.lap()
            timer.throttle(in_flight)  # waits on an older step only: the queue stays fed
            global_step += 1
        step_times = timer.finish()  # note: the epoch's one wait on its last step
        t_end = clock()
        out["epoch_times_s"].append(t_end - t_epoch)
        start_rel = t_epoch - t0
        out["iter_time_s"] += list(start_rel + t for t in np.cumsum(step_times).tolist())
        # read one by one: stacking them on the device first was a program compiled in the run
        iter_loss = np.asarray(jax.device_get(losses), np.float64).tolist()
        out["iter_loss"] += iter_loss
        train_loss = math.fsum(iter_loss) / max(len(iter_loss), 1)
        out["train_loss"].append(train_loss)
        log.end("epoch_stop", metadata={"epoch_num": epoch, "samples_count": n_train}, t=t_end)
        log.event("train_loss", train_loss, metadata={"epoch_num": epoch}, t=t_end)

        t_eval = clock()
        log.start("eval_start", metadata={"epoch_num": epoch}, t=t_eval)
        acc, eval_loss = _evaluate(eval_fn, state, eval_x, eval_y, n_eval, eval_n)
        t_eval_end = clock()
        if book_epoch(out, log, cfg, epoch, acc=acc, eval_loss=eval_loss,
                      train_loss=train_loss, t0=t0, t_epoch=t_epoch, t_end=t_end,
                      t_eval=t_eval, t_eval_end=t_eval_end, peak_lr=hp.peak_lr,
                      on_epoch=on_epoch):
            break
    book_run_end(out, log, cfg, t0, clock(), t_eval_end)
    out["memory"] = peak_memory(jdev)
    if measure_side and cfg.throughput_steps > 0:
        # After run_stop, so the side measurement never touches the time to train.
        out["synthetic"] = _synthetic(step_fn, state, train_x, train_y, batch, cfg,
                                      synthetic_warmup, hp.peak_lr, clock)
    out["mllog"] = log.text()
    return out


def _init_state(module, tx, seed: int, shape: tuple[int, ...]) -> dict[str, Any]:
    """Random weights, their batch statistics and the optimizer's state, made by one compiled
    program: made op by op, each of the model's initialisers was a program of its own for XLA
    to compile (about a hundred for a small CNN, seconds on a CPU)."""
    def make():
        variables = module.init(jax.random.key(seed), jnp.zeros(shape, jnp.float32),
                                train=False)
        return {"params": variables["params"], "batch_stats": variables["batch_stats"],
                "opt": tx.init(variables["params"])}
    return jax.jit(make)()


@jax.jit
def _copy(state):
    """A copy of every array of ``state``, in one program (the step donates its input)."""
    return jax.tree_util.tree_map(jnp.copy, state)


def _compile(step_fn, eval_fn, state, train_x, train_y, eval_x, eval_y, batch, n_train,
             n_eval, eval_n, clock) -> float:
    """Compile every shape the run will use, on throwaway copies of the state (the real one
    is untouched): the full batch, the last partial one, the evaluation's. Returns a step's
    time, to bound the queue by."""
    perm = jax.device_put(np.arange(n_train, dtype=np.int32), train_x.sharding)  # as an epoch's
    for b in batch_sizes(n_train, batch):
        s, loss = step_fn(_copy(state), train_x, train_y, perm, jnp.int32(0), jnp.float32(0.0), b)
        jax.block_until_ready(loss)
    s = _copy(state)
    t = clock()
    s, loss = step_fn(s, train_x, train_y, perm, jnp.int32(0), jnp.float32(0.0), batch)
    jax.block_until_ready(loss)  # note: a sync point, during init
    est = clock() - t
    ev = {"params": state["params"], "batch_stats": state["batch_stats"]}
    for n in batch_sizes(n_eval, eval_n):
        jax.block_until_ready(eval_fn(ev, eval_x, eval_y, 0, n))
    return est


def _evaluate(eval_fn, state, eval_x, eval_y, n_eval: int, eval_n: int) -> tuple[float, float]:
    """Accuracy and mean loss over the whole evaluation set; one read at the end."""
    ev = {"params": state["params"], "batch_stats": state["batch_stats"]}
    parts = [eval_fn(ev, eval_x, eval_y, i, min(eval_n, n_eval - i))
             for i in range(0, n_eval, eval_n)]
    correct = sum(int(c) for c, _ in parts)  # note: a sync point, the evaluation decides
    loss = math.fsum(float(s) for _, s in parts)
    return correct / n_eval, loss / n_eval


def _synthetic(step_fn, state, train_x, train_y, batch: int, cfg, warmup: int, lr: float,
               clock) -> dict[str, Any]:
    """The same step on one fixed batch already on the device, through the measured window:
    the speed without the per-epoch order (what the PyTorch run's side measurement is)."""
    holder = {"state": _copy(state), "loss": None}
    perm = jax.device_put(np.arange(train_x.shape[0], dtype=np.int32), train_x.sharding)
    start = jnp.int32(0)
    lr = jnp.float32(lr)

    def step():
        holder["state"], holder["loss"] = step_fn(holder["state"], train_x, train_y, perm,
                                                  start, lr, batch)
        return holder["loss"]
    window = MeasuredWindow(clock=clock, timer=JaxStepTimer(lambda: holder["loss"], clock),
                            sync=lambda: jax.block_until_ready(holder["loss"]))
    window.first_step(step)
    window.warm_up(step, warmup - 1)
    window.run(step, cfg.throughput_steps)
    times = window.step_times_s
    return {"samples": batch * len(times), "seconds": math.fsum(times), "steps": len(times)}
