"""dlbench train --framework jax on a tiny separable dataset on the CPU: it reaches the target,
keeps the PyTorch run's record keys, writes the same MLPerf log events from the same rules, and
compiles nothing within the timed run."""

import json
import time

import pytest
import torch

jax = pytest.importorskip("jax", reason="the jax extra is not installed")
pytest.importorskip("flax", reason="the jax extra is not installed")

from dlbench.config import ConfigError  # noqa: E402
from dlbench.data.base import ArrayDataset  # noqa: E402
from dlbench.records.train import TrainConfig  # noqa: E402


def _data(n: int = 320, size: int = 8) -> ArrayDataset:
    """Two classes anyone can tell apart: dark images and bright ones, with noise."""
    g = torch.Generator().manual_seed(0)

    def split(m):
        y = torch.randint(0, 2, (m,), generator=g)
        x = (y.view(m, 1, 1, 1) * 120 + torch.randint(0, 100, (m, 1, size, size), generator=g))
        return x.to(torch.uint8), y
    tx, ty = split(n)
    ex, ey = split(64)
    return ArrayDataset("tiny-bright", tx, ty, ex, ey, 2, (0.5,), (0.25,), "generated")


def _cfg(**kw) -> TrainConfig:
    return TrainConfig(**{"dataset": "tiny-bright", "model": "cnn10_small", "batch_size": 32,
                          "target": 0.9, "max_epochs": 4, "device": "cpu",
                          "throughput_steps": 3, "warmup_epochs": 0.5, "framework": "jax",
                          **kw})


def _events(mllog: str) -> list[str]:
    return [json.loads(line.split(":::MLLOG ", 1)[1])["key"] for line in mllog.splitlines()
            if ":::MLLOG" in line]


def _compiling(events: list[float]):
    """A listener of JAX's compile events (tracing, lowering, XLA's compile): each one's end,
    in ms of the wall clock, as the MLPerf log's ``time_ms``."""
    def heard(event: str, duration_s: float, **_) -> None:
        if event.startswith("/jax/core/compile/"):
            events.append(time.time() * 1e3)
    return heard


def _time_ms(mllog: str, key: str) -> float:
    (t,) = [json.loads(line.split(":::MLLOG ", 1)[1])["time_ms"] for line in mllog.splitlines()
            if ":::MLLOG" in line and f'"key": "{key}"' in line]
    return t


@pytest.mark.slow
def test_jax_reaches_the_target_with_the_pytorch_runs_log_compiling_only_in_init():
    from dlbench.jobs.jax_train import JaxTrainRunner
    from dlbench.training.loop import train_run
    data = _data()
    runner = JaxTrainRunner(mllog=True)
    runner._data[("tiny-bright", None, None)] = data
    compiles: list[float] = []
    listener = _compiling(compiles)
    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        rec = runner.run(_cfg(), {"packages": {}})
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert rec.ok, rec.error
    # Every program the run uses is compiled during init, none in the timed run (a step whose
    # inputs were placed otherwise in init was compiled again in the first epoch: its time to
    # train held a compile)
    start, stop = _time_ms(rec.mllog, "run_start"), _time_ms(rec.mllog, "run_stop")
    assert compiles and not [t for t in compiles if start < t < stop], (start, stop, compiles)
    assert rec.time_to_train_s > 0 and rec.eval_accuracy[-1] >= 0.9
    assert rec.steps_per_epoch == 10 and len(rec.iter_loss) == 10 * rec.epochs
    assert rec.synthetic["per_rank"][0]["steps"] == 3 and rec.synthetic["seconds"] > 0
    assert rec.env["jax"]["jax"] and rec.env["jax"]["compiled_in_init"] is True
    assert not rec.compile_in_first_epoch  # the report's flag for runs stored before the fix
    assert rec.warm_up == {"train": [32], "eval": [64]}  # the shapes init compiled: 320 / 32, 64
    torch_out = train_run(_cfg(framework="torch"), data, torch.device("cpu"), mllog=True,
                          measure_side=False)
    # The same events in the same order, epoch for epoch (both reach the target in epoch 1..4).
    jax_events, torch_events = _events(rec.mllog), _events(torch_out["mllog"])
    head = torch_events.index("run_start")
    assert jax_events[:head + 1] == torch_events[:head + 1]
    assert set(jax_events) == set(torch_events)


@pytest.mark.parametrize("kw, flag", [(dict(gpus=2), "^gpus=2 "), (dict(augment=True),
                                                                 "^augment=True "),
                                      (dict(loader="dataloader"), '^loader="dataloader" ')])
def test_jax_train_refuses_what_it_does_not_do(kw, flag):
    with pytest.raises(ConfigError, match=flag):
        _cfg(**kw)


def test_the_torch_default_keeps_old_train_keys():
    c = _cfg(framework="torch")
    d = {k: v for k, v in c.to_dict().items() if k != "framework"}
    assert TrainConfig.from_dict(d).key() == c.key() != _cfg().key()
